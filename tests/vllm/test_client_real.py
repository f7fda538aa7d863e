"""workload.measure.client against the real vLLM: what a record holds, and that it adds up with /metrics.

These drive `Client.exchange` directly (no Locust), so they check the measure
layer on the engine's own wire format. Timings are not asserted tightly: on a
shared 2-core machine a stream can arrive in one burst.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.vllm.conftest import delta, scrape
from tests.vllm.server import TOOLS
from workload.measure.client import Client
from workload.measure.specdecode import SpecDecodeStats
from workload.measure.transport import PreparedRequest

pytestmark = pytest.mark.vllm

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
# Repetitive text at temperature 0: the n-gram proposer finds matches.
REPEAT = "the agent reads the file and the agent runs the tests. " * 12


def prepared(
    model: str,
    *,
    endpoint: str = "chat",
    stream: bool = True,
    max_tokens: int = 16,
    rid: str = "t",
    text: str = REPEAT,
    **extra: Any,
) -> PreparedRequest:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        **extra,
    }
    if endpoint == "chat":
        body.setdefault("messages", [{"role": "user", "content": text}])
    else:
        body["prompt"] = text
    if stream:
        body["stream_options"] = {"include_usage": True}
    return PreparedRequest(
        path=CHAT if endpoint == "chat" else COMPLETIONS,
        body=json.dumps(body).encode(),
        stream=stream,
        endpoint=endpoint,
        request_id=rid,
        timeout_s=120,
        stall_timeout_s=60,
    )


@pytest.fixture
def client(vllm_server):
    c = Client(vllm_server.base_url, run_id="vllm-test")
    yield c
    c.close()


def test_streamed_chat_record_has_usage_metrics_and_spec_decode(vllm_server, client) -> None:
    rec = client.exchange(prepared(vllm_server.model, rid="rec-stream-1"))
    assert rec.ok, (rec.error_kind, rec.error_detail)
    assert rec.response_id == "chatcmpl-rec-stream-1"  # X-Request-Id becomes the id
    assert rec.http_status == 200 and rec.model == vllm_server.model
    assert rec.finish_reason == "length"
    assert rec.completion_tokens == 16 and rec.prompt_tokens and rec.prompt_tokens > 100
    assert rec.cached_tokens is not None  # --enable-prompt-tokens-details
    assert rec.system_fingerprint and rec.system_fingerprint.startswith("vllm-")
    assert rec.ttft_ms is not None and rec.e2e_ms is not None and rec.e2e_ms >= rec.ttft_ms
    assert 1 <= rec.chunks <= 16  # spec decode: one chunk may carry several tokens
    # --enable-per-request-metrics: the per-request timing object, raw.
    m = rec.server_metrics
    assert m is not None
    for key in (
        "time_to_first_token_ms",
        "generation_time_ms",
        "queue_time_ms",
        "mean_itl_ms",
        "tokens_per_second",
        "speculative_decoding",
    ):
        assert key in m, key
    # --per-request-spec-decode-metrics summary
    sd = rec.spec_decode
    assert sd is not None and sd is m["speculative_decoding"]
    for key in (
        "mean_acceptance_length",
        "draft_acceptance_rate",
        "acceptance_histogram",
        "num_spec_steps",
        "num_accepted_draft_tokens",
        "num_draft_tokens",
        "num_spec_tokens",
    ):
        assert key in sd, key
    assert sd["num_spec_tokens"] == 3 and len(sd["acceptance_histogram"]) == 4


def test_non_streamed_and_completions_records(vllm_server, client) -> None:
    for endpoint in ("chat", "completions"):
        for stream in (True, False):
            rec = client.exchange(
                prepared(
                    vllm_server.model,
                    endpoint=endpoint,
                    stream=stream,
                    rid=f"rec-{endpoint}-{stream}",
                    max_tokens=8,
                )
            )
            assert rec.ok, (endpoint, stream, rec.error_kind, rec.error_detail)
            assert rec.completion_tokens == 8, (endpoint, stream)
            assert rec.spec_decode is not None, (endpoint, stream)
            assert rec.cached_tokens is not None, (endpoint, stream)
            assert rec.text, (endpoint, stream)


def test_spec_decode_per_request_sums_equal_metrics_delta(vllm_server, client) -> None:
    before = scrape(vllm_server)
    spec = SpecDecodeStats()
    hist_total = [0, 0, 0, 0]
    for i, (endpoint, stream) in enumerate(
        [
            ("chat", True),
            ("chat", False),
            ("completions", True),
            ("completions", False),
            ("chat", True),
            ("chat", True),
        ]
    ):
        rec = client.exchange(
            prepared(
                vllm_server.model,
                endpoint=endpoint,
                stream=stream,
                rid=f"spec-{i}",
                max_tokens=24 + 8 * i,
                text=f"step {i}: " + REPEAT,
            )
        )
        assert rec.ok and rec.spec_decode, (i, rec.error_detail)
        spec.add(rec.spec_decode)
        hist_total = [
            a + b for a, b in zip(hist_total, rec.spec_decode["acceptance_histogram"], strict=True)
        ]
    after = scrape(vllm_server)
    s = spec.summary()
    assert s["accepted_tokens"] > 0, "no acceptance at all: the n-gram proposer never matched"
    assert s["accepted_tokens"] == delta(
        before, after, "vllm:spec_decode_num_accepted_tokens_total"
    )
    assert s["draft_tokens"] == delta(before, after, "vllm:spec_decode_num_draft_tokens_total")
    assert s["spec_steps"] == delta(before, after, "vllm:spec_decode_num_drafts_total")
    # Per position: the summed histogram's tail sums are the server's per-position counters.
    pos_b = before["labelled"].get("vllm:spec_decode_num_accepted_tokens_per_pos_total", {})
    pos_a = after["labelled"]["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    server_pos = [pos_a[str(j)] - pos_b.get(str(j), 0.0) for j in range(3)]
    assert s["accepted_per_position"] == server_pos
    assert s["acceptance_histogram"] == hist_total


def test_prefix_cache_hits_in_whole_blocks_and_match_metrics(vllm_server, client) -> None:
    before = scrape(vllm_server)
    block = int(before["cache_config"][0]["block_size"])
    prefix = " ".join(f"line {i}: result {i * 13 % 97} about caching." for i in range(150))
    recs = []
    for i in range(3):
        msgs = [{"role": "system", "content": prefix}, {"role": "user", "content": f"question {i}"}]
        recs.append(
            client.exchange(
                prepared(
                    vllm_server.model, rid=f"cache-{i}", max_tokens=2, messages=msgs, stream=i != 1
                )
            )
        )
    after = scrape(vllm_server)
    assert all(r.ok for r in recs), [r.error_detail for r in recs]
    assert recs[0].prompt_tokens and recs[0].prompt_tokens > 4 * block
    for r in recs[1:]:
        assert r.cached_tokens and r.cached_tokens > 0, "reused context was not served from cache"
        assert r.cached_tokens % block == 0  # whole KV blocks only
        assert r.cached_tokens >= (recs[0].prompt_tokens // block - 1) * block
    assert sum(r.cached_tokens or 0 for r in recs) == delta(
        before, after, "vllm:prefix_cache_hits_total"
    )
    assert sum(r.prompt_tokens or 0 for r in recs) == delta(
        before, after, "vllm:prefix_cache_queries_total"
    )


def test_named_tool_choice_stream_gives_parsed_call_with_malformed_arguments(
    vllm_server, client
) -> None:
    rec = client.exchange(
        prepared(
            vllm_server.model,
            rid="tool-1",
            max_tokens=40,
            text="Read README.md then run the tests.",
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "read_file"}},
        )
    )
    assert rec.ok, rec.error_detail
    assert len(rec.tool_calls) == 1
    call = rec.tool_calls[0]
    assert call["name"] == "read_file"
    assert call["id"] and call["id"].startswith("chatcmpl-tool-")
    # A random-weight model cannot write valid JSON arguments: it emits digits or only
    # whitespace inside the guided JSON until max_tokens cuts it (both seen).
    assert call["arguments_valid"] is False
    assert rec.ttft_ms is not None, "a tool_calls delta must count as the first token"


def test_required_tool_choice_non_streamed_returns_raw_text_not_tool_calls(
    vllm_server, client
) -> None:
    # vLLM 0.32 quirk worth knowing: cut by max_tokens, the hermes parser fails on the
    # unfinished JSON and the raw <tool_call> text comes back as content.
    rec = client.exchange(
        prepared(
            vllm_server.model,
            rid="tool-2",
            stream=False,
            max_tokens=24,
            text="Read README.md.",
            tools=TOOLS,
            tool_choice="required",
        )
    )
    assert rec.ok, rec.error_detail
    assert rec.tool_calls == []
    assert rec.text.startswith("<tool_call>")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (
            {
                "model": "no-such-model",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
            },
            404,
        ),
        ({"messages": [{"role": "user", "content": "OVER_CONTEXT"}], "max_tokens": 4}, 400),
        ({"prompt": "hi", "max_tokens": 100000}, 400),
    ],
)
def test_server_errors_are_records_not_exceptions(vllm_server, client, body, status) -> None:
    body = {"model": vllm_server.model, **body}
    if body.get("messages", [{}])[0].get("content") == "OVER_CONTEXT":
        # a prompt past the served context, whatever it is (the shared server's is 64k)
        over = "word " * (vllm_server.max_model_len + 1000)
        body["messages"] = [{"role": "user", "content": over}]
    endpoint = "completions" if "prompt" in body else "chat"
    req = PreparedRequest(
        path=CHAT if endpoint == "chat" else COMPLETIONS,
        body=json.dumps({**body, "stream": True}).encode(),
        stream=True,
        endpoint=endpoint,
        request_id=f"err-{status}",
        timeout_s=60,
    )
    rec = client.exchange(req)
    assert not rec.ok
    assert rec.error_kind == "http_status" and rec.http_status == status
    assert rec.error_detail and "error" in rec.error_detail
