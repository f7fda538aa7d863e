"""`canary` and `capacity` take the same stop path as `run`: against real processes.

Each test starts the command in its own process group against the `fast` simulator
(loopback), stops it mid-traffic the way a terminal (Ctrl-C to the group) or CI (SIGTERM to
the process) would, and checks: the running block or step finished its run (artifacts
complete, its own exit 128 + signal), the command wrote what it had, its last line says
what happened, it exits 128 + the signal, and nothing is left running. Bounded (~60 s each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from workload.measure.artifacts import count_lines
from workload.sim.inprocess import SimThread

pytestmark = pytest.mark.slow

PROFILE = "quickstart"


@pytest.fixture(scope="module")
def sim_url():
    with SimThread("fast") as sim:
        yield sim.url


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "workload.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _wait_for(proc: subprocess.Popen, path: Path, n: int = 2, timeout: float = 90) -> None:
    """Until `path` (a run directory) holds `n` request rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ended early: {proc.communicate()}")
        if path.is_dir() and count_lines(path, "requests") >= n:
            return
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"no traffic in {path} within {timeout:g}s: {proc.communicate(timeout=30)}")


def _stop(proc: subprocess.Popen, sig: int, group: bool) -> tuple[str, str]:
    try:
        if group:
            os.killpg(proc.pid, sig)  # a terminal's Ctrl-C reaches every process of the job
        else:
            proc.send_signal(sig)  # CI's cancel reaches the command alone
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _left_running(out: Path, wait_s: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + wait_s
    while True:
        left = [
            p for p in psutil.process_iter(["cmdline"])
            if p.pid != os.getpid() and str(out) in " ".join(p.info.get("cmdline") or [])
        ]  # fmt: skip
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.3)


def _complete_run(run_dir: Path, code: int) -> dict:
    for name in ("run.json", "stats.json", "report.html"):
        assert (run_dir / name).is_file(), f"{run_dir / name} missing"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["exit_code"] == code
    assert run["summary"]["overall"]["requests"] == count_lines(run_dir, "requests")
    return run


@pytest.mark.parametrize(
    "sig, group, code", [(signal.SIGTERM, False, 143), (signal.SIGINT, True, 130)]
)
def test_canary_stopped_in_its_second_block(tmp_path, sim_url, sig, group, code) -> None:
    out = tmp_path / "canary"
    proc = _start(
        "canary", "--baseline", sim_url, "--candidate", sim_url, "--profile", PROFILE,
        "--users", "2", "--blocks", "3", "--block-s", "8", "--n-boot", "100", "--out", str(out),
    )  # fmt: skip
    for side in ("candidate", "baseline"):  # a loaded machine starts one side's run later
        _wait_for(proc, out / side / "block-1")
    stdout, stderr = _stop(proc, sig, group)
    assert proc.returncode == code, (stdout[-3000:], stderr[-3000:])
    assert "Traceback" not in stdout + stderr and "before the run started" not in stdout + stderr
    name = signal.Signals(sig).name
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(
        f"agentload: exit {code}: interrupted ({name}); canary stopped during "
    ), last
    assert "1 paired block(s) finished on both sides" in last, last
    assert "block-0 of 3 done: baseline exit" in stdout  # each block's outcome, as it ends
    for side in ("baseline", "candidate"):
        _complete_run(out / side / "block-0", 0)
        assert _complete_run(out / side / "block-1", code)["stopped_by"] == name
        assert not (out / side / "block-2").exists()
    cmp = json.loads((out / "comparison.json").read_text())
    assert cmp["verdict"] == "stopped" and cmp["exit_code"] == code
    assert cmp["paired_blocks_complete"] == 1
    assert [r["interrupted"] for r in cmp["block_runs"]] == [False, False, True, True]
    assert not _left_running(out)


def test_capacity_stopped_by_sigterm_mid_step(tmp_path, sim_url) -> None:
    out = tmp_path / "cap"
    proc = _start(
        "capacity", "--host", sim_url, "--profile", PROFILE, "--slo", "ttft_p95_ms=800",
        "--min", "2", "--max", "8", "--step-duration", "30s", "--warmup", "1s", "--out", str(out),
    )  # fmt: skip
    _wait_for(proc, out / "steps" / "01")
    stdout, stderr = _stop(proc, signal.SIGTERM, group=False)
    assert proc.returncode == 143, (stdout[-3000:], stderr[-3000:])
    assert "Traceback" not in stdout + stderr and "before the run started" not in stdout + stderr
    lines = stdout.strip().splitlines()
    assert lines[-1].startswith("agentload: exit 143: interrupted (SIGTERM); capacity search "
                                "stopped after 1 step(s)"), lines[-1]  # fmt: skip
    assert "capacity: not found: stopped by SIGTERM during step 1 (no step passed)" in stdout
    step = out / "steps" / "01"
    assert _complete_run(step, 143)["stopped_by"] == "SIGTERM"
    result = json.loads((out / "capacity.json").read_text())
    assert result["stop_reason"] == "stopped" and result["capacity"] is None
    assert result["stopped_by"] == "SIGTERM" and result["steps"][0]["verdict"] == "stopped"
    assert (out / "capacity.html").is_file()
    assert not _left_running(out)
