"""Loaded by bench/bench_loop_trace.py into `agentload run`'s Locust process (PYTHONPATH).

Active only in `python -m workload.locust.launch` with AGENTLOAD_LOOP_TRACE set to an output
path. It records, and pickles to that path at exit:

* GC: every collection's generation, wall and CPU ms;
* a heartbeat: a greenlet that sleeps 1 ms and stamps (wall, thread CPU) each time it wakes,
  so a late wake-up says whether the loop was busy (CPU advanced) or the process was off CPU;
* greenlet slices: each stretch a greenlet ran between two switches that used > 0.2 ms of CPU,
  labelled with where it yielded (the workload/locust/geventhttpclient frames);
* per streamed request: every body read (call, return, kernel receive stamp, bytes, content
  events), keyed by request id.
"""

import os
import sys

OUT = os.environ.get("AGENTLOAD_LOOP_TRACE")
if OUT and "workload.locust.launch" in getattr(sys, "orig_argv", []):
    import gc
    import pickle
    import time

    from gevent import monkey

    monkey.patch_all()
    import gevent
    import greenlet

    GC, HB, SL, READS, CUR = [], [], [], {}, {}
    _gc = [0, 0]

    def _on_gc(phase, info):
        if phase == "start":
            _gc[0], _gc[1] = time.perf_counter_ns(), time.thread_time_ns()
        else:
            GC.append(
                (time.time(), info["generation"], (time.perf_counter_ns() - _gc[0]) / 1e6,
                 (time.thread_time_ns() - _gc[1]) / 1e6)
            )  # fmt: skip

    gc.callbacks.append(_on_gc)

    def _label(fr):
        names = []
        top = fr
        while fr is not None and len(names) < 4:
            co = fr.f_code
            if any(k in co.co_filename for k in ("/workload/", "/locust/", "geventhttpclient")):
                names.append(f"{os.path.basename(co.co_filename)}:{co.co_name}")
            fr = fr.f_back
        if names:
            return " < ".join(names)
        co = top.f_code  # none of ours on the stack: where it waits
        return f"other: {os.path.basename(co.co_filename)}:{co.co_name}"

    _last = [time.perf_counter_ns(), time.thread_time_ns()]
    _hub = gevent.get_hub()

    def _trace(event, args):
        now, cpu = time.perf_counter_ns(), time.thread_time_ns()
        wall_ns, cpu_ns = now - _last[0], cpu - _last[1]
        _last[0], _last[1] = now, cpu
        if cpu_ns > 200_000:
            origin = args[0]
            if origin is _hub:
                where = "hub"
            elif origin.gr_frame is not None:
                where = _label(origin.gr_frame)
            else:  # it ended: name what it ran
                fn = getattr(origin, "_run", None) or getattr(origin, "run", None)
                where = f"ended: {getattr(fn, '__qualname__', None) or type(origin).__name__}"
            SL.append((time.time(), wall_ns / 1e6, cpu_ns / 1e6, where))

    greenlet.settrace(_trace)

    def _dump():
        with open(OUT + ".tmp", "wb") as f:
            pickle.dump({"gc": GC, "heartbeat": HB, "slices": SL, "reads": READS}, f)
        os.replace(OUT + ".tmp", OUT)

    def _heartbeat():
        while True:
            HB.append((time.time(), time.thread_time()))
            gevent.sleep(0.001)

    gevent.spawn(_heartbeat)
    import atexit

    atexit.register(_dump)

    import workload.measure.client as _client
    import workload.measure.transport as _transport

    _read_some = _transport._BufferedGeventResponse.read_some

    def read_some(self):
        t_call = time.time_ns()
        data = _read_some(self)
        log = CUR.get(id(self))
        if log is not None:
            n = data.count(b'"content":"') - data.count(b'"content":""')
            log.append((t_call, time.time_ns(), self.rx_ns, len(data), n))
        return data

    _transport._BufferedGeventResponse.read_some = read_some
    _read_stream = _client.Client._read_stream

    def _read_stream_traced(self, resp, reply, sent_ns, deadline_ns):
        CUR[id(resp)] = READS[reply.rec.request_id] = []
        try:
            return _read_stream(self, resp, reply, sent_ns, deadline_ns)
        finally:
            CUR.pop(id(resp), None)

    _client.Client._read_stream = _read_stream_traced
