"""Agent-session traces: the TraceLab, Claude Code and Codex importers, our own format, bad lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from workload.errors import TraceError
from workload.plan.traces import (
    AgentTrace,
    detect_any,
    read_agent_trace,
    run_agent_trace,
    summarize_agents,
    write_agent_trace,
)

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "traces"
ROUNDS = FIX / "tracelab_round_trace.jsonl"
CLAUDE = FIX / "tracelab_claude_session.jsonl"
CODEX = FIX / "tracelab_codex_rollout.jsonl"
SHARED = Path(os.environ.get("AGENTLOAD_TRACES_DIR") or ROOT.parent / "shared" / "data" / "traces")


def _rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _session(trace: AgentTrace, prefix: str) -> list:
    (name,) = [s for s in trace.sessions if s.startswith(prefix)]
    return trace.sessions[name]


def test_tracelab_rounds_keep_their_sizes_and_sessions():
    t = read_agent_trace(ROUNDS)
    assert t.format == "tracelab" and not t.bad_lines
    assert len(t.sessions) == 2 and t.rounds == 19
    for row in _rows(ROUNDS):
        r = t.sessions[row["session_id"]][row["round_index"]]
        assert r.input_tokens == row["input_tokens_total"]
        assert r.prefix_tokens == row["prefix_tokens"]
        assert r.appended_tokens == row["newly_append_tokens"]
        assert r.output_tokens == row["output_tokens"]
        assert r.reasoning_tokens == row["reasoning_output_tokens"]
        assert len(r.tools) == len(row["tools"])


def test_a_parallel_tool_round_waits_for_its_slowest_tool():
    t = read_agent_trace(ROUNDS)
    first = _session(t, "claude:")[0]  # Bash 0.86 s and WebSearch 19.3 s, overlapping
    assert [x.name for x in first.tools] == ["Bash", "WebSearch"]
    assert first.parallel_tools == 2
    assert first.tool_wait_s == pytest.approx(19.291, abs=1e-3)
    nxt = _session(t, "claude:")[1]
    assert nxt.think_s == pytest.approx(0.0, abs=1e-3)  # it left when the slowest answered
    assert nxt.t_start == pytest.approx(first.t_end + first.tool_wait_s, abs=1e-3)


def test_a_human_pause_is_think_time_not_tool_time():
    r5 = _session(read_agent_trace(ROUNDS), "claude:")[5]  # a new user message after 19.9 s
    assert r5.appended_user == 1 and r5.think_s == pytest.approx(19.913, abs=1e-3)


@pytest.mark.parametrize(("raw", "prefix"), [(CLAUDE, "claude:"), (CODEX, "codex:")])
def test_raw_agent_logs_give_the_rounds_tracelab_normalized(raw, prefix):
    got = next(iter(read_agent_trace(raw).sessions.values()))
    want = _session(read_agent_trace(ROUNDS), prefix)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.input_tokens, g.prefix_tokens, g.output_tokens, g.reasoning_tokens) == (
            w.input_tokens,
            w.prefix_tokens,
            w.output_tokens,
            w.reasoning_tokens,
        )
        assert [x.name for x in g.tools] == [x.name for x in w.tools]
        assert [x.latency_s for x in g.tools] == pytest.approx([x.latency_s for x in w.tools])
        assert g.t_start == pytest.approx(w.t_start, abs=1e-3)


def test_formats_are_detected_from_the_first_record(tmp_path):
    assert detect_any(ROUNDS) == "tracelab"
    assert detect_any(CLAUDE) == "claude-code"
    assert detect_any(CODEX) == "codex"
    out = tmp_path / "a.jsonl"
    write_agent_trace(read_agent_trace(ROUNDS), out)
    assert detect_any(out) == "agent-session"
    assert detect_any(FIX / "mooncake_conversation_head40.jsonl") == "mooncake"


def test_our_format_reads_back_what_it_wrote(tmp_path):
    t = read_agent_trace(ROUNDS)
    out = tmp_path / "a.jsonl"
    assert write_agent_trace(t, out) == 19
    back = read_agent_trace(out)
    assert back.format == "agent-session"
    assert [r.to_json() for r in back.iter_rounds()] == [r.to_json() for r in t.iter_rounds()]


@pytest.mark.skipif(not (SHARED / "tracelab").is_dir(), reason="shared traces not here")
@pytest.mark.parametrize(
    ("segment", "jsonl"), [("claude_raw_segment.txt", CLAUDE), ("codex_raw_segment.txt", CODEX)]
)
def test_the_published_record_excerpts_read_like_their_jsonl(segment, jsonl):
    a = read_agent_trace(SHARED / "tracelab" / segment)
    b = read_agent_trace(jsonl)
    assert not a.bad_lines and a.sessions == b.sessions


def test_bad_lines_are_named_and_counted_or_stop(tmp_path):
    lines = ROUNDS.read_bytes().splitlines()
    broken = tmp_path / "r.jsonl"
    broken.write_bytes(
        b"\n".join([lines[0], b"{not json", lines[1], b'{"round_index": 2}']) + b"\n"
    )
    t = read_agent_trace(broken, "tracelab")
    assert [(b.line, b.reason[:12]) for b in t.bad_lines] == [
        (2, "not valid JS"),
        (4, "session_id m"),
    ]
    assert t.rounds == 2
    with pytest.raises(TraceError, match=r"r\.jsonl:2: not valid JSON"):
        read_agent_trace(broken, "tracelab", on_bad_line="stop")


def test_codex_output_without_a_token_count_is_a_bad_line(tmp_path):
    lines = CODEX.read_bytes().splitlines()
    cut = tmp_path / "c.jsonl"
    cut.write_bytes(b"\n".join(lines[:-2]) + b"\n")  # the last round's token_count is gone
    t = read_agent_trace(cut)
    assert t.rounds == 8
    assert [b.reason for b in t.bad_lines] == ["model output with no token_count after it"]


def test_a_repeated_codex_token_count_is_one_round(tmp_path):
    lines = CODEX.read_bytes().splitlines()
    k = next(i for i, x in enumerate(lines) if b'"token_count"' in x)
    dup = tmp_path / "c.jsonl"
    dup.write_bytes(b"\n".join([*lines[: k + 1], lines[k], *lines[k + 1 :]]) + b"\n")
    assert read_agent_trace(dup).rounds == 9


# ------------------------------------------------------------------ subagents (sidechains)
def _claude(kind: str, ts: str, uuid: str, parent: str | None, **kw: object) -> dict:
    rec = {"type": kind, "timestamp": f"2026-06-01T05:{ts}Z", "uuid": uuid, "parentUuid": parent}
    rec.update({"sessionId": "S", "isSidechain": False})
    rec.update(kw)
    return rec


def _asst(ts, uuid, parent, mid, blocks, usage, **kw):
    msg = {"id": mid, "model": "m", "content": blocks, "usage": usage}
    return _claude("assistant", ts, uuid, parent, message=msg, **kw)


def _usage(inp: int, read: int, out: int) -> dict:
    return {
        "input_tokens": 2,
        "cache_creation_input_tokens": inp - read - 2,
        "cache_read_input_tokens": read,
        "output_tokens": out,
    }


def _task_session(agent_in_file: bool) -> tuple[list[dict], list[dict]]:
    """A parent that runs a Task subagent (two rounds) beside a Bash call, then answers."""
    side = {"isSidechain": True, "agentId": "a1"}
    parent = [
        _claude("user", "00:00.000", "u0", None, message={"role": "user", "content": "go"}),
        _asst(
            "00:02.000",
            "a0",
            "u0",
            "m0",
            [
                {"type": "tool_use", "id": "t1", "name": "Task", "input": {}},
                {"type": "tool_use", "id": "t2", "name": "Bash", "input": {}},
            ],
            _usage(1000, 800, 50),
        ),
        _claude(
            "user",
            "00:02.500",
            "u1",
            "a0",
            message={"content": [{"type": "tool_result", "tool_use_id": "t2"}]},
        ),
        _claude(
            "user",
            "00:09.000",
            "u2",
            "u1",
            message={"content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            toolUseResult={"agentId": "a1"},
        ),
        _asst("00:10.000", "a1x", "u2", "m1", [{"type": "text"}], _usage(1400, 1000, 20)),
    ]
    child = [
        _claude("user", "00:02.100", "c0", None, message={"content": "sub task"}, **side),
        _asst(
            "00:03.000",
            "c1",
            "c0",
            "n0",
            [{"type": "tool_use", "id": "t3", "name": "Read"}],
            _usage(600, 500, 30),
            **side,
        ),  # fmt: skip
        _claude(
            "user",
            "00:04.000",
            "c2",
            "c1",
            **side,
            message={"content": [{"type": "tool_result", "tool_use_id": "t3"}]},
        ),  # fmt: skip
        _asst("00:08.900", "c3", "c2", "n1", [{"type": "text"}], _usage(700, 600, 40), **side),
    ]
    if agent_in_file:
        return parent[:2] + child + parent[2:], []
    return parent, child


def _write(path: Path, recs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path


def _check_subagent(t: AgentTrace) -> None:
    assert sorted(t.sessions) == ["S", "S/agent-a1"]
    parent, child = t.sessions["S"], t.sessions["S/agent-a1"]
    assert t.roots == ["S"] and t.children("S") == ["S/agent-a1"]
    assert len(parent) == 2 and len(child) == 2
    assert {(r.parent, r.spawn_round, r.join_round) for r in child} == {("S", 0, 1)}
    task = [x for x in parent[0].tools if x.name == "Task"][0]
    assert task.subagent == "S/agent-a1"
    assert child[0].input_tokens == 600 and child[0].prefix_tokens == 500
    s = summarize_agents(t)
    assert (s["sessions"], s["subagents"], s["parallel_tool_rounds"]) == (2, 1, 1)


def test_a_sidechain_in_the_session_file_becomes_a_child_session(tmp_path):
    recs, _ = _task_session(agent_in_file=True)
    _check_subagent(read_agent_trace(_write(tmp_path / "S.jsonl", recs)))


def test_a_subagent_file_in_a_project_folder_becomes_a_child_session(tmp_path):
    recs, child = _task_session(agent_in_file=False)
    _write(tmp_path / "proj" / "S.jsonl", recs)
    _write(tmp_path / "proj" / "S" / "subagents" / "agent-a1.jsonl", child)
    t = read_agent_trace(tmp_path / "proj", "claude-code")
    _check_subagent(t)


def test_a_resumed_session_repeating_messages_counts_each_call_once(tmp_path):
    recs, _ = _task_session(agent_in_file=True)
    _write(tmp_path / "p" / "S.jsonl", recs)
    _write(tmp_path / "p" / "T.jsonl", [dict(r, sessionId="T") for r in recs[:2]])
    t = read_agent_trace(tmp_path / "p", "claude-code")
    assert "T" not in t.sessions and t.rounds == 4


def test_limit_keeps_whole_sessions_with_their_subagents(tmp_path):
    recs, _ = _task_session(agent_in_file=True)
    t = read_agent_trace(_write(tmp_path / "S.jsonl", recs), limit=1)
    assert sorted(t.sessions) == ["S", "S/agent-a1"]
    assert len(read_agent_trace(ROUNDS, limit=1).sessions) == 1


def test_trace_import_prints_what_a_replay_would_play(tmp_path):
    out = tmp_path / "a.jsonl"
    p = subprocess.run(
        [sys.executable, "-m", "workload.cli", "trace", "import", "auto", str(ROUNDS), "-o", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "sessions  2 (2 top-level, 0 subagents)" in p.stdout
    assert "4 rounds ran tools in parallel" in p.stdout
    assert "92.1% of input tokens were a reused prefix" in p.stdout
    assert len(out.read_bytes().splitlines()) == 19


def _req(step: int, t: float, e2e_ms: float, **kw: object) -> dict:
    row = {"session_id": "s1", "step": step, "attempt": 0, "status": "ok", "t_start": t}
    row.update({"e2e_ms": e2e_ms, "prompt_tokens": 100 * step, "completion_tokens": 10})
    row.update({"cached_tokens": 50 * (step - 1), "tool_calls": []})
    row.update(kw)
    return row


def test_a_run_exports_its_sessions_as_rounds_with_tool_and_think_waits():
    rows = [
        _req(1, 100.0, 500, tool_calls=[{"name": "read_file"}, {"name": "grep"}]),
        _req(2, 101.0, 400, status="error", prompt_tokens=None),  # retried below
        _req(2, 102.0, 500, attempt=1),
        _req(3, 105.5, 200),
    ]
    t = run_agent_trace(rows, "run")
    r = t.sessions["s1"]
    assert [x.input_tokens for x in r] == [100, 200, 300]
    assert [x.prefix_tokens for x in r] == [0, 50, 100]
    assert [x.name for x in r[0].tools] == ["read_file", "grep"] and r[0].parallel_tools == 2
    assert r[0].tool_wait_s == pytest.approx(1.5) and r[1].think_s == 0
    assert r[2].think_s == pytest.approx(3.0)  # no tool: the gap was think time
