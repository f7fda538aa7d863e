"""`--otlp-traces`: one span per agent session, and under it one per request and per wait.

A session span (``invoke_agent <class>``) opens when the session starts; each finished
request becomes a child span (``chat <model>``, kind CLIENT) stamped with the record's own
times, so nothing is measured twice; each wait before a step (the tool it ran, then think
time) becomes a child span (``execute_tool <tool>``, or ``think``) with the times the user
actually slept. A replayed subagent's session is a child of its parent's. Spans are handed
to a ``BatchSpanProcessor``: encoding and sending happen in its own greenlet, in batches.

Sampling is per session, decided from the run seed and the session id (both deterministic),
so a trace is never missing some of its steps and two runs with one seed (a canary's two
sides) trace the same sessions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from workload.measure.otlp_metrics import OPERATION
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
    span: Span
    context: Context
    last_tool: str | None = None  # the tool the last request's step called (the next wait's)


class SessionTracer:
    """Spans of the sessions this process plays (only the traced ones are kept)."""

    def __init__(
        self, tracer: Tracer, base: dict[str, AttributeValue], seed: int, ratio: float
    ) -> None:
        self.tracer = tracer
        self.base = base  # provider, system, request model, server address and port
        self.seed = seed
        self.ratio = ratio
        self.open: dict[str, _Open] = {}

    def session_started(
        self, session_id: str, cls: str, t_start: float, parent_id: str | None = None
    ) -> None:
        parent = self.open.get(parent_id) if parent_id else None
        if parent is None and (parent_id or not traced(self.seed, session_id, self.ratio)):
            return  # untraced (a subagent follows its parent's choice)
        span = self.tracer.start_span(
            f"invoke_agent {cls}",
            context=parent.context if parent else None,
            kind=SpanKind.INTERNAL,
            start_time=int(t_start * _NS),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": cls,
                "gen_ai.conversation.id": session_id,
                "gen_ai.provider.name": self.base.get("gen_ai.provider.name", ""),
                "gen_ai.request.model": self.base.get("gen_ai.request.model", ""),
            },
        )
        self.open[session_id] = _Open(span, trace.set_span_in_context(span))

    def waited(self, session_id: str, t0: float, t1: float, tool_s: float, think_s: float) -> None:
        """The user slept from t0 to t1 (unix s) before a step: its tool's time, then think."""
        s = self.open.get(session_id)
        if s is None or t1 <= t0 or (tool_s <= 0 and think_s <= 0):
            return  # untraced, or no planned wait (only the pacer's turn)
        attrs: dict[str, AttributeValue] = {"agentload.wait.tool_s": tool_s,
                                            "agentload.wait.think_s": think_s}  # fmt: skip
        if tool_s > 0:
            name = f"execute_tool {s.last_tool}" if s.last_tool else "execute_tool"
            attrs["gen_ai.operation.name"] = "execute_tool"
            if s.last_tool:
                attrs["gen_ai.tool.name"] = s.last_tool
        else:
            name = "think"
        span = self.tracer.start_span(
            name, context=s.context, kind=SpanKind.INTERNAL, start_time=int(t0 * _NS),
            attributes=attrs,
        )  # fmt: skip
        span.end(end_time=int(t1 * _NS))

    def request(self, rec: RequestRecord) -> None:
        s = self.open.get(rec.session_id)
        if s is None:
            return
        s.last_tool = rec.planned_tool or (_first_tool(rec) if rec.tool_calls else None)
        start = int(rec.t_start * _NS)
        op = OPERATION.get(rec.endpoint, rec.endpoint)
        span = self.tracer.start_span(
            f"{op} {self.base.get('gen_ai.request.model', '')}".rstrip(),
            context=s.context, kind=SpanKind.CLIENT, start_time=start,
            attributes=_request_attributes(rec, op, self.base),
        )  # fmt: skip
        if rec.status not in (STATUS_OK, STATUS_CANCELLED):
            span.set_status(Status(StatusCode.ERROR, rec.error_kind or None))
        end = start + int((rec.e2e_ms or 0.0) * 1e6) if rec.e2e_ms is not None else None
        span.end(end_time=end)

    def session_ended(self, srec: SessionRecord) -> None:
        s = self.open.pop(srec.session_id, None)
        if s is None:
            return
        s.span.set_attributes({
            "agentload.session.outcome": srec.outcome,
            "agentload.session.steps_planned": srec.steps_planned,
            "agentload.session.steps_done": srec.steps_done,
            "agentload.session.requests": srec.requests,
            "agentload.session.errors": srec.errors,
            "gen_ai.usage.input_tokens": srec.prompt_tokens,
            "gen_ai.usage.output_tokens": srec.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": srec.cached_tokens,
        })  # fmt: skip
        if srec.slo_met is not None:
            s.span.set_attribute("agentload.session.slo_met", srec.slo_met)
        if srec.outcome in ("failed", "tool_loop_failure"):
            s.span.set_status(Status(StatusCode.ERROR, srec.reason or srec.outcome))
        s.span.end(end_time=int((srec.t_start + srec.duration_ms / 1000.0) * _NS))

    def end_open(self) -> None:
        """End what is still open (a run stopped hard): the spans go out, marked unfinished."""
        for s in self.open.values():
            s.span.set_attribute("agentload.session.outcome", "unfinished")
            s.span.end()
        self.open.clear()


def _first_tool(rec: RequestRecord) -> str | None:
    name = rec.tool_calls[0].get("name") if rec.tool_calls else None
    return name if isinstance(name, str) else None


def _request_attributes(
    rec: RequestRecord, op: str, base: dict[str, AttributeValue]
) -> dict[str, AttributeValue]:
    """A request span's attributes: few, since each costs CPU twice (checked when set, encoded
    when sent); the rest of the record is in requests.jsonl under ``agentload.request_id``."""
    a: dict[str, AttributeValue] = {"gen_ai.operation.name": op, **base,
                                    "agentload.step": rec.step,
                                    "agentload.request_id": rec.request_id}  # fmt: skip
    for key, value in (
        ("gen_ai.usage.input_tokens", rec.prompt_tokens),
        ("gen_ai.usage.output_tokens", rec.completion_tokens),
        ("gen_ai.usage.cache_read.input_tokens", rec.cached_tokens),
        ("gen_ai.response.time_to_first_chunk",
         None if rec.ttft_ms is None else rec.ttft_ms / 1000.0),
        ("agentload.tpot_ms", rec.tpot_ms),
    ):  # fmt: skip
        if value is not None:
            a[key] = value
    if rec.finish_reason:
        a["gen_ai.response.finish_reasons"] = (rec.finish_reason,)
    spec = rec.spec_decode
    if spec:
        for key, name in (("num_accepted_draft_tokens", "agentload.spec_decode.accepted_tokens"),
                          ("num_draft_tokens", "agentload.spec_decode.draft_tokens")):  # fmt: skip
            if isinstance(spec.get(key), int):
                a[name] = spec[key]
    if rec.status != STATUS_OK:
        a["agentload.status"] = rec.status
        if rec.status != STATUS_CANCELLED:
            a["error.type"] = rec.error_kind or "_OTHER"
            if rec.http_status is not None:
                a["http.response.status_code"] = rec.http_status
    if rec.tool_loop_failure:
        a["agentload.tool_loop_failure"] = rec.tool_loop_failure
    return a
