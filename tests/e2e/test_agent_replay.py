"""`agentload run --trace` with real agent sessions, closed loop, against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import FIXTURES, agentload
from tests.test_agent_nested import _nested
from tests.test_agent_traces import _task_session, _write
from workload.measure.artifacts import read_records
from workload.plan.traces import read_agent_trace

pytestmark = pytest.mark.slow

ROUNDS = FIXTURES / "traces" / "tracelab_round_trace.jsonl"
CLAUDE = FIXTURES / "traces" / "tracelab_claude_session.jsonl"
CODEX = FIXTURES / "traces" / "tracelab_codex_rollout.jsonl"
# The samples' prompts reach 48k tokens; the simulator's default context is 32k.
LONG = ("--sim-set", "max_model_len=65536")


def replay(out: Path, trace: Path, *extra: str):
    return agentload(
        "run", "--trace", str(trace), "--sim-preset", "fast", *LONG, "--out", str(out), *extra,
        timeout=120,
    )  # fmt: skip


def _end(r: dict) -> float:
    return r["t_start"] + r["e2e_ms"] / 1000


def _by_session(out: Path) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for r in read_records(out, "requests"):
        rows.setdefault(r["session_id"], []).append(r)
    return {s: sorted(rs, key=lambda r: r["step"]) for s, rs in rows.items()}


def test_the_normalized_sample_replays_every_round_token_exact(tmp_path: Path) -> None:
    p = replay(tmp_path / "r", ROUNDS, "--speedup", "20", "--max-gap", "1.2")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    trace = read_agent_trace(ROUNDS)
    got = _by_session(tmp_path / "r")
    assert sorted(got) == sorted(trace.sessions)
    for name, rounds in trace.sessions.items():
        rows = got[name]
        assert [r["step"] for r in rows] == list(range(1, len(rounds) + 1))
        assert all(r["status"] == "ok" for r in rows)
        assert [r["prompt_tokens"] for r in rows] == [x.input_tokens for x in rounds]
        assert [r["completion_tokens"] for r in rows] == [x.output_tokens for x in rounds]
        for a, b in zip(rows, rows[1:], strict=False):
            assert b["t_start"] >= _end(a)  # closed loop: the next round after the answer
    claude = next(s for s in trace.sessions if s.startswith("claude:"))
    rows = got[claude]
    # round 0 ran Bash (0.86 s) and WebSearch (19.3 s) in parallel: round 1 waits for the slowest
    assert rows[1]["t_start"] - _end(rows[0]) >= 19.291 / 20 - 0.01
    t = json.loads((tmp_path / "r" / "run.json").read_text())["summary"]["trace"]
    assert t["mode"] == "agent-sessions"
    assert (t["sent"], t["ok"], t["prompt_exact"], t["requests"]) == (19, 19, 19, 19)
    assert t["server"]["cached_ratio"] > 0.5
    assert "prompt tokens exactly as recorded in 19 of 19" in p.stdout


@pytest.mark.parametrize("raw", [CLAUDE, CODEX])
def test_raw_agent_logs_replay_like_their_normalized_rounds(tmp_path: Path, raw: Path) -> None:
    p = replay(tmp_path / "r", raw, "--speedup", "50", "--max-gap", "0.5")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (rounds,) = read_agent_trace(raw).sessions.values()
    (rows,) = _by_session(tmp_path / "r").values()
    assert [r["prompt_tokens"] for r in rows] == [x.input_tokens for x in rounds]


def test_a_claude_sidechain_runs_beside_its_parent_and_the_parent_waits(tmp_path: Path) -> None:
    recs, _ = _task_session(agent_in_file=True)
    trace = _write(tmp_path / "S.jsonl", recs)
    p = replay(tmp_path / "r", trace)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = _by_session(tmp_path / "r")
    parent, child = got["S"], got["S/agent-a1"]
    assert len(parent) == 2 and len(child) == 2
    assert child[0]["t_start"] >= _end(parent[0])  # spawned by round 0's answer
    assert child[0]["t_start"] < _end(parent[0]) + 0.5  # ... beside the Bash call (0.5 s)
    assert parent[1]["t_start"] >= _end(child[-1])  # the join round waited for it
    t = json.loads((tmp_path / "r" / "run.json").read_text())["summary"]["trace"]
    assert (t["sessions"], t["subagents"], t["sent"]) == (2, 1, 4)


def test_a_slower_server_stretches_sessions_not_their_starts_or_requests(tmp_path: Path) -> None:
    runs = {}
    # the slower server prefills at 0.2 ms/token: ~5 s more for the Codex session, ~10 s Claude
    for name, ms in (("fast", "0"), ("slow", "0.2")):
        p = replay(
            tmp_path / name, ROUNDS, "--speedup", "20", "--max-gap", "1", "--sim-set",
            f"prefill_ms_per_token={ms}",
        )  # fmt: skip
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        runs[name] = _by_session(tmp_path / name)
        t = json.loads((tmp_path / name / "run.json").read_text())["summary"]["trace"]
        assert t["sessions_cut"] == 0 and "sessions cut" not in p.stdout  # ran to their ends
    fast, slow = runs["fast"], runs["slow"]
    sig = {s: [(r["step"], r["prompt_tokens"]) for r in rs] for s, rs in fast.items()}
    assert sig == {s: [(r["step"], r["prompt_tokens"]) for r in rs] for s, rs in slow.items()}

    def length(rows: list[dict]) -> float:
        return _end(rows[-1]) - rows[0]["t_start"]

    for s in fast:  # every session lasted longer on the slower server
        assert length(slow[s]) > length(fast[s]) + 2.0
    first, second = sorted(fast, key=lambda s: fast[s][0]["t_start"])
    gap = {n: r[second][0]["t_start"] - r[first][0]["t_start"] for n, r in runs.items()}
    assert gap["fast"] == pytest.approx(1.0, abs=0.3)  # the start schedule held in both
    assert gap["slow"] == pytest.approx(1.0, abs=0.3)


def test_a_duration_cap_on_a_slower_server_cuts_sessions_and_says_so(tmp_path: Path) -> None:
    # 0.2 ms/token of prefill: ~6 s for a Claude round of 32k tokens; a 10 s cap cuts both
    p = replay(
        tmp_path / "r", ROUNDS, "--speedup", "20", "--max-gap", "1", "--duration", "10s",
        "--sim-set", "prefill_ms_per_token=0.2",
    )  # fmt: skip
    assert "at most 10s (--duration)" in p.stdout
    t = json.loads((tmp_path / "r" / "run.json").read_text())["summary"]["trace"]
    assert 0 < t["sent"] < t["requests"] and t["duration_cap_s"] == 10
    assert t["sessions_cut"] == 2
    assert "sessions cut: 2 of 2 ended before their last round" in p.stdout


def test_a_nested_subagent_runs_beside_its_subagent_parent_which_waits(tmp_path: Path) -> None:
    p = replay(tmp_path / "r", _write(tmp_path / "S.jsonl", _nested()))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = _by_session(tmp_path / "r")
    top, sub, nested = got["S"], got["S/agent-a1"], got["S/agent-a2"]
    assert (len(top), len(sub), len(nested)) == (2, 2, 2)
    assert nested[0]["t_start"] >= _end(sub[0])  # spawned by the subagent's first answer
    assert sub[1]["t_start"] >= _end(nested[-1])  # ... whose next round waited for it
    assert top[1]["t_start"] >= _end(sub[-1])  # and the top session for its subagent
    t = json.loads((tmp_path / "r" / "run.json").read_text())["summary"]["trace"]
    assert (t["sessions"], t["subagents"], t["sent"], t["sessions_cut"]) == (3, 2, 6, 0)
