"""Nested subagents: a Claude Code subagent that runs a subagent of its own."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.test_agent_traces import _asst, _claude, _task_session, _usage, _write
from workload.cli.trace import main_trace
from workload.plan.traces import nested_subagents, read_agent_trace


def _nested(by_agent_id: bool = True) -> list[dict]:
    """_task_session's parent and subagent a1, whose first round runs a Task of its own (a2)."""
    recs, _ = _task_session(agent_in_file=True)
    side1 = {"isSidechain": True, "agentId": "a1"}
    side2 = {"isSidechain": True, "agentId": "a2"}
    c1 = next(r for r in recs if r["uuid"] == "c1")
    c1["message"]["content"].append({"type": "tool_use", "id": "t4", "name": "Task"})
    c2 = next(r for r in recs if r["uuid"] == "c2")
    done = {"content": [{"type": "tool_result", "tool_use_id": "t4"}]}
    extra = {"toolUseResult": {"agentId": "a2"}} if by_agent_id else {}
    c2b = _claude("user", "00:06.000", "c2b", "c2", message=done, **side1, **extra)
    grandchild = [
        _claude("user", "00:03.100", "g0", None, message={"content": "sub-sub task"}, **side2),
        _asst("00:03.900", "g1", "g0", "o0", [{"type": "text"}], _usage(400, 300, 25), **side2),
        _claude("user", "00:04.000", "g2", "g1", message={"content": "more"}, **side2),
        _asst("00:05.500", "g3", "g2", "o1", [{"type": "text"}], _usage(450, 400, 25), **side2),
    ]
    if not by_agent_id:
        for r in grandchild:
            del r["agentId"]
    k = recs.index(c2) + 1
    return recs[:k] + grandchild + [c2b] + recs[k:]


def test_a_subagent_of_a_subagent_is_its_child(tmp_path: Path) -> None:
    t = read_agent_trace(_write(tmp_path / "S.jsonl", _nested()))
    assert sorted(t.sessions) == ["S", "S/agent-a1", "S/agent-a2"]
    a1, a2 = t.sessions["S/agent-a1"][0], t.sessions["S/agent-a2"][0]
    assert (a1.parent, a1.spawn_round, a1.join_round) == ("S", 0, 1)
    assert (a2.parent, a2.spawn_round, a2.join_round) == ("S/agent-a1", 0, 1)
    (task,) = [x for x in t.sessions["S/agent-a1"][0].tools if x.name == "Task"]
    assert task.subagent == "S/agent-a2"
    assert t.roots == ["S"] and t.children("S") == ["S/agent-a1"]


def test_without_agent_ids_the_innermost_task_call_that_spans_it_ran_it(tmp_path: Path) -> None:
    t = read_agent_trace(_write(tmp_path / "S.jsonl", _nested(by_agent_id=False)))
    (nested,) = [s for s in t.sessions if s.startswith("S/side-")]
    first = t.sessions[nested][0]
    assert (first.parent, first.spawn_round, first.join_round) == ("S/agent-a1", 0, 1)
    assert t.sessions["S/agent-a1"][0].parent == "S"


def test_import_says_how_many_were_nested_and_fit_gives_each_depth_its_class(tmp_path, capsys):
    src = _write(tmp_path / "S.jsonl", _nested())
    assert main_trace(["import", "auto", str(src), "-o", str(tmp_path / "n.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "sessions  3 (1 top-level, 2 subagents, 1 of them run by a subagent)" in out
    back = read_agent_trace(tmp_path / "n.jsonl")  # the agent-session format keeps the links
    assert back.sessions["S/agent-a2"][0].parent == "S/agent-a1" and nested_subagents(back) == 1
    assert main_trace(["fit", str(tmp_path / "n.jsonl"), "-o", str(tmp_path / "f.yaml")]) == 0
    text = capsys.readouterr().out
    assert "note:" not in text and "subagents per session, depth 2" in text
    prof = yaml.safe_load((tmp_path / "f.yaml").read_text())
    top = next(c for c in prof["classes"].values() if c.get("weight"))
    sub = prof["classes"][top["subagents"]["class_name"]]
    assert sub["fixed_count"] == 0 and sub["subagents"]["tool"] == "Task"
    grand = prof["classes"][sub["subagents"]["class_name"]]
    assert grand["fixed_count"] == 0 and "subagents" not in grand
    assert "depth 2" in grand["description"]
