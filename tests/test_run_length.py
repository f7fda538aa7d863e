"""A headless run's --duration is time with users running, and a run that finished no request
says so instead of passing.

Real `agentload run` processes against the embedded simulator (loopback), a few seconds each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from workload.measure.artifacts import count_lines


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workload.cli", "run", "--duration", "1s", "--out", str(out),
         *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_shortest_run_measures(tmp_path: Path) -> None:
    # The set-up (tokenizer, prompt pool, target probe) used to run inside the run time, so
    # `--duration 1s` ended before the first answer: 0 requests, exit 0.
    out = tmp_path / "run"
    proc = _run(out, "--sim-preset", "fast")
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    run = json.loads((out / "run.json").read_text())
    assert run["summary"]["overall"]["ok"] >= 1
    assert run["summary"]["overall"]["requests"] == count_lines(out, "requests")
    assert run["duration_s"] >= 1.0  # the users ran for the whole second
    assert run["stopped_by"] == "end of run"


def test_a_run_where_nothing_finished_fails(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # every answer takes far longer than the run: all requests are still in flight at the end
    proc = _run(out, "--sim-set", "ttft_scale=200")
    assert proc.returncode == 1, proc.stderr[-2000:] + proc.stdout[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("agentload: exit 1: no request finished"), last
    assert "Traceback" not in proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["exit_code"] == 1 and "nothing was measured" in run["exit_reason"]
    assert run["summary"]["overall"]["ok"] == 0
    assert (out / "junit.xml").is_file() and (out / "report.html").is_file()
