"""The simulator process: the engine stepped on the event loop's clock, behind the HTTP layer.

The driver runs one engine step, sleeps until the step's modelled end, then
hands each request its new tokens. Requests that arrive meanwhile join the
next step, so latencies come from load the way they do on a GPU.

Steps run on the engine's own clock: while the engine has work, the next step
starts where the previous one ended (a GPU does not wait for the host), not
whenever this process happens to wake up. A CPU-starved simulator therefore
delivers tokens late but does not drift — late wake-ups do not accumulate into
its modelled latencies, so two simulators of the same preset on a busy host
model the same GPU. The step start moves forward only to let a request that
arrived in the meantime join (never before its arrival), and by at most
`MAX_LAG_S` behind the wall clock (after a long stall the engine resynchronises
instead of bursting through minutes of backlog).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

from workload.sim.api import SimApp
from workload.sim.config import SimConfig
from workload.sim.content import ContentModel
from workload.sim.engine import Engine, EngineRequest
from workload.sim.http11 import HttpServer
from workload.sim.promtext import render

# How far the engine clock may trail the wall clock before it resynchronises.
MAX_LAG_S = 1.0


class SimServer:
    """Engine + driver task + HTTP server; `start` binds, `close` stops."""

    def __init__(self, cfg: SimConfig, seed: int = 0, content: ContentModel | None = None):
        self.cfg = cfg
        self.seed = seed
        self.engine = Engine(cfg)
        self.content = content or ContentModel()
        self.app = SimApp(self, seed)
        self.http = HttpServer(self.app.handle)
        self.started_at = time.time()
        self.port = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._labels = f'engine="0",model_name="{cfg.model}"'
        self._last_submit = float("-inf")  # wall time of the latest arrival

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Bind and start stepping; returns the port."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self.port = await self.http.start(host, port)
        self._task = self._loop.create_task(self._drive())
        return self.port

    async def close(self) -> None:
        """Stop the driver and drop connections."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.http.close()

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def submit(self, req: EngineRequest) -> None:
        """Queue a request (QueueFull propagates) and wake the driver."""
        now = self.now()
        self._last_submit = now
        self.engine.add_request(req, now)
        assert self._wake is not None
        self._wake.set()

    def abort(self, req: EngineRequest) -> None:
        """Drop a request whose client left."""
        self.engine.abort(req, self.now())

    async def _drive(self) -> None:
        engine, wake = self.engine, self._wake
        assert wake is not None
        loop = asyncio.get_running_loop()
        clock = float("-inf")  # end of the previous step on the engine clock
        while True:
            if not engine.has_work():
                wake.clear()
                await wake.wait()
                continue
            wall = loop.time()
            ready = None if engine.has_runnable() else engine.next_ready()
            if ready is not None and ready > wall:
                # only requests still in the API-server stage: sleep until the first leaves it
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=ready - wall)
                continue
            # Back to back with the previous step (late wake-ups do not count), but not
            # before the newest arrival and at most MAX_LAG_S behind the wall clock.
            now = min(wall, max(clock, self._last_submit, wall - MAX_LAG_S))
            if ready is not None:
                now = max(now, ready)  # the step that takes it starts when it leaves the API
            out = engine.step(now)
            clock = out.end
            if not out.emitted and not out.prefill_tokens:
                # nothing could run (e.g. every request is mid-prefill under a tiny budget
                # or waiting for blocks): wait for an arrival or a short tick, never spin
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=max(out.duration_s, 0.001))
                continue
            delay = out.end - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            for req, n in out.emitted:
                if n:
                    try:
                        req.sink.on_tokens(n)
                    except Exception as e:  # noqa: BLE001 - one bad response must not stop the engine
                        print(
                            f"ERROR agentload-sim: delivering {req.request_id}: {e!r}",
                            file=sys.stderr,
                        )
                        self.abort(req)

    def render_metrics(self) -> str:
        """The /metrics text."""
        eng = self.engine
        return render(
            eng.stats,
            labels=self._labels,
            running=len(eng.running),
            waiting=eng.num_waiting,
            kv_usage=eng.kv.usage,
            cache_info=eng.cache_info(),
        )
