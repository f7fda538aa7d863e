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


def error_body(
    status: int, message: str, param: str | None = None, err_type: str | None = None
) -> bytes:
    """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}; `type` is the
    exception name for the status unless given (request validation says "Bad Request")."""
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": err_type or ERROR_TYPES.get(status, "InternalServerError"),
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
    """Byte-level SSE chunks for one request (chat or completions), laid out as vLLM 0.32 sends
    them: `system_fingerprint` only on the usage chunk (or, without `include_usage`, on the
    finish chunk), `token_ids: null` in every choice, `prompt_token_ids`/`prompt_text` (null)
    on chat's role chunk, `prompt_token_ids: null` in every completions choice."""

    __slots__ = ("chat", "fp", "head", "include_usage")

    def __init__(
        self,
        chat: bool,
        rid: str,
        created: int,
        model: str,
        fingerprint: str,
        include_usage: bool = True,
    ):
        self.chat = chat
        self.include_usage = include_usage
        obj = "chat.completion.chunk" if chat else "text_completion"
        self.fp = orjson.dumps(fingerprint)
        self.head = b'data: {"id":%b,"object":"%b","created":%d,"model":%b,' % (
            orjson.dumps(rid),
            obj.encode(),
            created,
            orjson.dumps(model),
        )

    def _close(self, finish: str | None) -> bytes:
        """End of a choices chunk: the finish chunk carries the fingerprint when no usage
        chunk follows."""
        if finish and not self.include_usage:
            return b'],"system_fingerprint":' + self.fp + b"}\n\n"
        return b"]}\n\n"

    def role(self) -> bytes:
        """Chat's first chunk: the role, with empty content (as vLLM sends it)."""
        return (
            self.head
            + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            + b'"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,'
            + b'"prompt_text":null}\n\n'
        )

    def text(self, text: str, finish: str | None) -> bytes:
        """A content chunk; `finish` set on the last one."""
        fin = b'"%b"' % finish.encode() if finish else b"null"
        if self.chat:
            return (
                self.head
                + b'"choices":[{"index":0,"delta":{"content":'
                + orjson.dumps(text)
                + b'},"logprobs":null,"finish_reason":'
                + fin
                + (b',"stop_reason":null,"token_ids":null}' if finish else b',"token_ids":null}')
                + self._close(finish)
            )
        return (
            self.head
            + b'"choices":[{"index":0,"text":'
            + orjson.dumps(text)
            + b',"logprobs":null,"finish_reason":'
            + fin
            + b',"stop_reason":null,"prompt_token_ids":null,"token_ids":null}'
            + self._close(finish)
        )

    def delta(self, delta: dict, finish: str | None) -> bytes:
        """A chat chunk with an arbitrary delta (tool calls)."""
        tail: dict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish:
            tail["stop_reason"] = None
        tail["token_ids"] = None
        return self.head + b'"choices":[' + orjson.dumps(tail) + self._close(finish)

    def usage(self, usage: dict, metrics: dict | None) -> bytes:
        """The final chunk: `choices: []`, usage, the fingerprint and the per-request metrics."""
        body = b'"choices":[],"usage":' + orjson.dumps(usage) + b',"system_fingerprint":' + self.fp
        if metrics is not None:
            body += b',"metrics":' + orjson.dumps(metrics)
        return self.head + body + b"}\n\n"
