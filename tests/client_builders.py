"""SSE chunks and prepared requests for the client and transport tests."""

from __future__ import annotations

import orjson

from workload.measure.transport import PreparedRequest


def sse(obj) -> bytes:
    data = obj if isinstance(obj, (bytes, str)) else orjson.dumps(obj)
    data = data.encode() if isinstance(data, str) else data
    return b"data: " + data + b"\n\n"


def chunk(delta=None, *, text=None, finish=None, **top) -> dict:
    choice: dict = {"index": 0, "finish_reason": finish}
    if text is not None:
        choice["text"] = text
    else:
        choice["delta"] = delta or {}
    return {"id": "chatcmpl-x", "model": "m", "choices": [choice], **top}


USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 3,
    "total_tokens": 103,
    "prompt_tokens_details": {"cached_tokens": 64},
}
SPEC = {
    "mean_acceptance_length": 2.5,
    "draft_acceptance_rate": 0.75,
    "acceptance_histogram": [1, 2, 3, 4],
    "num_spec_steps": 10,
    "num_accepted_draft_tokens": 15,
    "num_draft_tokens": 20,
    "num_spec_tokens": 3,
}
METRICS = {"queued_ms": 1.5, "prefill_ms": 20.0, "speculative_decoding": SPEC}


def final_chunk(**over) -> dict:
    return {
        "id": "chatcmpl-x",
        "model": "m",
        "choices": [],
        "usage": USAGE,
        "metrics": METRICS,
        "system_fingerprint": "fp-1",
        **over,
    }


def request(**over) -> PreparedRequest:
    kw = dict(
        path="/v1/chat/completions",
        body=b'{"stream":true}',
        stream=True,
        endpoint="chat",
        request_id="rid-1",
        timeout_s=30.0,
        stall_timeout_s=5.0,
        user_class="coder",
        session_id="s1",
        step=2,
        attempt=0,
    )
    kw.update(over)
    return PreparedRequest(**kw)


ROLE = chunk({"role": "assistant", "content": ""})
