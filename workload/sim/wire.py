"""vLLM's wire shapes: error JSON, SSE chunk framing, response bodies, per-request metrics.

Streamed chunks are built from per-request byte prefixes so the hot path is one
`orjson.dumps` of the text plus concatenation.
"""

from __future__ import annotations

import orjson

from workload.sim.engine import EngineRequest

DONE = b"data: [DONE]\n\n"

ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}."""
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": ERROR_TYPES.get(status, "InternalServerError"),
                "param": param,
                "code": status,
            }
        }
    )


def timing_metrics(req: EngineRequest) -> dict:
    """vLLM's PerRequestTimingMetrics (engine-side; TTFT counts from scheduling, not arrival)."""
    n = req.num_output
    sched, first, last = req.scheduled_time, req.first_token_time, req.last_token_time
    gen = (last - first) * 1000.0
    return {
        "time_to_first_token_ms": (first - sched) * 1000.0,
        "generation_time_ms": gen,
        "queue_time_ms": (sched - req.arrival_time) * 1000.0,
        "mean_itl_ms": gen / (n - 1) if n > 1 else None,
        "tokens_per_second": n / (last - sched) if last > sched else None,
    }


class ChunkFormatter:
    """Byte-level SSE chunks for one request (chat or completions)."""

    __slots__ = ("chat", "head", "model_json")

    def __init__(self, chat: bool, rid: str, created: int, model: str, fingerprint: str):
        self.chat = chat
        obj = "chat.completion.chunk" if chat else "text_completion"
        self.model_json = orjson.dumps(model)
        self.head = (
            b'data: {"id":%b,"object":"%b","created":%d,"model":%b,"system_fingerprint":%b,'
            % (orjson.dumps(rid), obj.encode(), created, self.model_json, orjson.dumps(fingerprint))
        )

    def role(self) -> bytes:
        """Chat's first chunk: the role, with empty content (as vLLM sends it)."""
        return (
            self.head
            + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            + b'"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def text(self, text: str, finish: str | None) -> bytes:
        """A content chunk; `finish` set on the last one."""
        fin = b'"%b","stop_reason":null' % finish.encode() if finish else b"null"
        if self.chat:
            return (
                self.head
                + b'"choices":[{"index":0,"delta":{"content":'
                + orjson.dumps(text)
                + b'},"logprobs":null,"finish_reason":'
                + fin
                + b"}]}\n\n"
            )
        if not finish:
            fin = b'null,"stop_reason":null'
        return (
            self.head
            + b'"choices":[{"index":0,"text":'
            + orjson.dumps(text)
            + b',"logprobs":null,"finish_reason":'
            + fin
            + b"}]}\n\n"
        )

    def delta(self, delta: dict, finish: str | None) -> bytes:
        """A chat chunk with an arbitrary delta (tool calls)."""
        tail = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish:
            tail["stop_reason"] = None
        return self.head + b'"choices":[' + orjson.dumps(tail) + b"]}\n\n"

    def usage(self, usage: dict, metrics: dict | None) -> bytes:
        """The final chunk: `choices: []`, usage, and the per-request metrics object."""
        body = b'"choices":[],"usage":' + orjson.dumps(usage)
        if metrics is not None:
            body += b',"metrics":' + orjson.dumps(metrics)
        return self.head + body + b"}\n\n"
