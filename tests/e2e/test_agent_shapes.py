"""`agentload run` with the agent shapes (parallel tools, subagents, reasoning) on the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import FIXTURES, agentload
from workload.measure.artifacts import read_records

pytestmark = pytest.mark.slow

PROFILE = str(FIXTURES / "agent_shapes.yaml")


def _end(r: dict) -> float:
    return r["t_start"] + r["e2e_ms"] / 1000


def _spawned_run(out: Path, *args: str, timeout: float) -> tuple[list, dict, list, dict]:
    """Run, check it passed and every session completed: (requests, requests by session,
    child sessions, children by (parent session, spawning step))."""
    p = agentload("run", *args, "--sim-preset", "fast", "--out", str(out), timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    reqs = list(read_records(out, "requests"))
    sess = list(read_records(out, "sessions"))
    by: dict[str, list[dict]] = {}
    for r in reqs:
        by.setdefault(r["session_id"], []).append(r)
    kids = [s for s in sess if s["parent_session"]]
    assert all(s["outcome"] == "completed" for s in sess)
    spawns: dict[tuple[str, int], list[str]] = {}
    for s in kids:
        step = int(s["session_id"].rsplit("-", 1)[1].split(".")[0])
        spawns.setdefault((s["parent_session"], step), []).append(s["session_id"])
    return reqs, by, kids, spawns


def test_subagents_run_beside_each_other_and_the_parent_joins_them(tmp_path: Path) -> None:
    out = tmp_path / "r"
    reqs, by, kids, spawns = _spawned_run(
        out, "--profile", PROFILE, "--users", "2", "--sessions-per-user", "3",
        "--duration", "60s", "--sim-set", "reasoning_field=reasoning", timeout=150,
    )  # fmt: skip
    assert kids and all(s["user_class"] == "explorer" for s in kids)
    overlapped = 0
    for (parent, step), names in spawns.items():
        spawn = next(r for r in by[parent] if r["step"] == step)
        join = next(r for r in by[parent] if r["step"] == step + 1)
        starts = [min(r["t_start"] for r in by[n]) for n in names]
        ends = [max(_end(r) for r in by[n]) for n in names]
        assert min(starts) >= _end(spawn)  # started by the spawning answer
        assert join["t_start"] >= max(ends)  # the parent's next step waited for the slowest
        overlapped += len(names) > 1 and max(starts) < min(ends)  # siblings ran together
    assert overlapped >= 1
    agent = [r for r in reqs if r["user_class"] == "agent"]
    assert all(r["reasoning_requested"] == 120 for r in agent)
    # reasoning streams first (chunks read together share one stamp, so >= per request)
    assert all(r["reasoning_chunks"] > 0 and r["ttft_content_ms"] >= r["ttft_ms"] for r in agent)
    summary = json.loads((out / "run.json").read_text())["summary"]["by_class"]["agent"]
    assert summary["reasoning_tokens"] == 120 * len(agent)
    assert summary["ttft_content_ms"]["p50"] > summary["ttft_ms"]["p50"]
    html = (out / "report.html").read_text()
    assert 'id="ttft-split"' in html and 'id="subagents"' in html


def test_a_fitted_nested_profile_runs_subagents_of_subagents(tmp_path: Path) -> None:
    prof, out = tmp_path / "nested.yaml", tmp_path / "r"
    trace = Path(__file__).parents[1] / "fixtures" / "traces" / "nested_subagents.jsonl"
    assert agentload("trace", "fit", str(trace), "-o", str(prof)).returncode == 0
    p = agentload(
        "run", "--profile", str(prof), "--users", "1", "--sessions-per-user", "2",
        "--duration", "60s", "--sim-preset", "fast", "--out", str(out), timeout=150,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    reqs = list(read_records(out, "requests"))
    sess = {s["session_id"]: s for s in read_records(out, "sessions")}
    by: dict[str, list[dict]] = {}
    for r in reqs:
        by.setdefault(r["session_id"], []).append(r)
    grand = [s for s in sess.values() if s["user_class"].endswith("-subagent-depth2")]
    assert grand and all(s["outcome"] == "completed" for s in sess.values())
    for g in grand:
        parent = sess[g["parent_session"]]
        assert parent["user_class"].endswith("-subagent") and parent["parent_session"] in sess
        step = int(g["session_id"].rsplit("-", 1)[1].split(".")[0])
        spawn = next(r for r in by[parent["session_id"]] if r["step"] == step)
        join = next(r for r in by[parent["session_id"]] if r["step"] == step + 1)
        assert min(r["t_start"] for r in by[g["session_id"]]) >= _end(spawn)
        assert join["t_start"] >= max(_end(r) for r in by[g["session_id"]])  # the subagent waited


def test_a_spawn_beside_a_tool_joins_the_slowest_of_both_and_picks_child_classes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r"
    _, by, kids, spawns = _spawned_run(
        out, "--profile", str(FIXTURES / "agent_spawn_choice.yaml"), "--users", "1",
        "--sessions-per-user", "2", "--duration", "30s", timeout=90,
    )  # fmt: skip
    assert {s["user_class"] for s in kids} == {"explorer", "coder"}  # the weighted choice
    assert len(spawns) == 4 and all(len(n) == 2 for n in spawns.values())
    waited_for_tool = waited_for_child = 0
    for (parent, step), names in spawns.items():
        spawn = next(r for r in by[parent] if r["step"] == step)
        join = next(r for r in by[parent] if r["step"] == step + 1)
        ends = max(max(_end(r) for r in by[n]) for n in names)
        assert join["t_start"] >= max(ends, _end(spawn) + 0.4)  # the children and the bash
        waited_for_tool += ends < _end(spawn) + 0.4
        waited_for_child += ends > _end(spawn) + 0.4
        assert spawn["planned_tool"] == "task"
    # seed 5 plans both: a spawn with an explorer (it outlasts the bash) and coders only
    assert waited_for_child >= 1 and waited_for_tool >= 1
    html = (out / "report.html").read_text()
    assert 'id="subagents"' in html
