"""Run the simulator inside this process on a background thread (tests, notebooks).

    with SimThread("fast") as sim:
        httpx.get(sim.url + "/health")

Cheaper than a child process (no interpreter or tokenizer start-up); use
`launcher.SimProcess` when the server must not share the GIL with the caller.
"""

from __future__ import annotations

import asyncio
import threading

from workload.sim.config import build_config
from workload.sim.server import SimServer


class SimThread:
    """A SimServer on its own event loop in a daemon thread; `.url`, `.server`."""

    def __init__(
        self,
        preset: str = "default",
        *,
        sets: list[str] | tuple[str, ...] = (),
        faults: list[str] | tuple[str, ...] = (),
        seed: int = 0,
        **overrides: object,
    ) -> None:
        # overrides are SimConfig fields, never build_config's file_settings/scenarios
        self.cfg = build_config(preset, list(sets), list(faults), **overrides)  # type: ignore[arg-type]
        self.seed = seed
        self.url = ""
        self.server: SimServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 30.0) -> SimThread:
        """Start the loop thread and bind 127.0.0.1 on a free port."""
        self.server = SimServer(self.cfg, self.seed)
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            assert self._loop is not None and self.server is not None
            asyncio.set_event_loop(self._loop)
            try:
                port = self._loop.run_until_complete(self.server.start("127.0.0.1", 0))
                self.url = f"http://127.0.0.1:{port}"
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                failure.append(e)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="agentload-sim", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError("in-process simulator did not start in time")
        if failure:
            raise failure[0]
        return self

    def call(self, fn, *args, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
        """Run `fn(*args)` on the server's loop (safe access to engine state)."""
        assert self._loop is not None

        async def wrapper():  # type: ignore[no-untyped-def]
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close the server and stop the loop thread."""
        if self._loop is None or self.server is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self.server.close(), self._loop)
        fut.result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> SimThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
