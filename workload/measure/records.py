"""Plain records of what happened: one per request attempt, one per session.

These are the only objects that cross from the client to the stats, the
artifacts and the Locust layer. They serialise to one JSON line each; the
schema is documented in docs/artifacts.md and other teams script
against it, so fields are only ever added, never renamed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Error kinds: a closed vocabulary so dashboards and verdicts can group on it.
ERROR_KINDS = (
    "connect",  # could not connect / DNS / refused
    "timeout",  # whole-request timeout
    "http_status",  # non-2xx answer (http_status and error_detail carry it)
    "stream_reset",  # connection dropped mid-stream
    "malformed_chunk",  # a data line that is not valid JSON / not a chunk
    "stall",  # no bytes for longer than the stall timeout
    "missing_done",  # stream ended without data: [DONE]
    "cancelled",  # the Locust user was stopped mid-request
    # a reply of the wrong shape: a body that is not a completion (no `choices`), a streaming
    # reply that is not an event stream (HTML page, JSON body), an error event in the stream
    "bad_response",
    "empty_response",  # a 2xx reply that generated nothing: no content, tool call or token
    "tool_loop",  # the step failed the tool loop (missing/malformed/unknown tool call)
)

STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_CANCELLED = "cancelled"


@dataclass(slots=True)
class ToolCall:
    """One assembled tool call from the model's reply."""

    index: int
    id: str | None
    name: str | None
    arguments: str
    arguments_valid: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class RequestRecord:
    """One request attempt, measured. Times are milliseconds unless named _s."""

    run_id: str = ""
    target: str = ""
    worker: str = "0"
    user_class: str = ""
    session_id: str = ""
    step: int = 0
    attempt: int = 0
    request_id: str = ""
    response_id: str | None = None
    endpoint: str = "chat"  # chat | completions
    stream: bool = True
    model: str | None = None
    t_start: float = 0.0  # unix seconds, stamped just before the first byte is sent
    status: str = STATUS_OK
    error_kind: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    # ITL summary over gaps between content-bearing chunks: mean, p50, p99, max
    itl_ms: dict[str, float] | None = None
    tpot_ms: float | None = None
    chunks: int = 0  # content-bearing chunks received
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    system_fingerprint: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    server_metrics: dict[str, Any] | None = None  # vLLM per-request `metrics` object, raw
    spec_decode: dict[str, Any] | None = None  # metrics.speculative_decoding, raw
    # blake2b-64 of the exact request body: proves two runs (or two deployments) got the same traffic
    body_hash: str | None = None
    # the same without the model name (workload.plan.payloads.content_hash): under `history:
    # actual` the paired shifts compare only requests whose content matched on both sides
    content_hash: str | None = None
    # Why this step failed the agent's tool loop (missing / malformed / unknown tool call, or an
    # error on a step that makes or carries a tool call); None when it did not. A request can be
    # ok at the HTTP level and still fail the tool loop.
    tool_loop_failure: str | None = None
    # Seconds the server asked the client to wait (Retry-After on a 429 / 503); None when absent.
    retry_after_s: float | None = None
    # The tool the session plan has this step call (scripted history: the synthesized call the
    # step stands for; actual history: the call asked of the model); None on a step that ends
    # in text. ``tool_calls`` above holds what the server returned; the two are kept apart.
    planned_tool: str | None = None
    # Whether it met every request-level SLO of its class (goodput; ``stats.Aggregate`` judges
    # it, ``measure.slo.request_meets_slo``); None when not judged.
    slo_met: bool | None = None
    # `agentload run --trace`: the index of the trace request this replays (None otherwise).
    trace_index: int | None = None
    # Reasoning (workload.plan.shapes): time to the first visible chunk (content or a tool
    # call), where ``ttft_ms`` counts reasoning chunks too; the chunks that carried reasoning
    # only; the server's usage.completion_tokens_details.reasoning_tokens (None: not
    # reported); the reasoning tokens the plan asked for (None: none asked).
    ttft_content_ms: float | None = None
    reasoning_chunks: int = 0
    reasoning_tokens: int | None = None
    reasoning_requested: int | None = None
    # Not written to requests.jsonl: in-memory only, for stats and actual history.
    itl_gaps_ms: list[float] = field(default_factory=list, repr=False)
    text: str = field(default="", repr=False)

    JSON_EXCLUDE = ("itl_gaps_ms", "text")

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    def to_json(self) -> dict[str, Any]:
        """The requests.jsonl row."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in self.JSON_EXCLUDE}
        return d


SESSION_OUTCOMES = ("completed", "failed", "tool_loop_failure", "cancelled")


@dataclass(slots=True)
class SessionRecord:
    """One agent session (a task): its steps and how it ended."""

    run_id: str = ""
    worker: str = "0"
    user_class: str = ""
    session_id: str = ""
    t_start: float = 0.0
    steps_planned: int = 0
    steps_done: int = 0
    outcome: str = "completed"
    reason: str | None = None
    duration_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0
    errors: int = 0
    tool_calls: int = 0  # returned by the server
    tool_calls_planned: int = 0  # steps the plan has end in a tool call, answered ok
    # Open loop: when the arrival schedule said this session starts (epoch s), and its index k
    # in its arrival stream's global schedule; None for closed-loop sessions (a user's next).
    # Start lateness = t_start - t_scheduled.
    t_scheduled: float | None = None
    arrival_index: int | None = None
    arrival_stream: str | None = None
    # The slowest TTFT of its steps (ms), None before a first token; with ``duration_ms`` (task
    # time: think time and tool pauses included) it feeds the session-level SLOs.
    worst_ttft_ms: float | None = None
    # Whether it was a good session (completed, every request and the session-level SLOs met:
    # goodput); None when not judged.
    slo_met: bool | None = None
    # A subagent's parent session (workload.plan.shapes, or a replayed sidechain); None otherwise.
    parent_session: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
