"""Agent sessions (planner + client, no Locust) against the real vLLM.

Sleeps (think time, tool pauses) are skipped: the planner only says how long
to wait, and what is checked here is what the engine does with the bodies.
"""

from __future__ import annotations

import pytest

from workload.measure.client import Client
from workload.measure.records import RequestRecord
from workload.plan.loading import load_profile
from workload.plan.sessions import SessionPlanner
from workload.plan.tokens import ServerTokenizer

pytestmark = pytest.mark.vllm

SMALL = [  # quickstart, shrunk: short outputs, few steps, every non-final step a tool call
    "classes.agent.steps={dist: constant, value: 3}",
    "classes.agent.output.tokens={dist: constant, value: 24}",
    "classes.agent.tool_call_probability=1.0",
    "classes.agent.output.tool_call_tokens=24",  # actual mode: keep tool steps at 24 too
]


def drive(
    planner: SessionPlanner, client: Client, cls: str, n: int
) -> list[tuple[object, list[RequestRecord]]]:
    """Run n sessions of class cls to their end; returns (session, records) pairs."""
    out = []
    for i in range(n):
        s = planner.new_session(cls, 0, i)
        recs: list[RequestRecord] = []
        while (step := s.next_step()) is not None:
            req = step.request
            req.request_id = f"{s.session_id}-{step.step}-{step.attempt}"
            rec = client.exchange(req)
            recs.append(rec)
            s.observe(rec)
            assert len(recs) < 50, "session never ended"
        out.append((s, recs))
    return out


@pytest.fixture
def tools_client(vllm_server):
    c = Client(vllm_server.base_url)
    yield ServerTokenizer(vllm_server.base_url, vllm_server.model), c
    c.close()


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        # Streamed: the hermes parser emits tool_calls deltas; a random model's
        # arguments are never valid JSON.
        (True, "malformed tool call"),
        # Not streamed, cut by max_tokens: the parser fails on the unfinished JSON and
        # vLLM returns the raw <tool_call> text as content, so no call at all.
        (False, "missing tool call"),
    ],
)
def test_actual_history_random_model_tool_calls_are_tool_loop_failures(
    vllm_server, tools_client, stream: bool, reason: str
) -> None:
    tok, client = tools_client
    profile = load_profile(
        "quickstart",
        [
            *SMALL,
            "history=actual",
            "classes.agent.tool_choice=named",
            f"classes.agent.request.stream={str(stream).lower()}",
        ],
    )
    planner = SessionPlanner(
        profile, tok, model=vllm_server.model, max_model_len=vllm_server.max_model_len, seed=11
    )
    for s, recs in drive(planner, client, "agent", 3):
        assert all(r.ok for r in recs), [(r.error_kind, r.error_detail) for r in recs]
        assert s.outcome == "tool_loop_failure", (s.outcome, s.reason)
        # A random model never closes the call: it is cut off at max_tokens, and says so.
        assert s.reason.startswith(reason), s.reason
        assert len(recs) == 1  # the first step expected a call; the session ends there
        if stream:
            (call,) = recs[0].tool_calls
            assert call["name"] in profile.classes["agent"].tools
            assert call["arguments_valid"] is False


def test_scripted_sessions_complete_and_reuse_the_cached_prefix(vllm_server, tools_client) -> None:
    tok, client = tools_client
    profile = load_profile("quickstart", SMALL)
    planner = SessionPlanner(
        profile, tok, model=vllm_server.model, max_model_len=vllm_server.max_model_len, seed=12
    )
    results = drive(planner, client, "agent", 2)
    for s, recs in results:
        assert s.outcome == "completed", (s.outcome, s.reason)
        assert len(recs) == 3 and all(r.ok for r in recs)
    later = [r for _, recs in results for r in recs][1:]
    # The 1k-token shared system prompt (+ tools) and the growing history are reused.
    assert all((r.cached_tokens or 0) > 0 for r in later), [r.cached_tokens for r in later]
    s0 = results[0][1]
    assert s0[2].cached_tokens >= s0[1].cached_tokens  # append policy: the prefix grows
