"""`agentload run`: one run, played by a Locust child process that reads the run's spec file.

`run_locust(spec)` is the whole of `agentload run` after its options are resolved: the run
directory is checked (nothing is created for a target that does not answer), the embedded
simulator starts when no --host is given, the target and profile are checked
(`preflight`), the spec is written to `RUN_DIR/spec.json`, and Locust runs as a child
(`python -m workload.locust.launch`, quiet on an early Ctrl-C) with `--agent-spec-file`
naming it: no spec on any command line. Stop signals reach it through
`workload.stopping.run_child`. A run that never started (the web UI stopped before its
first test) removes its spec.json and the directories it created. Capacity steps start
the same child (`locust_argv`); a canary's blocks start it through `start_run`, with no
`agentload run` process between the canary and each block's Locust child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from workload.measure import artifacts
from workload.orchestrate.preflight import preflight
from workload.orchestrate.simhost import start_embedded_sim
from workload.run.checks import check_out_dir, check_workers, run_dir_lock
from workload.run.options import OPTIONS
from workload.run.spec import SPEC_FILE, RunSpec, write_spec
from workload.stopping import die_with_parent, ignore_stops, run_child

LOCUSTFILE = Path(__file__).resolve().parent.parent / "locust" / "locustfile.py"


def locust_argv(spec: RunSpec, spec_file: Path, *, python: str = sys.executable) -> list[str]:
    """`python -m workload.locust.launch ...` for this run: the spec file, and Locust's own
    options from the spec (no --run-time: the run clock reads the spec's duration)."""
    cmd = [
        python, "-m", "workload.locust.launch", "-f", str(LOCUSTFILE),
        "--host", spec.host,
        "--users", str(spec.users),
        "--spawn-rate", str(spec.spawn_rate),
        "--agent-spec-file", str(spec_file),
        "--only-summary",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    if spec.web:
        cmd += ["--web-host", "127.0.0.1", "--web-port", str(spec.web_port)]
        cmd += _form_flags(spec)
    else:
        cmd += ["--headless"]
    if spec.workers > 1:
        # A free master port: two distributed runs at once (e.g. both sides of a canary)
        # must not share Locust's default 5557 and swap workers.
        port = _free_port()
        cmd += [
            "--processes", str(spec.workers),
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--master-host", "127.0.0.1", "--master-port", str(port),
        ]  # fmt: skip
    return cmd + list(spec.locust_args)


def _form_flags(spec: RunSpec) -> list[str]:
    """The start form shows what Locust's command line says: give it the run's form options."""
    out: list[str] = []
    for o in OPTIONS:
        if not (o.web and o.locust_flags):
            continue
        # Out only when the user named one: blank in the form means "runs/<new run id>"
        # (the directory agentload run chose is the first run's; a restart gets its own).
        value: Any = spec.options.get(o.name, o.default)
        if value not in (None, ""):
            out += [o.locust_flags[0], str(value)]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_locust(spec: RunSpec) -> int:
    """Play one resolved run to its end; its exit code (docs/ci.md)."""
    run_id = spec.run_id or artifacts.new_run_id()
    out = Path(spec.out) if spec.out else artifacts.default_out_dir(run_id)
    check_workers(spec.workers)
    check_out_dir(out, overwrite=spec.overwrite, create=False)
    spec = spec.replace(run_id=run_id, out=str(out))
    sim = None
    try:
        if not spec.host:
            sim, spec = start_embedded_sim(spec)
        preflight(spec)
        # Created only now (the run will start), and locked before anything in it is checked
        # or removed (--overwrite): a second run into it is refused, never interleaved.
        created, held = _missing_dirs(out), _names(out)
        with run_dir_lock(out):
            check_out_dir(out, overwrite=spec.overwrite)
            spec_file = write_spec(spec, out)
            code = run_child(locust_argv(spec, spec_file), out, measured=lambda: _measured(out))
        ignore_stops()  # over: only the simulator's stop is left
        if SPEC_FILE not in held:
            _remove_if_unused(out, held, created)
        return code
    finally:
        if sim is not None:
            sim.stop()


def start_run(spec: RunSpec, log: Path) -> subprocess.Popen[bytes]:
    """Start a run an orchestrator planned (a canary block, its `out` new) as its Locust child.

    Checked as `agentload run` checks it (`preflight`: a UsageError before the run directory
    is created; a note it prints goes to `log`), its spec.json written, the child's console
    appended to `log`. The child runs in its own session: a terminal's Ctrl-C reaches the
    orchestrator only, which passes one stop on (`stopping.forward_stop`); it is sent SIGTERM
    (a stop: it writes its summary) when the orchestrator dies.
    """
    spec = spec.replace(run_id=spec.run_id or artifacts.new_run_id())
    out = Path(spec.out)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as text, contextlib.redirect_stdout(text):
        preflight(spec)
    spec_file = write_spec(spec, check_out_dir(out, overwrite=spec.overwrite))
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Its own session: two copies of one Ctrl-C a moment apart would be a second press to the
    # child, "stop at once", and its run would lose its summary.
    with open(log, "ab") as fh:  # the child keeps its own handle
        return subprocess.Popen(  # noqa: PLW1509 - preexec_fn only sets the death signal
            locust_argv(spec, spec_file), stdout=fh, stderr=subprocess.STDOUT, env=env,
            preexec_fn=die_with_parent(signal.SIGTERM), start_new_session=True,
        )  # fmt: skip


def discard_unstarted(out: Path) -> None:
    """A run `start_run` started that was stopped before Locust ran leaves nothing behind:
    when spec.json is all its directory holds, both are removed (as `agentload run` does)."""
    if _names(out) == {SPEC_FILE}:
        _remove_if_unused(out, set(), [out])


def _missing_dirs(out: Path) -> list[Path]:
    """`out` and those of its parents that do not exist yet, deepest first: what this run
    creates, and so the most it may remove."""
    missing = []
    for d in [out, *out.parents]:
        if d.exists():
            break
        missing.append(d)
    return missing


def _names(d: Path) -> set[str]:
    """The names in directory `d` (none when it does not exist or cannot be read)."""
    with contextlib.suppress(OSError):
        return {p.name for p in d.iterdir()}
    return set()


def _remove_if_unused(out: Path, held: set[str], created: list[Path]) -> None:
    """A run that never started (a web UI stopped before its first test, a stop while Locust
    started) leaves nothing behind: when its spec.json is all it added to `out` (which held
    `held` before), the spec is removed, and so are the directories this run created, once
    empty. What `out` held before stays as it was."""
    with contextlib.suppress(OSError):
        if _names(out) != held | {SPEC_FILE}:
            return
        (out / SPEC_FILE).unlink()
        for d in created:
            d.rmdir()  # only an empty one; the first that is not ends it


def _measured(out: Path) -> bool:
    """Whether the run recorded a request or a session (its JSONL files, workers' included)."""
    with contextlib.suppress(OSError):
        return any(artifacts.count_lines(out, kind) for kind in ("requests", "sessions"))
    return False
