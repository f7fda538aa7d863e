"""Server lifecycle for the canary: start a side's server, wait until it serves, stop it.

For the one-GPU case the canary starts each side's server itself
(`--baseline-cmd` / `--candidate-cmd`, or `--servers FILE.yaml`), measures
how long it takes to become ready and how much memory it took to get there,
captures its log (stdout and stderr) for the fingerprint, and stops it before
the other side's server starts (sequential and interleaved modes).

A command is split like a shell would (shlex, no shell is run) and must hold
the placeholder ``{port}``: the canary picks a free port and puts it there
(``{host}`` is replaced too). ``--servers`` file format::

    ready_timeout: 600          # seconds, default for both sides (default 600)
    baseline:
      cmd: vllm serve my-model --port {port}     # a string, or a list of arguments
      env: {VLLM_USE_V2_MODEL_RUNNER: "0"}      # added to the canary's environment
      host: 127.0.0.1           # where the server listens (default 127.0.0.1)
      port: 8001                # default: a free port
      ready_timeout: 900        # this side's own time-out
      log: logs/baseline.log    # default OUT/baseline/server.log
    candidate:
      cmd: [vllm, serve, my-model, --port, "{port}", --max-num-seqs, "4"]

Ready means GET /v1/models answers 200 with at least one model, or GET
/health answers 200. A server that exits first, or is not ready within its
time-out, is a start-up failure: a verdict (`StartupFailure`), not a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from workload.errors import ServerConfigError
from workload.measure.artifacts import read_json, write_json
from workload.observe.http_get import http_get
from workload.stopping import die_with_parent, stop_child

PORT_PLACEHOLDER = "{port}"
DEFAULT_READY_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.25
MIB = 1024 * 1024
_MARK = "# agentload canary: "  # lines the canary writes into a server log

# Log lines that say the server ran out of memory while starting (CUDA, CPU, vLLM's KV check).
_OOM = re.compile(
    r"out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError|"
    r"No available memory for the cache blocks|insufficient memory",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ServerSpec:
    """How to start one side's server."""

    side: str
    argv: tuple[str, ...]  # with the {port}/{host} placeholders still in
    env: Mapping[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port is picked
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    log: Path | None = None  # None: OUT/<side>/server.log


class StartupFailure(Exception):  # noqa: N818 - a verdict, not an error of the canary
    """A server that exited, ran out of memory or never became ready while starting."""

    def __init__(self, side: str, reason: str, record: dict[str, Any], log_tail: str) -> None:
        super().__init__(f"{side} failed to start: {reason}")
        self.side, self.reason, self.record, self.log_tail = side, reason, record, log_tail

    def line(self) -> str:
        """One line: who, why, the log and its last lines."""
        tail = " | ".join(ln.strip() for ln in self.log_tail.splitlines() if ln.strip())[-400:]
        return (
            f"{self}"
            + f" (log: {self.record.get('log')}"
            + (f"; last lines: {tail})" if tail else ")")
        )


def split_command(cmd: str | Iterable[Any], what: str) -> tuple[str, ...]:
    """A command string (shell-like quoting) or list -> argv; it must hold {port}."""
    try:
        argv = tuple(shlex.split(cmd)) if isinstance(cmd, str) else tuple(str(a) for a in cmd)
    except ValueError as e:
        raise ServerConfigError(f"{what}: {e}") from None
    if not argv or not argv[0].strip():
        raise ServerConfigError(f"{what} is empty")
    if not any(PORT_PLACEHOLDER in a for a in argv):
        raise ServerConfigError(
            f"{what} must contain the port placeholder {PORT_PLACEHOLDER} "
            "(e.g. '--port {port}'): the canary picks the port"
        )
    return argv


def _num(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ServerConfigError(f"{what} must be a positive number of seconds, got {v!r}")
    return float(v)


def load_servers_file(path: Path, sides: Iterable[str]) -> dict[str, ServerSpec]:
    """Read a --servers YAML file (format in the module docstring)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ServerConfigError(f"--servers {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ServerConfigError(
            f"--servers {path}: not valid YAML ({str(e).splitlines()[0]})"
        ) from None
    if not isinstance(doc, dict):
        raise ServerConfigError(f"--servers {path}: expected a mapping with baseline/candidate")
    sides = tuple(sides)
    unknown = set(doc) - {*sides, "ready_timeout"}
    if unknown:
        raise ServerConfigError(
            f"--servers {path}: unknown key(s) {', '.join(sorted(map(str, unknown)))}"
        )
    default_to = _num(
        doc.get("ready_timeout", DEFAULT_READY_TIMEOUT_S), f"--servers {path}: ready_timeout"
    )
    out = {}
    for side in sides:
        sec = doc.get(side)
        if sec is None:
            continue
        where = f"--servers {path}: {side}"
        if not isinstance(sec, dict):
            raise ServerConfigError(f"{where}: expected a mapping with cmd")
        bad = set(sec) - {"cmd", "env", "host", "port", "ready_timeout", "log"}
        if bad:
            raise ServerConfigError(f"{where}: unknown key(s) {', '.join(sorted(map(str, bad)))}")
        if "cmd" not in sec:
            raise ServerConfigError(f"{where}: cmd is missing")
        env = sec.get("env") or {}
        if not isinstance(env, dict):
            raise ServerConfigError(f"{where}.env: expected a mapping NAME: value")
        port = sec.get("port")
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536
        ):
            raise ServerConfigError(f"{where}.port: expected 1..65535, got {port!r}")
        out[side] = ServerSpec(
            side=side,
            argv=split_command(sec["cmd"], f"{where}.cmd"),
            env={str(k): str(v) for k, v in env.items()},
            host=str(sec.get("host") or "127.0.0.1"),
            port=port,
            ready_timeout_s=_num(sec.get("ready_timeout", default_to), f"{where}.ready_timeout"),
            log=Path(sec["log"]) if sec.get("log") else None,
        )
    return out


def free_port(host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> int:
    """A TCP port nothing listens on now (and not one in `avoid`)."""
    avoid = set(avoid)
    for _ in range(50):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port
    raise ServerConfigError(f"no free port on {host}")  # pragma: no cover


def url_of(host: str, port: int) -> str:
    """The base URL of a server listening on host:port."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _now() -> str:
    return datetime.now(UTC).isoformat()


def tree_rss(pid: int) -> tuple[int, list[int]]:
    """Resident memory (bytes) of a process and all its descendants, and their pids."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, []
    total, pids = 0, []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
            pids.append(p.pid)
    return total, pids


class GpuMemory:
    """GPU memory used by a set of processes, through NVML where it is present."""

    def __init__(self) -> None:
        self.note: str | None = None
        self._nvml: Any = None
        try:
            import pynvml  # type: ignore[import-not-found]  # deferred: optional, GPU hosts

            pynvml.nvmlInit()
            self._nvml = pynvml
        except ImportError:
            self.note = "unknown (no NVML)"
        except Exception as e:  # noqa: BLE001 - NVML present but unusable (no driver, no GPU)
            self.note = f"unknown (NVML: {type(e).__name__})"

    def used(self, pids: Iterable[int]) -> int | None:
        """Bytes of GPU memory the given processes hold on all devices; None without NVML."""
        if self._nvml is None:
            return None
        nv, want, total = self._nvml, set(pids), 0
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                    if p.pid in want and p.usedGpuMemory:
                        total += int(p.usedGpuMemory)
        except Exception:  # noqa: BLE001 - NVML went away mid-run: report what we have
            return total or None
        return total

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


def probe_ready(base_url: str, timeout_s: float = 2.0) -> str | None:
    """The path that says the server is ready (/v1/models with a model, or /health), else None."""
    status, body = http_get(base_url, "/v1/models", None, timeout_s)
    if status == 200 and isinstance(body, bytes):
        with contextlib.suppress(ValueError, AttributeError):
            if json.loads(body).get("data"):
                return "/v1/models"
    if status is None:
        return None  # nothing listens yet
    status, _ = http_get(base_url, "/health", None, timeout_s)
    return "/health" if status == 200 else None


def log_tail(path: Path, n: int = 8) -> str:
    """The last n lines of a log (empty when unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    lines = [ln for ln in lines if not ln.startswith(_MARK)]  # the canary's own lines
    return "\n".join(lines[-n:])


Probe = Callable[[str], str | None]


@dataclass
class Server:
    """One started server process group and what its start-up measured."""

    spec: ServerSpec
    port: int
    log: Path
    start_id: str
    proc: subprocess.Popen | None = None
    record: dict[str, Any] = field(default_factory=dict)
    _t0: float = 0.0
    _rss_max: int = 0
    _gpu_max: int | None = None

    @property
    def url(self) -> str:
        return url_of(self.spec.host, self.port)

    def start(self) -> None:
        """Launch the command in its own process group, stdout+stderr appended to the log."""
        subs = {"{port}": str(self.port), "{host}": self.spec.host}
        argv = [_subst(a, subs) for a in self.spec.argv]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.spec.env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as fh:
            fh.write(f"{_MARK}starting {self.start_id} at {_now()}: {shlex.join(argv)}\n".encode())
            fh.flush()
            self.record.update({
                "start_id": self.start_id, "cmd": argv, "cmd_template": list(self.spec.argv),
                "host": self.spec.host, "port": self.port, "url": self.url, "log": str(self.log),
                "started_at": _now(), "ready_timeout_s": self.spec.ready_timeout_s,
            })  # fmt: skip
            self._t0 = time.monotonic()
            try:
                # preexec_fn only sets the death signal
                self.proc = subprocess.Popen(  # noqa: PLW1509
                    argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True, preexec_fn=die_with_parent(),
                )  # fmt: skip
            except OSError as e:
                self.record.update(
                    ready=False, failure=f"cannot run {argv[0]!r}: {e.strerror or e}"
                )
                raise StartupFailure(
                    self.spec.side, self.record["failure"], self.record, ""
                ) from None
        self.record["pid"] = self.proc.pid

    def sample(self, gpu: GpuMemory) -> None:
        """One memory sample of the process tree (the maximum is kept)."""
        if self.proc is None:
            return
        rss, pids = tree_rss(self.proc.pid)
        self._rss_max = max(self._rss_max, rss)
        used = gpu.used(pids)
        if used is not None:
            self._gpu_max = max(self._gpu_max or 0, used)

    def check(self, probe: Probe) -> bool:
        """True once ready; raises StartupFailure when it exited or its time is up."""
        assert self.proc is not None
        elapsed = time.monotonic() - self._t0
        code = self.proc.poll()
        if code is not None:
            self._fail(_exit_reason(code, elapsed, self.log), code)
        path = probe(self.url)
        if path:
            self.record.update(
                ready=True, ready_probe=path, ready_at=_now(),
                time_to_ready_s=round(time.monotonic() - self._t0, 3),
            )  # fmt: skip
            return True
        if elapsed > self.spec.ready_timeout_s:
            code = self.stop()  # its exit status is how our stop ended it
            self._fail(f"not ready after {self.spec.ready_timeout_s:g} s", code)
        return False

    def finish_memory(self, gpu: GpuMemory) -> None:
        """Record the start-up memory: the maximum tree RSS and GPU memory seen until ready."""
        self.record["rss_mib"] = round(self._rss_max / MIB, 1)
        if self._gpu_max is not None:
            self.record["gpu_memory_mib"] = round(self._gpu_max / MIB, 1)
        else:
            self.record["gpu_memory_mib"] = None
            self.record["gpu_memory_note"] = gpu.note or "unknown (process not on a GPU)"

    def _fail(self, reason: str, code: int | None) -> None:
        self.record.update(ready=False, failure=reason, exit_code=code, stopped_at=_now())
        raise StartupFailure(self.spec.side, reason, self.record, log_tail(self.log))

    def stop(self) -> int | None:
        """SIGINT the process group, then SIGKILL what is left; record when and how it ended."""
        if self.proc is None:
            return None
        code = stop_child(self.proc, sig=signal.SIGINT, timeout_s=STOP_TIMEOUT_S, group=True)
        _reap_group(self.proc.pid)
        self.proc = None
        self.record.setdefault("stopped_at", _now())
        self.record.setdefault("exit_code", code)
        with contextlib.suppress(OSError), open(self.log, "ab") as fh:
            fh.write(f"{_MARK}stopped {self.start_id} at {_now()} (exit {code})\n".encode())
        return code


def _subst(arg: str, subs: Mapping[str, str]) -> str:
    for k, v in subs.items():
        arg = arg.replace(k, v)
    return arg


def _exit_reason(code: int, elapsed: float, log: Path) -> str:
    tail = log_tail(log, 60)
    how = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    oom = bool(_OOM.search(tail)) or code == -signal.SIGKILL
    took = f"{elapsed:.1f}" if elapsed < 10 else f"{elapsed:.0f}"
    return f"{'out of memory at start: ' if oom else ''}{how} after {took} s"


def _reap_group(pgid: int, grace_s: float = 10.0) -> None:
    """Children (e.g. vLLM's engine core) may outlive the leader: wait, then SIGKILL the group."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:  # pragma: no cover - a pid reused by someone else's group
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class ServerPool:
    """The canary's servers: one spec per side; `ensure` runs exactly the sides a step needs.

    Sides not needed are stopped *before* needed ones start (one GPU). Every
    start gets a start id (``baseline#2``) and a record: time to ready,
    start-up RSS and GPU memory, port, log, start and stop times.
    """

    def __init__(
        self, specs: Mapping[str, ServerSpec], out_dir: Path, probe: Probe = probe_ready
    ) -> None:
        self.specs, self.probe = dict(specs), probe
        self.ports: dict[str, int] = {}
        for side, s in self.specs.items():
            self.ports[side] = s.port or free_port(s.host, self.ports.values())
        self.logs = {
            side: s.log or Path(out_dir) / side / "server.log" for side, s in self.specs.items()
        }
        self.running: dict[str, Server] = {}
        self.records: list[dict[str, Any]] = []
        self.failures: list[StartupFailure] = []
        self._starts: dict[str, int] = {}

    def url(self, side: str) -> str:
        return url_of(self.specs[side].host, self.ports[side])

    def ensure(self, sides: Iterable[str], *, restart: bool = False) -> dict[str, dict[str, Any]]:
        """Stop the servers not in `sides` (all with `restart`), start the missing ones, wait.

        Returns the record of the server now serving each side.
        """
        want = [s for s in sides if s in self.specs]
        for side in list(self.running):
            if restart or side not in want:
                self.running.pop(side).stop()
        new = []
        for side in want:
            if side not in self.running:
                n = self._starts[side] = self._starts.get(side, 0) + 1
                srv = Server(self.specs[side], self.ports[side], self.logs[side], f"{side}#{n}")
                print(
                    f"agentload canary: starting the {side} server on port {srv.port}", flush=True
                )
                self.records.append(srv.record)
                try:
                    srv.start()
                except StartupFailure as e:
                    self.failures = [e]
                    raise
                self.running[side] = srv
                new.append(srv)
        self._wait_ready(new)
        return {side: self.running[side].record for side in want}

    def _wait_ready(self, servers: list[Server]) -> None:
        """Sample memory and probe until every server is ready; failures are collected.

        Servers started together (simultaneous mode) are all waited for, so the
        canary knows whether the baseline started when the candidate did not.
        """
        gpu = GpuMemory()
        failures: list[StartupFailure] = []
        try:
            waiting = list(servers)
            while waiting:
                for srv in list(waiting):
                    srv.sample(gpu)
                    try:
                        ready = srv.check(self.probe)
                    except StartupFailure as e:
                        srv.finish_memory(gpu)
                        self.running.pop(srv.spec.side, None)
                        srv.stop()
                        failures.append(e)
                        waiting.remove(srv)
                        continue
                    if ready:
                        srv.finish_memory(gpu)
                        rec = srv.record
                        print(
                            f"agentload canary: {srv.spec.side} server ready after "
                            f"{rec['time_to_ready_s']:.1f} s ({rec['rss_mib']:.0f} MiB RSS)",
                            flush=True,
                        )
                        waiting.remove(srv)
                if waiting:
                    time.sleep(POLL_S)
        finally:
            gpu.close()
        if failures:
            self.failures = failures
            raise failures[0]

    def close(self) -> None:
        """Stop every server still running."""
        for side in list(self.running):
            self.running.pop(side).stop()


def attach_startup(run_dir: Path, record: Mapping[str, Any]) -> None:
    """Put a start-up record into a run directory's run.json as its `startup` block."""
    path = Path(run_dir) / "run.json"
    try:
        run = read_json(path)
    except (OSError, ValueError):
        return  # the run failed before writing run.json; its own error says why
    if isinstance(run, dict):
        run["startup"] = dict(record)
        write_json(path, run)
