"""Actual-history tool loops: malformed tool calls from the server are tool-loop failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import FIXTURES, agentload
from workload.measure.artifacts import read_records

pytestmark = pytest.mark.slow
PROFILE = str(FIXTURES / "e2e_tools_actual.yaml")


def run(out: Path, malformed_rate: float):
    return agentload(
        "run", "--profile", PROFILE, "--users", "2", "--duration", "30s", "--sessions-per-user", "2",
        "--sim-preset", "fast", "--sim-set", f"malformed_tool_rate={malformed_rate}", "--out", str(out),
    )  # fmt: skip


def test_malformed_tool_calls_fail_the_tool_loop(tmp_path: Path) -> None:
    out = tmp_path / "bad"
    p = run(out, 1.0)
    assert p.returncode in (0, 3), p.stdout + p.stderr
    summary = json.loads((out / "run.json").read_text())["summary"]
    sessions = read_records(out, "sessions")
    assert len(sessions) == 4
    assert all(s["outcome"] == "tool_loop_failure" for s in sessions)
    assert summary["overall"]["sessions"]["tool_loop_failure"] == 4
    failed = [r for r in read_records(out, "requests") if r["tool_loop_failure"]]
    assert len(failed) == 4 and all(r["status"] == "ok" for r in failed)
    assert all("malformed" in r["tool_loop_failure"] for r in failed)
    assert all(not tc["arguments_valid"] for r in failed for tc in r["tool_calls"])
    assert summary["overall"]["tool_loop_failures"] == 4
    assert summary["by_step"]["agent"]["1"]["tool_loop_failures"] == 4


def test_wellformed_tool_calls_complete(tmp_path: Path) -> None:
    out = tmp_path / "good"
    p = run(out, 0.0)
    assert p.returncode == 0, p.stdout + p.stderr
    sessions = read_records(out, "sessions")
    assert [s["outcome"] for s in sessions] == ["completed"] * 4
    reqs = read_records(out, "requests")
    # Each session's two tool steps made a call; with `auto` the model may also call on others.
    by_step = {}
    for r in reqs:
        by_step.setdefault(r["step"], []).append(len(r["tool_calls"]))
    assert all(n >= 1 for n in by_step[1] + by_step[2])
    assert not any(r["tool_loop_failure"] for r in reqs)
