"""Checks made before any traffic starts: each problem is one line and exit 2 (UsageError).

- the output directory is usable (not a file, not under a file, writable) and does
  not hold another run unless `--overwrite` is given;
- the worker count fits the machine;
- SLO overrides name known metrics and classes (`workload.run.spec.check_slos`, through
  `workload.measure.slo.check_slo_overrides`).

Durations, seeds and ports are checked where they are parsed (`workload.run.spec`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from workload.errors import UsageError

# What a run directory holds (docs/artifacts.md); `--overwrite` removes exactly these.
RUN_FILES = (
    "run.json", "stats.json", "junit.xml", "report.html", "metrics.jsonl", "spec.json"
)  # fmt: skip
RUN_GLOBS = ("requests*.jsonl", "sessions*.jsonl")
WORKERS_PER_CPU = 4


def run_files(out: Path) -> list[Path]:
    """The run artifacts already in `out`."""
    found = [out / name for name in RUN_FILES if (out / name).exists()]
    for pattern in RUN_GLOBS:
        found += sorted(out.glob(pattern))
    return found


def check_out_dir(out: str | Path, *, overwrite: bool = False, create: bool = True) -> Path:
    """`out` as a directory this run can write, created if needed. Raises UsageError.

    With `overwrite`, the artifacts of the run it holds are removed (nothing else is);
    without, a directory that holds a run is refused (appending would mix two runs).
    With `create=False` only what can be known without creating it is checked (so a run
    that never starts leaves no empty directory behind).
    """
    out = Path(out)
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == out else f"is under {parent}, which is a file"
            raise UsageError(f"--out {out} {where}; give a directory")
    if out.is_dir():
        old = run_files(out)
        if old and not overwrite:
            raise UsageError(
                f"--out {out} already holds a run ({old[0].name}); choose another directory "
                "or pass --overwrite to replace it"
            )
    if not create:
        return out
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".agentload-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--out {out} is not writable: {e.strerror or e}") from None
    if overwrite:
        for path in run_files(out):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return out


LOCK_NAME = ".agentload.lock"


@contextlib.contextmanager
def run_dir_lock(out: str | Path) -> Iterator[None]:
    """Create the run directory `out` and hold an exclusive lock on it while the run writes
    there; a second run into it is refused at once (UsageError), never
    interleaved with this one's records. The lock file is removed at the end."""
    path = Path(out) / LOCK_NAME
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise UsageError(f"--out {out} is not writable: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise UsageError(
                f"--out {out} is in use by another agentload run (pid {holder}); wait for it "
                "to end or choose another directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
    finally:
        os.close(fd)


def check_workers(workers: int, cpus: int | None = None) -> None:
    """At most WORKERS_PER_CPU worker processes per CPU of this machine."""
    cpus = cpus or os.cpu_count() or 1
    limit = WORKERS_PER_CPU * cpus
    if workers > limit:
        raise UsageError(
            f"bad --workers {workers}: this machine has {cpus} CPU(s); use at most {limit} "
            f"({WORKERS_PER_CPU} per CPU)"
        )
