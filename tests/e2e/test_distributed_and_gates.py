"""Distributed runs add up exactly and send the same traffic; SLO gates set exit codes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.e2e.cli import CHAT_PROFILE, agentload, quick_run
from workload.measure.artifacts import read_records

pytestmark = pytest.mark.slow


def traffic(run: Path) -> set[tuple]:
    rows = read_records(run, "requests")
    return {
        (r["session_id"], r["step"], r["attempt"], r["request_id"], r["body_hash"]) for r in rows
    }


def test_two_workers_equal_one_worker(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    # Long user turns on a short-context server: the planner must clip/compact the same way
    # in every worker as in one process (workers get the master's max_model_len).
    args = ("--scrape-interval", "1", "--set", "classes.chat.user_turn=700",
            "--sim-set", "max_model_len=2200")  # fmt: skip
    p1 = quick_run(one, *args, "--workers", "1", users=4, sessions=2)
    assert p1.returncode == 0, p1.stdout + p1.stderr
    p2 = quick_run(two, *args, "--workers", "2", users=4, sessions=2)
    assert p2.returncode == 0, p2.stdout + p2.stderr
    # Both workers stay alive through their set-up, even on a busy machine (workload/locust/warmup.py).
    assert "lost" not in p2.stderr, p2.stderr
    names = sorted(p.name for p in two.glob("requests-*.jsonl"))
    assert names == ["requests-0.jsonl", "requests-1.jsonl"]
    # Same seed, same sessions: identical bodies whatever the number of workers.
    t1, t2 = traffic(one), traffic(two)
    assert len(t1) == 4 * 2 * 3  # users x sessions x steps
    assert t1 == t2
    # The master's merged aggregate counts exactly what the workers wrote.
    run = json.loads((two / "run.json").read_text())
    overall = run["summary"]["overall"]
    assert overall["requests"] == len(read_records(two, "requests"))
    assert overall["sessions"]["completed"] == len(read_records(two, "sessions")) == 8
    assert run["workers"] == 2


def test_a_two_worker_run_stopped_by_its_duration_counts_every_line_with_its_itl(
    tmp_path: Path,
) -> None:
    # Stopped by the clock with requests in flight (recorded as cancelled at the stop): each
    # worker's last delta, sent after its last record, reaches the master before the summary
    # (workload/locust/final_report.py), so the live counts are the files' and stats.json keeps
    # the per-gap ITL, which the files cannot give back.
    out = tmp_path / "two"
    p = agentload(
        "run", "--profile", CHAT_PROFILE, "--users", "4", "--duration", "8s",
        "--sim-preset", "fast", "--workers", "2", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    stats = json.loads((out / "stats.json").read_text())
    rows, sessions = read_records(out, "requests"), read_records(out, "sessions")
    assert rows and {r["worker"] for r in rows} <= {"0", "1"}
    note = stats["reconcile"]
    assert note["source"] == "memory", (note, p.stderr[-2000:])
    assert note["counted"] == note["in_files"] == {"requests": len(rows), "sessions": len(sessions)}
    assert note["itl"] == "complete" and not note["workers_without_final_report"]
    overall = stats["overall"]
    assert overall["counters"]["requests"] == len(rows)
    assert overall["counters"]["ok"] == sum(r["status"] == "ok" for r in rows) > 0
    # one ITL gap between each two content chunks of every successful request in the files
    gaps = sum(max(0, r["chunks"] - 1) for r in rows if r["status"] == "ok")
    assert overall["hists"]["itl"]["count"] == gaps > 0
    assert json.loads((out / "run.json").read_text())["reconcile"] == note


def test_slo_violation_exits_3_with_junit(tmp_path: Path) -> None:
    out = tmp_path / "gate"
    p = quick_run(out, "--slo", "chat.ttft_p95_ms=0.001", "--slo", "chat.session_success_ratio=0.5")
    assert p.returncode == 3, p.stdout + p.stderr
    suite = ET.parse(out / "junit.xml").getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) == 2
    assert sum(1 for c in cases if c.find("failure") is not None) == 1
    assert "FAIL chat: ttft_p95_ms" in p.stdout
    # The last line says why (issue 13): the exit code and the failed SLO.
    assert (
        p.stdout.strip()
        .splitlines()[-1]
        .startswith("agentload: exit 3: 1 SLO failed: chat.ttft_p95_ms")
    )


def test_slo_pass_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "ok"
    p = quick_run(out, "--slo", "chat.ttft_p95_ms=60000")
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads((out / "run.json").read_text())
    assert [r["passed"] for r in run["slo_results"]] == [True]


def test_errors_above_ratio_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "err"
    p = quick_run(out, "--max-error-ratio", "0.01", "--sim-fault", "500=1.0", sessions=2)
    assert p.returncode == 1, p.stdout + p.stderr
    overall = json.loads((out / "run.json").read_text())["summary"]["overall"]
    assert overall["errors_by_kind"]["http_status"] == overall["requests"] > 0
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("agentload: exit 1: error ratio 100.0 % > 1 % (max_error_ratio)"), last
