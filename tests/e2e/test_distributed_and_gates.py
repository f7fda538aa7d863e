"""Distributed runs add up exactly and send the same traffic; SLO gates set exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parent.parent / "fixtures"


def agentload(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workload.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def rows(run: Path, kind: str) -> list[dict]:
    out = []
    for p in sorted(run.glob(f"{kind}*.jsonl")):
        out += [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    return out


def traffic(run: Path) -> set[tuple]:
    return {
        (r["session_id"], r["step"], r["attempt"], r["request_id"], r["body_hash"])
        for r in rows(run, "requests")
    }


def run_args(out: Path, workers: int) -> list[str]:
    return [
        "run",
        "--profile",
        str(FIXTURES / "e2e_chat.yaml"),
        "--users",
        "4",
        "--duration",
        "60s",
        "--sessions-per-user",
        "2",
        "--workers",
        str(workers),
        "--out",
        str(out),
        "--sim-preset",
        "fast",
        "--scrape-interval",
        "1",
    ]


def test_two_workers_equal_one_worker(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    p1 = agentload(*run_args(one, 1))
    assert p1.returncode == 0, p1.stdout + p1.stderr
    p2 = agentload(*run_args(two, 2))
    assert p2.returncode == 0, p2.stdout + p2.stderr
    assert sorted(p.name for p in two.glob("requests-*.jsonl")) == [
        "requests-0.jsonl",
        "requests-1.jsonl",
    ]
    # Same seed, same sessions: identical bodies whatever the number of workers.
    t1, t2 = traffic(one), traffic(two)
    assert len(t1) == 4 * 2 * 3  # users x sessions x steps
    assert t1 == t2
    # The master's merged aggregate counts exactly what the workers wrote.
    run = json.loads((two / "run.json").read_text())
    overall = run["summary"]["overall"]
    assert overall["requests"] == len(rows(two, "requests"))
    assert overall["sessions"]["completed"] == len(rows(two, "sessions")) == 8
    assert run["workers"] == 2


def test_slo_violation_exits_3_with_junit(tmp_path: Path) -> None:
    out = tmp_path / "gate"
    p = agentload(
        "run",
        "--profile",
        str(FIXTURES / "e2e_chat.yaml"),
        "--users",
        "2",
        "--duration",
        "30s",
        "--sessions-per-user",
        "1",
        "--sim-preset",
        "fast",
        "--out",
        str(out),
        "--slo",
        "chat.ttft_p95_ms=0.001",
        "--slo",
        "chat.session_success_ratio=0.5",
    )
    assert p.returncode == 3, p.stdout + p.stderr
    suite = ET.parse(out / "junit.xml").getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) == 2
    assert sum(1 for c in cases if c.find("failure") is not None) == 1
    assert "FAIL chat: ttft_p95_ms" in p.stdout


def test_slo_pass_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "ok"
    p = agentload(
        "run",
        "--profile",
        str(FIXTURES / "e2e_chat.yaml"),
        "--users",
        "2",
        "--duration",
        "30s",
        "--sessions-per-user",
        "1",
        "--sim-preset",
        "fast",
        "--out",
        str(out),
        "--slo",
        "chat.ttft_p95_ms=60000",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads((out / "run.json").read_text())
    assert [r["passed"] for r in run["slo_results"]] == [True]


def test_errors_above_ratio_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "err"
    p = agentload(
        "run",
        "--profile",
        str(FIXTURES / "e2e_chat.yaml"),
        "--users",
        "2",
        "--duration",
        "30s",
        "--sessions-per-user",
        "2",
        "--sim-preset",
        "fast",
        "--out",
        str(out),
        "--max-error-ratio",
        "0.01",
        "--sim-fault",
        "500=1.0",
    )
    assert p.returncode == 1, p.stdout + p.stderr
    run = json.loads((out / "run.json").read_text())
    assert (
        run["summary"]["overall"]["errors_by_kind"]["http_status"]
        == run["summary"]["overall"]["requests"]
        > 0
    )
