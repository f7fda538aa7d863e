"""Closed-loop replay of agent sessions: prompts, prefix reuse, waits, subagents, the run spec."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.test_agent_traces import ROUNDS, _task_session, _write
from workload.errors import UsageError
from workload.measure.records import RequestRecord
from workload.plan.prompts import synth_for
from workload.plan.tokens import get_tokenizer
from workload.plan.traces import (
    AgentSession,
    ReplayOptions,
    fit_rounds,
    planned_duration_s,
    read_agent_trace,
    root_sessions,
    session_starts,
)
from workload.run.agent_replay import agent_lines, agent_note, agent_summary
from workload.run.spec import AGENT_CAP_FACTOR, TRACE_TAIL_S, resolve_spec


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer("tiktoken:cl100k_base")


def _ok(step) -> RequestRecord:
    return RequestRecord(
        run_id="r", worker="0", user_class="trace", session_id=step.session_id, step=step.step,
        status="ok",
    )  # fmt: skip


def _play(session: AgentSession) -> list:
    """Every step of a session, observed as answered (what the player does, without I/O)."""
    steps = []
    while (step := session.next_step()) is not None:
        steps.append((step, session.children_due()))
        session.observe(_ok(step))
    return steps


def _prompt(step) -> str:
    return orjson.loads(step.body)["prompt"]


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_each_prompt_has_the_recorded_tokens_and_reuses_exactly_the_recorded_prefix(tok):
    trace = read_agent_trace(ROUNDS)
    make = root_sessions(trace, synth_for(tok), ReplayOptions(model="m", seed=7))
    for k, name in enumerate(trace.roots):
        steps = _play(make(k))
        rounds = trace.sessions[name]
        assert [s.step for s, _ in steps] == list(range(1, len(rounds) + 1))
        prev: list[int] | None = None
        for (step, _), r in zip(steps, rounds, strict=True):
            ids = tok.encode(_prompt(step))
            assert len(ids) == r.input_tokens
            body = orjson.loads(step.body)
            assert body["max_tokens"] == r.output_tokens and body["ignore_eos"] is True
            if prev is not None:
                assert _common(prev, ids) == min(r.prefix_tokens, len(prev))
            prev = ids


def test_first_rounds_of_one_model_share_their_system_prefix(tok):
    trace = read_agent_trace(ROUNDS)
    opts = ReplayOptions(model="m", seed=7)
    a = AgentSession(trace, trace.roots[0], index=0, synth=synth_for(tok), options=opts)
    b = AgentSession(trace, trace.roots[0], index=1, synth=synth_for(tok), options=opts)
    c = AgentSession(trace, trace.roots[1], index=1, synth=synth_for(tok), options=opts)
    pa, pb, pc = (tok.encode(_prompt(s.next_step())) for s in (a, b, c))
    first = trace.sessions[trace.roots[0]][0]
    assert pa == pb  # the same recorded session twice: the same bytes
    assert _common(pa, pc) < 8  # another model: its own system prompt
    assert first.prefix_tokens > 0


def test_a_round_waits_for_its_slowest_tool_then_the_think_gap_scaled_and_capped(tok):
    trace = read_agent_trace(ROUNDS)
    claude = next(s for s in trace.roots if s.startswith("claude:"))
    rs = trace.sessions[claude]
    sess = AgentSession(
        trace, claude, index=0, synth=synth_for(tok), options=ReplayOptions("m", 1, speedup=2.0)
    )
    steps = [s for s, _ in _play(sess)]
    assert steps[0].tool_pause_s == 0 and steps[0].think_s == 0
    assert steps[1].tool_pause_s == pytest.approx(19.291 / 2, abs=1e-3)  # WebSearch, not Bash
    assert steps[5].think_s == pytest.approx(rs[5].think_s / 2)
    capped = AgentSession(
        trace, claude, index=0, synth=synth_for(tok),
        options=ReplayOptions("m", 1, speedup=2.0, max_gap_s=3.0),
    )  # fmt: skip
    steps = [s for s, _ in _play(capped)]
    assert steps[1].tool_pause_s == 3.0 and steps[5].think_s == 3.0
    assert sess.outcome == "completed" and sess.steps_done == len(rs)


def test_a_subagent_starts_after_its_spawn_round_and_its_join_round_waits_for_it(tmp_path, tok):
    recs, _ = _task_session(agent_in_file=True)
    trace = read_agent_trace(_write(tmp_path / "S.jsonl", recs))
    sess = root_sessions(trace, synth_for(tok), ReplayOptions("m", 1))(0)
    steps = _play(sess)
    (s0, (start0, join0)), (s1, (start1, join1)) = steps
    assert start0 == [] and join0 == []
    (child,) = start1
    assert child.session.session_id == "S/agent-a1"
    assert child.delay_s == pytest.approx(0.1)  # it began 0.1 s after the parent's answer
    assert join1 == ["S/agent-a1"]
    assert s1.tool_pause_s == pytest.approx(0.5)  # Bash; the Task's 7 s is the child itself
    kid = [s for s, _ in _play(child.session)]
    assert [s.session_id for s in kid] == ["S/agent-a1"] * 2
    assert kid[1].tool_pause_s == pytest.approx(1.0)
    assert sess.children_due() == ([], [])  # after the last round: nothing left to start


def test_session_starts_keep_the_recorded_offsets_scaled_and_capped():
    trace = read_agent_trace(ROUNDS)
    roots = trace.roots
    gap = trace.sessions[roots[1]][0].t_start - trace.sessions[roots[0]][0].t_start
    assert session_starts(trace, ReplayOptions("m", 1, speedup=10.0)) == pytest.approx(
        [0.0, gap / 10]
    )
    assert session_starts(trace, ReplayOptions("m", 1, max_gap_s=5.0)) == [0.0, 5.0]


def test_rounds_longer_than_the_context_are_counted_and_clipped_when_asked():
    trace = read_agent_trace(ROUNDS)
    same, too_long, largest = fit_rounds(trace, 40000, clip=False)
    assert same is trace and too_long == 8 and largest == 48305 + 852
    clipped, _, _ = fit_rounds(trace, 40000, clip=True)
    assert all(r.input_tokens + r.output_tokens <= 40000 for r in clipped.iter_rounds())
    assert all(r.prefix_tokens <= r.input_tokens for r in clipped.iter_rounds())


def test_an_agent_trace_resolves_to_sessions_and_its_options_are_checked(tmp_path: Path):
    spec = resolve_spec({"trace": str(ROUNDS), "speedup": "10", "max_gap": "2"})
    info = spec.trace_info
    assert info is not None and (info.sessions, info.requests, info.format) == (2, 19, "tracelab")
    assert spec.max_gap_s == 2.0 and info.span_s == 2.0
    with pytest.raises(UsageError, match="--max-gap needs --trace"):
        resolve_spec({"max_gap": "2"})
    mooncake = ROUNDS.parent / "mooncake_conversation_head40.jsonl"
    with pytest.raises(UsageError, match="agent-session traces only"):
        resolve_spec({"trace": str(mooncake), "max_gap": "2"})


def test_the_default_run_length_waits_for_every_session_up_to_a_stated_cap():
    spec = resolve_spec({"trace": str(ROUNDS), "speedup": "10", "max_gap": "2"})
    trace = read_agent_trace(ROUNDS)
    opts = ReplayOptions(model="", seed=0, speedup=10, max_gap_s=2)
    # the rounds at their recorded LLM time: a slower server is not sped up by --speedup
    longest = max(planned_duration_s(trace, s, opts, rounds_speedup=1) for s in trace.sessions)
    assert longest > 5 * max(planned_duration_s(trace, s, opts) for s in trace.sessions)
    want = session_starts(trace, opts)[-1] + AGENT_CAP_FACTOR * longest + TRACE_TAIL_S
    assert spec.duration_s == pytest.approx(want)
    assert "runs until every session has ended, at most" in agent_note(spec)
    assert "--duration sets the cap" in agent_note(spec)
    capped = resolve_spec(
        {"trace": str(ROUNDS), "speedup": "10", "max_gap": "2", "duration_s": "30s"}
    )
    assert capped.duration_s == 30 and agent_note(capped).endswith("at most 30s (--duration)")


def test_sessions_cut_by_the_run_end_are_counted_and_said():
    spec = resolve_spec(
        {"trace": str(ROUNDS), "speedup": "10", "max_gap": "2", "duration_s": "30s"}
    )
    trace = read_agent_trace(ROUNDS)
    claude, codex = sorted(trace.sessions)

    def rows(name, n):
        return [
            {"trace_index": 0, "session_id": name, "step": k + 1, "status": "ok",
             "t_start": float(k), "e2e_ms": 100.0, "prompt_tokens": r.input_tokens}
            for k, r in enumerate(trace.sessions[name][:n])
        ]  # fmt: skip

    full = agent_summary(spec, rows(claude, 10) + rows(codex, 9), scrape={})
    assert full["sessions_cut"] == 0 and full["duration_cap_s"] == 30
    assert not [x for x in agent_lines(full) if x.startswith("sessions cut")]
    cut = agent_summary(spec, rows(claude, 10) + rows(codex, 4), scrape={})
    assert cut["sessions_cut"] == 1
    (line,) = [x for x in agent_lines(cut) if x.startswith("sessions cut")]
    assert "1 of 2" in line and "30s" in line and "--duration" in line
