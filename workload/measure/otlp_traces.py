"""`--otlp-traces`: one span per agent session, and under it one per request and per wait.

A session span (``invoke_agent <class>``) gets its ids when the session starts and is written
when it ends; each finished request becomes a child span (``chat <model>``, kind CLIENT)
stamped with the record's own times, so nothing is measured twice; each wait before a step
(the tool it ran, then think time) becomes a child span (``execute_tool <tool>``, or
``think``) with the times the user actually slept. A replayed subagent's session is a child
of its parent's. Spans are written only once they ended, straight into OTLP's wire format
(``otlp_spans``: no SDK span objects), and sent in batches by a thread of their own.

W3C trace context: before a request is sent, ``traceparent`` gives the header that carries
the session's trace id and the id the request's span will have, so a server that traces
(vLLM with ``--otlp-traces-endpoint``) puts its own span under the request's. A session that
is not sampled sends its (unrecorded) trace id with the sampled flag off, so a server that
follows its caller's decision (the SDK's default parent-based sampler) skips it too.

Sampling is per session, decided from the run seed and the session id (both deterministic),
so a trace is never missing some of its steps and two runs with one seed (a canary's two
sides) trace the same sessions.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from dataclasses import dataclass

from opentelemetry.util.types import AttributeValue

from workload.measure.otlp_metrics import OPERATION
from workload.measure.otlp_spans import (
    KIND_CLIENT,
    KIND_INTERNAL,
    SpanQueue,
    attributes,
    name_field,
    span,
)
from workload.measure.records import STATUS_CANCELLED, STATUS_OK, RequestRecord, SessionRecord

_NS = 1_000_000_000


def traced(seed: int, session_id: str, ratio: float) -> bool:
    """Whether a session is traced: a fixed share `ratio`, chosen by (seed, session id)."""
    if ratio >= 1.0:
        return True
    digest = hashlib.blake2b(f"{seed}:{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < ratio * 2**64


@dataclass(slots=True)
class _Open:
    trace_id: bytes
    span_id: bytes
    parent_id: bytes  # b"": a root (the parent session's span for a subagent)
    sampled: bool
    cls: str
    start_ns: int
    last_tool: str | None = None  # the tool the last request's step called (the next wait's)
    next_request: tuple[str, bytes] | None = None  # (request id, span id) handed out in a header


class SessionTracer:
    """Spans of the sessions this process plays (only the sampled ones are written)."""

    def __init__(
        self, queue: SpanQueue, base: dict[str, AttributeValue], seed: int, ratio: float
    ) -> None:
        self.queue = queue
        self.base = base  # provider, request model, server address and port
        self.seed = seed
        self.ratio = ratio
        self.open: dict[str, _Open] = {}
        self._ids = random.Random(os.urandom(16))  # span and trace ids: unique, not seeded
        model = str(base.get("gen_ai.request.model", ""))
        # what every span of a kind carries, encoded once
        self._request_base = {op: attributes([("gen_ai.operation.name", op), *base.items()])
                              for op in OPERATION.values()}  # fmt: skip
        self._request_name = {op: name_field(f"{op} {model}".rstrip()) for op in OPERATION.values()}
        self._session_base = attributes([
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.provider.name", base.get("gen_ai.provider.name", "")),
            ("gen_ai.request.model", model),
        ])  # fmt: skip
        self._names: dict[str, bytes] = {}

    def _id(self, nbytes: int) -> bytes:
        return (self._ids.getrandbits(nbytes * 8) or 1).to_bytes(nbytes, "big")

    def _name(self, name: str) -> bytes:
        b = self._names.get(name)
        if b is None:
            b = self._names[name] = name_field(name)
        return b

    def session_started(
        self, session_id: str, cls: str, t_start: float, parent_id: str | None = None
    ) -> None:
        parent = self.open.get(parent_id) if parent_id else None
        if parent is not None:  # a subagent: in its parent's trace, sampled as it is
            trace_id, up, sampled = parent.trace_id, parent.span_id, parent.sampled
        else:
            trace_id, up = self._id(16), b""
            sampled = not parent_id and traced(self.seed, session_id, self.ratio)
        self.open[session_id] = _Open(trace_id, self._id(8), up, sampled, cls,
                                      int(t_start * _NS))  # fmt: skip

    def traceparent(self, session_id: str, request_id: str) -> str | None:
        """The W3C ``traceparent`` header for the request about to be sent: the session's
        trace, the id the request's span will have, sampled as its session."""
        s = self.open.get(session_id)
        if s is None:
            return None
        span_id = self._id(8)
        s.next_request = (request_id, span_id)
        return f"00-{s.trace_id.hex()}-{span_id.hex()}-{'01' if s.sampled else '00'}"

    def waited(self, session_id: str, t0: float, t1: float, tool_s: float, think_s: float) -> None:
        """The user slept from t0 to t1 (unix s) before a step: its tool's time, then think."""
        s = self.open.get(session_id)
        if s is None or not s.sampled or t1 <= t0 or (tool_s <= 0 and think_s <= 0):
            return  # untraced, or no planned wait (only the pacer's turn)
        attrs: list[tuple[str, AttributeValue]] = [("agentload.wait.tool_s", tool_s),
                                                   ("agentload.wait.think_s", think_s)]  # fmt: skip
        if tool_s > 0:
            name = f"execute_tool {s.last_tool}" if s.last_tool else "execute_tool"
            attrs.append(("gen_ai.operation.name", "execute_tool"))
            if s.last_tool:
                attrs.append(("gen_ai.tool.name", s.last_tool))
        else:
            name = "think"
        self.queue.add(span(s.trace_id, self._id(8), s.span_id, self._name(name), KIND_INTERNAL,
                            int(t0 * _NS), int(t1 * _NS), attributes(attrs)))  # fmt: skip

    def request(self, rec: RequestRecord) -> None:
        s = self.open.get(rec.session_id)
        if s is None:
            return
        s.last_tool = rec.planned_tool or (_first_tool(rec) if rec.tool_calls else None)
        pending, s.next_request = s.next_request, None
        if not s.sampled:
            return
        span_id = pending[1] if pending and pending[0] == rec.request_id else self._id(8)
        start = int(rec.t_start * _NS)
        op = OPERATION.get(rec.endpoint, rec.endpoint)
        base = self._request_base.get(op)
        if base is None:
            base = self._request_base[op] = attributes([("gen_ai.operation.name", op),
                                                        *self.base.items()])  # fmt: skip
            self._request_name[op] = name_field(
                f"{op} {self.base.get('gen_ai.request.model', '')}".rstrip())  # fmt: skip
        error = None
        if rec.status not in (STATUS_OK, STATUS_CANCELLED):
            error = rec.error_kind or ""
        end = start + int(rec.e2e_ms * 1e6) if rec.e2e_ms is not None else start
        self.queue.add(span(s.trace_id, span_id, s.span_id, self._request_name[op], KIND_CLIENT,
                            start, end, base + attributes(_request_attributes(rec)), error))  # fmt: skip

    def session_ended(self, srec: SessionRecord) -> None:
        s = self.open.pop(srec.session_id, None)
        if s is None or not s.sampled:
            return
        attrs: list[tuple[str, AttributeValue]] = [
            ("agentload.session.outcome", srec.outcome),
            ("agentload.session.steps_planned", srec.steps_planned),
            ("agentload.session.steps_done", srec.steps_done),
            ("agentload.session.requests", srec.requests),
            ("agentload.session.errors", srec.errors),
            ("gen_ai.usage.input_tokens", srec.prompt_tokens),
            ("gen_ai.usage.output_tokens", srec.completion_tokens),
            ("gen_ai.usage.cache_read.input_tokens", srec.cached_tokens),
        ]
        if srec.slo_met is not None:
            attrs.append(("agentload.session.slo_met", srec.slo_met))
        error = None
        if srec.outcome in ("failed", "tool_loop_failure"):
            error = srec.reason or srec.outcome
        end = int((srec.t_start + srec.duration_ms / 1000.0) * _NS)
        self._session_span(s, srec.session_id, end, attrs, error)

    def _session_span(self, s: _Open, session_id: str, end_ns: int,
                      attrs: list[tuple[str, AttributeValue]], error: str | None) -> None:  # fmt: skip
        attrs = [("gen_ai.agent.name", s.cls), ("gen_ai.conversation.id", session_id), *attrs]
        self.queue.add(span(s.trace_id, s.span_id, s.parent_id,
                            self._name(f"invoke_agent {s.cls}"), KIND_INTERNAL, s.start_ns,
                            end_ns, self._session_base + attributes(attrs), error))  # fmt: skip

    def end_open(self) -> None:
        """Write what is still open (a run stopped hard), marked unfinished."""
        now_ns = time.time_ns()
        for sid, s in list(self.open.items()):
            if s.sampled:
                self._session_span(s, sid, now_ns, [("agentload.session.outcome", "unfinished")],
                                   None)  # fmt: skip
        self.open.clear()


