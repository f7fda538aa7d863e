"""More proxy processes on the recording's port (``--processes N``, Linux's SO_REUSEPORT).

One process forwards one event at a time: at 50 streams whose events arrive together, the
last waits for the 49 sends before it (each a loopback ``send()`` that wakes its reader,
25-60 µs here). With N processes on the port the kernel spreads the connections over them
(by their addresses' hash), so a burst is forwarded N ways at once. Process 0 is
``serve.record``'s own; this module starts the others: each runs a ``RecordingProxy`` on its
own loop, numbers its exchanges apart from the others (process i: i + 1, step N), stamps
them on process 0's clock, and writes them to its own pipe into the one recorder, which
orders them (``pipes.exchanges_in_order``). A client's connection stays with one process,
so its keep-alive and its requests' order are as without them.

The stop path stays process 0's: the stop signals are ignored here (a terminal's Ctrl-C
reaches the whole process group) and process 0 says what to do on a control pipe: "stop"
(stop accepting, give exchanges in flight the grace), "now" (cut them), then each process
writes what it has left to the recorder, ends its pipe and says "done". A process whose
parent dies is killed (rows already in the recorder's files stay).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
from typing import Any

from workload.errors import SetupError
from workload.record.options import SWITCH_INTERVAL_S, RecordOptions, runner
from workload.record.pipes import ExchangePipe
from workload.record.proxy import Clock, RecordingProxy
from workload.stopping import STOP_SIGNALS, set_parent_death_signal

READY_TIMEOUT_S = 60.0


def _proxy_main(
    i: int, o: RecordOptions, loop: str, port: int, anchor: tuple[float, int], pipe: Any,
    control: Any,
) -> None:  # fmt: skip
    """Proxy process ``i`` (1 … N-1) until process 0 says stop and the rest is written."""
    for sig in STOP_SIGNALS:  # process 0 decides when the recording stops, and tells us
        signal.signal(sig, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    runner(loop)(_serve_child(i, o, port, anchor, pipe, control))


async def _serve_child(
    i: int, o: RecordOptions, port: int, anchor: tuple[float, int], pipe: Any, control: Any
) -> None:
    loop = asyncio.get_running_loop()
    out = ExchangePipe(pipe)
    proxy = RecordingProxy(o.upstream, out.submit, session_header=o.session_header,
                           clock=Clock(anchor), numbers=(i + 1, o.processes))  # fmt: skip
    try:
        await proxy.start(o.host, port, share_port=True)
    except OSError as e:
        _say(control, ("failed", os.strerror(e.errno) if e.errno else str(e)))
        return
    await out.attach()
    said: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def read() -> None:
        try:
            said.put_nowait(control.recv())
        except (EOFError, OSError):  # process 0 is gone: stop now
            loop.remove_reader(control.fileno())
            said.put_nowait(("now",))

    loop.add_reader(control.fileno(), read)
    _say(control, ("ready",))
    what = await said.get()
    grace = float(what[1]) if what[0] == "stop" else 0.0
    _say(control, ("in_flight", proxy.in_flight))
    await proxy.close_unless(grace, said.get())
    await out.flush(lambda: True)  # the recorder reads until every pipe has ended
    loop.remove_reader(control.fileno())
    _say(control, ("done",))


def _say(control: Any, msg: tuple[Any, ...]) -> None:
    """Tell process 0; if it is gone (killed: this process is being killed too) say nothing."""
    with contextlib.suppress(OSError):
        control.send(msg)


class ProxyProcesses:
    """Proxy processes 1 … N-1 on ``port``, writing ``pipes`` (the recorder's, one each)."""

    def __init__(
        self, o: RecordOptions, loop: str, port: int, clock: Clock, pipes: list[ExchangePipe]
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._procs: list[Any] = []
        self._controls: list[Any] = []
        for i, pipe in enumerate(pipes, start=1):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(
                target=_proxy_main, args=(i, o, loop, port, clock.anchor, pipe.conn, theirs),
                name=f"agentload-record-proxy-{i}", daemon=True,
            )  # fmt: skip
            p.start()
            theirs.close()
            pipe.conn.close()  # theirs now: the recorder sees the pipe end when they do
            self._procs.append(p)
            self._controls.append(mine)

    def wait_ready(self, where: str) -> None:
        """Every process listening; SetupError (after stopping them) if one cannot."""
        for i, c in enumerate(self._controls, start=1):
            msg = c.recv() if c.poll(READY_TIMEOUT_S) else ("failed", "did not start")
            if msg[0] != "ready":
                self.kill()
                raise SetupError(
                    f"proxy process {i} cannot listen on {where} ({msg[1]})",
                    hint="run with --processes 1",
                )

    async def stop(self, grace_s: float) -> int:
        """Tell every process to stop; how many exchanges they have in flight."""
        for c in self._controls:
            c.send(("stop", grace_s))
        return sum(int(m[1]) for m in await self._replies("in_flight"))

    def now(self) -> None:
        """Cut the exchanges still in flight (a second Ctrl-C)."""
        for c in self._controls:
            with contextlib.suppress(OSError):  # that process has ended
                c.send(("now",))

    async def wait_done(self) -> None:
        """Until every process has written its last exchange to the recorder and ended (or
        died: what it wrote is in the recorder's files)."""
        await self._replies("done")
        for p in self._procs:
            p.join(5)

    async def _replies(self, kind: str) -> list[tuple[Any, ...]]:
        got: list[tuple[Any, ...]] = []
        for p, c in zip(self._procs, self._controls, strict=True):
            while True:
                if c.poll():
                    try:
                        msg = c.recv()
                    except EOFError:
                        break
                    if msg[0] == kind:
                        got.append(msg)
                        break
                elif not p.is_alive():
                    break
                else:
                    await asyncio.sleep(0.005)
        return got

    def kill(self) -> None:
        for p in self._procs:
            if p.is_alive():
                p.kill()
            p.join(5)
