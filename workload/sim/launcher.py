"""Start the simulator as a child process: `with SimProcess(preset=...) as sim: sim.url`.

The child runs `sys.executable -m workload.sim --port 0 ...` in its own process
group; we read the one "listening on" line from its stdout, wait for /health,
and on stop() terminate the whole group (then kill it if it lingers).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

from workload.errors import SimStartError
from workload.stopping import die_with_parent, stop_child

_READY = re.compile(r"agentload-sim listening on (http://\S+)")
_REPO_ROOT = str(Path(__file__).resolve().parents[2])


class SimProcess:
    """A simulator child process; `.url` once started."""

    def __init__(
        self,
        preset: str = "default",
        *,
        seed: int | None = None,
        faults: list[str] | tuple[str, ...] = (),
        sets: list[str] | tuple[str, ...] = (),
        extra_args: list[str] | tuple[str, ...] = (),
        host: str = "127.0.0.1",
        startup_timeout_s: float = 30.0,
        instance_noise: bool = False,
        instance_seed: int | None = None,
    ) -> None:
        self.args = ["--host", host, "--port", "0", "--preset", preset]
        # deterministic unless asked (tests, the embedded target of `agentload run`); a
        # simulator started from the command line has instance noise on
        if not instance_noise:
            self.args.append("--no-instance-noise")
        if instance_seed is not None:
            self.args += ["--instance-seed", str(instance_seed)]
        if seed is not None:
            self.args += ["--seed", str(seed)]
        for f in faults:
            self.args += ["--fault", f]
        for s in sets:
            self.args += ["--set", s]
        self.args += list(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> SimProcess:
        """Launch, wait for the ready line and /health; raises SimStartError."""
        env = dict(os.environ)
        env["PYTHONPATH"] = _REPO_ROOT + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        env["PYTHONUNBUFFERED"] = "1"
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workload.sim", *self.args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - never outlive `agentload run`
        )
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            self.url = self._read_url(deadline)
            self._wait_health(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _read_url(self, deadline: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        try:
            while time.monotonic() < deadline:
                if not sel.select(timeout=0.1):
                    if self.proc.poll() is not None:
                        raise SimStartError(
                            f"simulator exited with {self.proc.returncode}: {self._last_error()}"
                        )
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self.proc.wait(timeout=5)
                    raise SimStartError(
                        f"simulator exited with {self.proc.returncode}: {self._last_error()}"
                    )
                buf += chunk
                m = _READY.search(buf.decode("utf-8", "replace"))
                if m:
                    return m.group(1)
        finally:
            sel.close()
        raise SimStartError(
            f"simulator did not report its address in {self.startup_timeout_s:.0f} s"
        )

    def _wait_health(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise SimStartError(f"simulator at {self.url} did not pass /health in time")

    def _last_error(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [
            ln for ln in self._stderr.read().decode("utf-8", "replace").splitlines() if ln.strip()
        ]
        return lines[-1] if lines else "(no output)"

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate the process group; kill it if it does not exit in time."""
        proc = self.proc
        if proc is None:
            return
        stop_child(proc, sig=signal.SIGTERM, timeout_s=timeout_s, group=True)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self.proc = None

    def __enter__(self) -> SimProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