def _first_tool(rec: RequestRecord) -> str | None:
    name = rec.tool_calls[0].get("name") if rec.tool_calls else None
    return name if isinstance(name, str) else None


def _request_attributes(rec: RequestRecord) -> list[tuple[str, AttributeValue]]:
    """A request span's own attributes (the base ones are encoded once): few, since each costs
    CPU; the rest of the record is in requests.jsonl under ``agentload.request_id``."""
    a: list[tuple[str, AttributeValue]] = [("agentload.step", rec.step),
                                           ("agentload.request_id", rec.request_id)]  # fmt: skip
    for key, value in (
        ("gen_ai.usage.input_tokens", rec.prompt_tokens),
        ("gen_ai.usage.output_tokens", rec.completion_tokens),
        ("gen_ai.usage.cache_read.input_tokens", rec.cached_tokens),
        ("gen_ai.response.time_to_first_chunk",
         None if rec.ttft_ms is None else rec.ttft_ms / 1000.0),
        ("agentload.tpot_ms", rec.tpot_ms),
    ):  # fmt: skip
        if value is not None:
            a.append((key, value))
    if rec.finish_reason:
        a.append(("gen_ai.response.finish_reasons", (rec.finish_reason,)))
    spec = rec.spec_decode
    if spec:
        for key, name in (("num_accepted_draft_tokens", "agentload.spec_decode.accepted_tokens"),
                          ("num_draft_tokens", "agentload.spec_decode.draft_tokens")):  # fmt: skip
            v = spec.get(key)
            if isinstance(v, int):
                a.append((name, v))
    if rec.status != STATUS_OK:
        a.append(("agentload.status", rec.status))
        if rec.status != STATUS_CANCELLED:
            a.append(("error.type", rec.error_kind or "_OTHER"))
            if rec.http_status is not None:
                a.append(("http.response.status_code", rec.http_status))
    if rec.tool_loop_failure:
        a.append(("agentload.tool_loop_failure", rec.tool_loop_failure))
    return a
