"""Running a recording: the proxy on an event loop, the recorder in its own process, one stop path.

``record(options)`` serves until a stop signal (SIGINT, SIGTERM, SIGHUP): the first stops
accepting, lets in-flight exchanges finish for ``grace_s`` (a second signal cuts them now:
recorded as ``stopped``), then the trace is completed and summarized; the exit status is
128 + the signal. ``RecordThread`` runs the same in a background thread (tests, notebooks).

The loop is uvloop's where it is installed (a dependency on Linux and macOS: its C loop
calls each read's callback straight from libuv, without asyncio's selector and handle per
read, which is what 50 streams' events arriving together wait on), else asyncio's own;
``AGENTLOAD_RECORD_LOOP=asyncio`` picks asyncio's (to compare the two; ``options.py``). Which
one ran is in the start-up line and ``summary.json`` (``recorder.event_loop``). With
``processes`` > 1 the other proxy processes on the port are ``workers.py``'s; this process
stays the one that takes the stop signals and tells them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from workload.errors import SetupError, UsageError
from workload.plan.tokens import ServerTokenizer, TiktokenTokenizer
from workload.record.extract import Facts
from workload.record.options import (
    SWITCH_INTERVAL_S,
    RecordOptions,
    event_loop,
    new_loop,
    runner,
)
from workload.record.pipes import ExchangePipe, exchanges_in_order
from workload.record.proxy import RecordingProxy
from workload.record.recorder import Recorder, summary_lines
from workload.record.workers import ProxyProcesses
from workload.stopping import (
    STOP_SIGNALS,
    StopLatch,
    exit_code_for_signal,
    set_parent_death_signal,
    signal_name,
)


def _counters(o: RecordOptions) -> tuple[Any, Callable[[Facts, int], int], Callable[[str], int]]:
    """(encode for the block hashes, prompt counter, text counter) for --tokenizer."""
    tok = (
        TiktokenTokenizer(o.tokenizer.partition(":")[2] or "cl100k_base")
        if o.tokenizer != "server"
        else TiktokenTokenizer()
    )
    if o.tokenizer != "server":
        return tok.encode, lambda _f, local: local, tok.count
    servers: dict[str, ServerTokenizer] = {}

    def count_prompt(f: Facts, local: int) -> int:
        srv = servers.setdefault(f.model or "", ServerTokenizer(o.upstream.url, f.model or ""))
        if f.kind == "chat":
            return srv.count_messages([{"role": m.role, "content": m.text} for m in f.messages])
        return srv.count(f.prompt_text or "")

    def count_text(text: str) -> int:
        srv = next(iter(servers.values()), None)
        return srv.count(text) if srv is not None else tok.count(text)

    return tok.encode, count_prompt, count_text


def make_recorder(o: RecordOptions, loop: str) -> Recorder:
    encode, count_prompt, count_text = _counters(o)
    meta = {
        "upstream": o.upstream.url,
        "listen": f"{o.host}:{o.port}",
        "event_loop": loop,
        "session_header": o.session_header,
        "tokenizer": o.tokenizer,
        "subagents": "infer" if o.subagents else "off",
        "processes": o.processes,
    }
    return Recorder(
        o.out, encode=encode, count_prompt=count_prompt, count_text=count_text,
        keep_content=o.keep_content, subagents=o.subagents, meta=meta,
    )  # fmt: skip


async def _start(o: RecordOptions, sink: Callable[[Any], None]) -> tuple[RecordingProxy, int]:
    proxy = RecordingProxy(
        o.upstream, sink, session_header=o.session_header, numbers=(1, o.processes)
    )
    try:
        port = await proxy.start(o.host, o.port, share_port=o.processes > 1)
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else str(e)
        raise SetupError(
            f"cannot listen on {o.host}:{o.port} ({reason})",
            hint="pick another --port (0 picks a free one)",
        ) from None
    return proxy, port


def record(o: RecordOptions, *, out: Any = None) -> int:
    """Serve until a stop signal; the exit status (128 + the signal), the trace complete."""
    out = out or sys.stdout
    _counters(o)  # a tokenizer that cannot load is one line before anything listens
    loop = event_loop()
    # The recorder's queue thread pickles exchanges beside the proxy's loop: a short GIL
    # switch interval lets the loop stamp and forward a read within ~0.5 ms of its arrival
    # instead of the default 5 ms.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    held: list[RecorderProcess] = []  # made once the port is bound: a refused port leaves no files
    try:
        code = runner(loop)(_serve(o, held, out, loop))
    finally:
        summary = held[0].close() if held else None
    assert summary is not None
    for line in summary_lines(summary):
        print(line, file=out)
    print(f"wrote     {o.out}/trace.jsonl, exchanges.jsonl, summary.json", file=out)
    print(f"agentload: exit {code}: recording stopped ({signal_name(code - 128)})", file=sys.stderr)
    return code


async def _serve(o: RecordOptions, held: list[RecorderProcess], out: Any, name: str) -> int:
    """Long because it is the whole stop path, in order: serve until a stop signal, give
    exchanges in flight the grace (in every proxy process), let the recorder catch up."""
    loop = asyncio.get_running_loop()
    proxy, port = await _start(o, lambda ex: held[0].submit(ex))
    held.append(RecorderProcess(o, name))
    await held[0].attach()
    more = None
    if o.processes > 1:
        more = ProxyProcesses(o, name, port, proxy.clock, held[0].pipes[1:])
        more.wait_ready(f"{o.host}:{port}")
    latch = StopLatch()
    stop, now = asyncio.Event(), asyncio.Event()

    def on_signal(signum: int) -> None:
        what = latch.receive(signum)
        if what == "stop":
            stop.set()
        elif what == "now":
            now.set()
            if more is not None:
                more.now()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    procs = f", {o.processes} processes" if o.processes > 1 else ""
    print(f"agentload record: listening on http://{o.host}:{port}/v1 -> {o.upstream.url} "
          f"(event loop: {name}{procs})", file=out)  # fmt: skip
    print(
        f"agentload record: writing {o.out}/trace.jsonl; Ctrl-C stops and completes it",
        file=out,
        flush=True,
    )
    await stop.wait()
    in_flight = proxy.in_flight + (await more.stop(o.grace_s) if more is not None else 0)
    if in_flight:
        print(f"agentload record: stopping; {in_flight} exchanges in flight get {o.grace_s:g} s "
              "(Ctrl-C again: now)", file=out, flush=True)  # fmt: skip
    await proxy.close_unless(o.grace_s, now.wait())
    if held[0].buffered:
        print(f"agentload record: the recorder is {held[0].buffered} bytes behind; waiting for it "
              "(Ctrl-C again: stop now, losing them)", file=out, flush=True)  # fmt: skip
    now.clear()  # a press during the grace cut the exchanges; only a later one cuts this wait
    await held[0].flush(give_up=now)
    if more is not None:
        done = asyncio.ensure_future(more.wait_done())
        cut = asyncio.ensure_future(now.wait())
        await asyncio.wait({done, cut}, return_when=asyncio.FIRST_COMPLETED)
        cut.cancel()
        if not done.done():
            done.cancel()
            more.kill()
    for sig in STOP_SIGNALS:
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)  # the trace is being completed: late presses wait
    return exit_code_for_signal(latch.signum or signal.SIGINT)


def _recorder_main(o: RecordOptions, loop: str, inboxes: list[Any], outbox: Any) -> None:
    """The recorder's own process: exchanges from the ``inboxes`` pipes (one per proxy
    process) until each has sent None (or its writer closed it), then the summary."""
    for sig in STOP_SIGNALS:  # the parent decides when the recording stops, and tells us
        signal.signal(sig, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)  # rows already appended stay; nothing hangs on
    _counters(o)[0]("warm up")  # the tokenizer's first call builds tables
    rec = make_recorder(o, loop)
    outbox.put("ready")
    for ex in exchanges_in_order(inboxes):
        rec.submit(ex)
    outbox.put(rec.close())


class RecorderProcess:
    """The Recorder in a child process: the proxy's loop only hands exchanges to a pipe, so
    reading bodies, tokenizing and hashing never hold the GIL the loop stamps reads under.
    ``pipes``: one writing end per proxy process (``o.processes``); this process writes
    ``pipes[0]``, the others go to the proxy processes (``workers.ProxyProcesses``)."""

    def __init__(self, o: RecordOptions, loop: str) -> None:
        """``loop``: the name of the event loop the proxy runs on (for the summary)."""
        ctx = multiprocessing.get_context("spawn")
        self._outbox = ctx.Queue()
        ends = [ctx.Pipe(duplex=False) for _ in range(o.processes)]
        self._proc = ctx.Process(
            target=_recorder_main, args=(o, loop, [r for r, _ in ends], self._outbox),
            name="agentload-recorder", daemon=True,
        )  # fmt: skip
        self._proc.start()
        for r, _ in ends:
            r.close()
        self.pipes = [ExchangePipe(w) for _, w in ends]
        ready = self._outbox.get(timeout=120)
        if ready != "ready":
            raise SetupError(f"the recorder did not start ({ready})")

    def alive(self) -> bool:
        return self._proc.is_alive()

    async def attach(self) -> None:
        await self.pipes[0].attach()

    async def flush(self, give_up: asyncio.Event | None = None) -> None:
        await self.pipes[0].flush(self.alive, give_up)

    @property
    def buffered(self) -> int:
        return self.pipes[0].buffered

    def submit(self, ex: Any) -> None:
        self.pipes[0].submit(ex)

    def close(self) -> dict[str, Any]:
        """Finish the recording; the summary. Waits as long as the recorder lives (a long
        trace to finish is no reason to cut it); one that died is one line, not a wait."""
        if not self.pipes[0].ended and self._proc.is_alive():
            self.pipes[0].blocking().send(None)
        for p in self.pipes[1:]:  # proxy processes that never started: their pipes end here
            p.conn.close()
        while True:
            try:
                summary: dict[str, Any] = self._outbox.get(timeout=0.5)
                break
            except queue.Empty:
                if not self._proc.is_alive() and self._outbox.empty():
                    raise SetupError(
                        f"the recorder process ended (exit {self._proc.exitcode}) before "
                        "it wrote its summary",
                        hint="trace.jsonl and exchanges.jsonl hold the rounds it wrote; "
                        "the console above has its error",
                    ) from None
        self._proc.join(30)
        return summary


class RecordThread:
    """A recording proxy on its own loop in a daemon thread: ``.url``, ``.stop()`` -> summary."""

    def __init__(self, options: RecordOptions) -> None:
        self.o = options
        self.url = ""
        self.recorder: Recorder | None = None
        self.event_loop = event_loop()
        self._loop = new_loop(self.event_loop)
        self._proxy: RecordingProxy | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> RecordThread:
        if self.o.processes != 1:
            raise UsageError("RecordThread serves in one process: processes must be 1",
                             hint="use record() (agentload record) for --processes")  # fmt: skip
        self.recorder = make_recorder(self.o, self.event_loop)
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="agentload-record-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        fut = asyncio.run_coroutine_threadsafe(_start(self.o, self.recorder.submit), self._loop)
        self._proxy, port = fut.result(30)
        self.url = f"http://{self.o.host}:{port}"
        return self

    def stop(self, grace_s: float = 5.0) -> dict[str, Any]:
        """Stop the proxy, complete the files; the summary."""
        assert self._proxy is not None and self.recorder is not None
        asyncio.run_coroutine_threadsafe(self._proxy.close(grace_s), self._loop).result(
            grace_s + 30
        )
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        return self.recorder.close()

    def __enter__(self) -> RecordThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if (
            self._proxy is not None
            and self.recorder is not None
            and self._thread is not None
            and self._thread.is_alive()
        ):
            self.stop()
