"""Workload profiles: YAML files validated into pydantic models.

A profile describes agent traffic as traffic classes (Locust user classes),
each with sessions of several steps (one LLM call per step), shared prefixes,
tools, a context policy, request extras and SLOs. Units: sizes in tokens,
times in seconds unless a name ends in ``_ms``. Distributions are documented in
``workload.plan.dist`` (a bare number is a constant). Example::

    schema_version: 1
    description: one interactive agent class
    seed: 7
    tools:
      read_file:
        parameters: {type: object, properties: {path: {type: string}}, required: [path]}
        latency_s: {dist: lognormal, mean: 0.4, sigma: 0.6, max: 5}
        result_tokens: {dist: lognormal, mean: 900, sigma: 0.9, min: 20, max: 8000}
    classes:
      agent:
        weight: 1
        steps: {dist: uniform, low: 5, high: 20}
        system_prompt: {tokens: 3000, share: global}
        tools: [read_file]
        tool_call_probability: 0.9
        context: {policy: compact, compact_at_tokens: 30000, summary_tokens: 1500}

Reading files (built-ins, ``extends``, ``--set``, migrations) is ``workload.plan.loading``;
the generated field reference is ``workload.plan.reference``.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workload.plan.arrivals import ArrivalSpec
from workload.plan.checks import finite_json, floor_problems
from workload.plan.dist import Dist, constant
from workload.plan.shapes import (
    PARALLEL_TOOLS_FIELD,
    REASONING_FIELD,
    SUBAGENTS_FIELD,
    ReasoningSpec,
    SubagentSpec,
    nesting_problems,
    shape_problems,
)
from workload.plan.stages import StageList

SCHEMA_VERSION = 1


def _defaults(cls: type[BaseModel]) -> Any:
    """A default_factory building a sub-model from its own defaults."""
    return lambda: cls.model_validate({})


class _M(BaseModel):
    # NaN / infinity are never a valid setting (they validated once and ran 0 requests)
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


# Documented bounds (docs/profiles.md, "Bounds and limits"): generous, but finite.
MAX_TOKENS = 10_000_000  # any single size in tokens
MAX_SECONDS = 7 * 86400.0  # any duration or timeout
MAX_COUNT = 100_000  # users, fixed counts
MAX_STEPS = 10_000

# Distribution fields and the least value their samples may take: (path under a class, floor).
DIST_FLOORS: tuple[tuple[tuple[str, ...], float, str], ...] = (
    (("steps",), 1, "LLM calls per session"),
    (("user_turn",), 0, "tokens"),
    (("first_user_turn",), 0, "tokens"),
    (("output", "tokens"), 1, "max_tokens"),
    (("output", "final_tokens"), 1, "max_tokens"),
    (("think_time_s",), 0, "seconds"),
    (("context", "break_s"), 0, "seconds"),
    (("parallel_tools",), 1, "tool calls per tool step"),
    (("subagents", "count"), 1, "subagents per spawning step"),
    (("subagents", "tool_calls"), 1, "tool calls beside subagents"),
    (("reasoning", "tokens"), 0, "tokens"),
)
TOOL_DIST_FLOORS = ((("latency_s",), 0, "seconds"), (("result_tokens",), 0, "tokens"))


# ---------------------------------------------------------------- sub-models
class ToolSpec(_M):
    """One tool in the catalog: its schema as the model sees it, and how it behaves."""

    description: str = Field("", description="Tool description sent in the tool schema.")
    description_tokens: int = Field(
        0,
        ge=0,
        le=MAX_TOKENS,
        description="Synthetic text appended to the description (tokens), to size the schema.",
    )
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (OpenAI `function.parameters`).",
    )
    latency_s: Dist = Field(
        default_factory=lambda: constant(0.5),
        description="Tool execution time (s): the pause before the step that returns its result.",
    )
    result_tokens: Dist = Field(
        default_factory=lambda: constant(200), description="Size of the tool result (tokens)."
    )
    error_probability: float = Field(
        0.0, ge=0, le=1, description="Probability the tool returns an error result (short text)."
    )
    weight: float = Field(1.0, gt=0, description="Relative chance this tool is the one called.")

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object":
            raise ValueError("parameters must be a JSON Schema with type: object")
        if not finite_json(v):
            raise ValueError("parameters must hold finite numbers only (no NaN or infinity)")
        return v


class SystemPrompt(_M):
    tokens: int = Field(1000, ge=0, le=MAX_TOKENS, description="System prompt size (tokens).")
    share: str = Field(
        "class",
        description=(
            "Who shares the identical system prompt + tool schemas (the cached prefix): "
            "'class' (all sessions of this class), 'global' (every class with share global), "
            "'session' (unique per session: no prefix sharing), or any group name."
        ),
    )


class OutputSpec(_M):
    tokens: Dist = Field(
        default_factory=lambda: constant(200), description="Output length: sent as max_tokens."
    )
    final_tokens: Dist | None = Field(
        None, description="Output length of the last step (the answer); default: tokens."
    )
    ignore_eos: bool = Field(
        False,
        description="Send vLLM `ignore_eos: true` so the server generates exactly max_tokens.",
    )
    min_tokens: bool = Field(False, description="Send vLLM `min_tokens` equal to max_tokens.")
    tool_call_tokens: int = Field(
        256,
        ge=1,
        description=(
            "Under `history: actual`, a step that expects a tool call sends at least this "
            "max_tokens: a harness leaves room for the whole call, and a call cut off at "
            "max_tokens is a tool-loop failure (reason 'malformed tool call (cut off at "
            "max_tokens)'). Scripted steps send `tokens` as drawn."
        ),
    )


class ContextPolicy(_M):
    """What happens to the conversation history as a session goes on."""

    policy: Literal["append", "compact", "discard", "rebuild"] = Field(
        "append",
        description=(
            "append: history grows; compact: past compact_at_tokens the history is replaced by "
            "a summary of summary_tokens (the cached prefix breaks after the system prompt); "
            "discard: after each step the session ends with probability discard_probability "
            "(outcome completed, reason discarded; the user starts a new session); rebuild: "
            "with probability rebuild_probability a step follows a break of break_s and re-sends "
            "the same history under a new cache_salt (a cold prefix cache). Any policy also "
            "compacts past compact_at_tokens when that is set, and always before a request "
            "would not fit max_model_len."
        ),
    )
    compact_at_tokens: int | None = Field(
        None,
        gt=0,
        le=MAX_TOKENS,
        description="Context size (tokens) that triggers compaction (required by policy compact).",
    )
    summary_tokens: int = Field(
        1000, ge=1, le=MAX_TOKENS, description="Size of the summary (tokens) after compaction."
    )
    discard_probability: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Per-step probability the session is discarded (policy discard).",
    )
    rebuild_probability: float = Field(
        0.1, ge=0, le=1, description="Per-step probability of a break + rebuild (policy rebuild)."
    )
    break_s: Dist = Field(
        default_factory=lambda: constant(30.0), description="Break before a rebuild (s)."
    )
    cache_loss_tokens: Dist | None = Field(
        None,
        description=(
            "A provider cache's misses (any policy): when set, each step after the first "
            "re-sends the history from this many tokens before the end of the previous "
            "prompt on as new bytes (same sizes), so a prefix cache serves the previous "
            "prompt less these tokens and none of its answer (negative: that much of the "
            "answer too; past the history: into the system prompt, which the session keeps "
            "so cut). 0: a cache written up to the previous prompt (Anthropic's). Unset: "
            "an ideal cache, everything sent before is reusable. `trace fit` sets it."
        ),
    )

    @model_validator(mode="after")
    def _needs(self) -> ContextPolicy:
        if self.policy == "compact" and self.compact_at_tokens is None:
            raise ValueError("policy compact needs compact_at_tokens (a positive token count)")
        if self.compact_at_tokens is not None and self.summary_tokens >= self.compact_at_tokens:
            raise ValueError(
                f"summary_tokens {self.summary_tokens} must be < compact_at_tokens {self.compact_at_tokens}"
            )
        return self


class RequestSpec(_M):
    endpoint: Literal["chat", "completions"] = Field(
        "chat",
        description="/v1/chat/completions (chat) or /v1/completions (history as one prompt).",
    )
    stream: bool = Field(True, description="Stream (SSE, with usage on the final chunk) or not.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    priority: int | None = Field(
        None,
        ge=-(2**31),
        le=2**31 - 1,
        description="vLLM `priority` (lower runs first; needs --scheduling-policy priority). Omitted when null.",
    )
    session_id: bool = Field(False, description="Send vLLM `session_id` = the session's id.")
    cache_salt: str | None = Field(
        None,
        description=(
            "vLLM `cache_salt` sent with every request (isolates prefix caching). Omitted when "
            "null; the rebuild policy appends '-r<N>' after the N-th rebuild (or uses the "
            "session id when null)."
        ),
    )
    tool_choice: Literal["none", "auto"] = Field(
        "none",
        description=(
            "tool_choice sent in scripted mode, and in actual mode on steps that expect no tool "
            "call. 'none' keeps the tool schemas in the prompt without needing "
            "--enable-auto-tool-choice on the server."
        ),
    )
    structured_every: int | None = Field(
        None,
        ge=1,
        description=(
            "Scripted mode: on every step k with k % N == 0 that plans a tool call, send "
            "tool_choice 'required' or named (structured_choice) instead, so the server "
            "constrains the reply to a tool call (structured output; exercises e.g. a "
            "spec-decode fallback for structured outputs). Null: never. Actual mode ignores it."
        ),
    )
    structured_choice: Literal["required", "named"] = Field(
        "named",
        description="tool_choice on structured_every steps: 'required' or the planned tool.",
    )


class Timeouts(_M):
    request_s: float = Field(
        600.0,
        gt=0,
        le=MAX_SECONDS,
        description=(
            "Whole-request timeout (s). 600 s covers a long background job (a 100k-token "
            "prompt plus thousands of output tokens under load)."
        ),
    )
    stall_s: float = Field(
        120.0,
        gt=0,
        le=MAX_SECONDS,
        description=(
            "Longest gap between stream bytes (s), time to the first byte included: a long "
            "prefill queued behind other work can stay silent for over a minute."
        ),
    )


class SLO(_M):
    ttft_p95_ms: float | None = Field(None, gt=0, description="p95 time to first token (ms).")
    itl_p95_ms: float | None = Field(None, gt=0, description="p95 inter-token latency (ms).")
    e2e_p95_ms: float | None = Field(None, gt=0, description="p95 request end-to-end time (ms).")
    session_success_ratio: float | None = Field(
        None, ge=0, le=1, description="Minimum share of sessions with outcome completed."
    )


_VALIDATED_BY = (
    "Where these thresholds were measured against the profile's own block-to-block spread (a "
    "bench run and its results); without it the verdict's headline says the thresholds are "
    "not validated for this profile."
)
_NOT_THRESHOLDS = ("alpha", "history_actual", "validated_by")


class CompareThresholds(_M):
    """How much worse B may be than A before `agentload compare` says regression.

    A threshold is also what a canary must rule out to say "no detectable change"
    (else "inconclusive"): set it no tighter than the canary design resolves
    (docs/canary-verdict-quality.md). `null` turns a metric's gate off.
    """

    ttft_shift_pct: float | None = Field(
        10.0, ge=0, description="Allowed paired TTFT shift (median per-request change) (%)."
    )
    tpot_shift_pct: float | None = Field(
        10.0, ge=0, description="Allowed paired TPOT shift, per output token (%): the headline."
    )
    e2e_shift_pct: float | None = Field(10.0, ge=0, description="Allowed paired E2E shift (%).")
    ttft_p95_pct: float | None = Field(10.0, ge=0, description="Allowed TTFT p95 increase (%).")
    ttft_content_p95_pct: float | None = Field(
        None,
        ge=0,
        description="Allowed p95 increase of the time to the first visible content (%; "
        "reasoning excluded); null (the default): shown, not gated.",
    )
    itl_p95_pct: float | None = Field(10.0, ge=0, description="Allowed ITL p95 increase (%).")
    e2e_p95_pct: float | None = Field(10.0, ge=0, description="Allowed E2E p95 increase (%).")
    tpot_p95_pct: float | None = Field(
        10.0, ge=0, description="Allowed TPOT (per output token) p95 increase (%)."
    )
    tpot_p90_pct: float | None = Field(
        None,
        ge=0,
        description="Allowed TPOT p90 increase (%); null (the default): shown, not gated. "
        "Catches a broad tail rise with fewer blocks than p95 needs.",
    )
    spec_acceptance_length_pct: float | None = Field(
        10.0, ge=0, description="Allowed spec-decode mean acceptance length drop (%)."
    )
    spec_acceptance_rate_pp: float | None = Field(
        5.0, ge=0, description="Allowed spec-decode draft acceptance rate drop (points)."
    )
    throughput_pct: float | None = Field(
        5.0, ge=0, description="Allowed output-token throughput drop (%)."
    )
    completed_sessions_pct: float | None = Field(
        10.0, ge=0, description="Allowed drop in completed sessions per minute (%)."
    )
    session_success_pp: float | None = Field(
        5.0,
        ge=0,
        description="Allowed session success ratio drop (percentage points). A canary must be "
        "able to exclude it: with no failures, n sessions per side bound the drop at about "
        "300/n points (5 needs about 100 sessions per side).",
    )
    tool_loop_failure_pp: float | None = Field(
        5.0, ge=0, description="Allowed tool-loop failure ratio rise (percentage points)."
    )
    cached_ratio_pp: float | None = Field(
        5.0, ge=0, description="Allowed cached-token ratio drop (points)."
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="Significance level for the A/B tests.")
    validated_by: str | None = Field(None, description=_VALIDATED_BY)
    history_actual: dict[str, float | None] = Field(
        default_factory=dict,
        description="Thresholds that replace the ones above when either run replays its own "
        "server's answers (`history: actual`), e.g. `{e2e_p95_pct: 50}`: then the answers' "
        "lengths and the sessions' paths are the server's, and tails that follow them move "
        "more between two instances. Keys are the fields above; null turns a gate off.",
    )

    @field_validator("history_actual")
    @classmethod
    def _known_thresholds(cls, v: dict[str, float | None]) -> dict[str, float | None]:
        known = [f for f in cls.model_fields if f not in _NOT_THRESHOLDS]
        for key, val in v.items():
            if key not in known:
                raise ValueError(f"unknown threshold {key!r} (allowed: {', '.join(known)})")
            if val is not None and val < 0:
                raise ValueError(f"{key}: must be >= 0 (or null to turn the gate off)")
        return v


class RunDefaults(_M):
    """Run shape used when the command line does not say (`agentload run` flags win)."""

    users: int = Field(10, ge=1, le=MAX_COUNT, description="Concurrent users (sessions in flight).")
    spawn_rate: float | None = Field(
        None, gt=0, description="Users started per second (default: all within one second)."
    )
    duration_s: float = Field(60.0, gt=0, le=MAX_SECONDS, description="Run length (s).")
    arrival: ArrivalSpec | None = Field(
        None,
        description=(
            "Open loop for the whole profile: sessions start by this arrival process, each of a "
            "weighted class picked by weight (fixed_count classes stay closed-loop users)."
        ),
    )
    stages: StageList | None = Field(
        None,
        description=(
            "Load stages played in order (duration_s + users, or duration_s + arrival_rate; "
            "optional ramp_s); their total is the run length."
        ),
    )


class TrafficClass(_M):
    """One Locust user class: who sends what, how often, with which tools."""

    description: str = Field("", description="What this class stands for.")
    weight: float | None = Field(
        None, gt=0, description="Relative share of users (default 1 when fixed_count is unset)."
    )
    fixed_count: int | None = Field(
        None,
        ge=0,
        le=MAX_COUNT,
        description="Exact number of users of this class (instead of weight).",
    )
    steps: Dist = Field(
        default_factory=lambda: constant(1), description="LLM calls per session (integer, >= 1)."
    )
    max_steps: int = Field(
        100,
        ge=1,
        le=MAX_STEPS,
        description="Step budget; in actual mode a session past it is a tool-loop failure.",
    )
    system_prompt: SystemPrompt = Field(
        default_factory=_defaults(SystemPrompt), description="Shared prefix."
    )
    user_turn: Dist = Field(
        default_factory=lambda: constant(100), description="User message size (tokens)."
    )
    first_user_turn: Dist | None = Field(
        None,
        description="Size of a session's first user message (tokens); default: user_turn.",
    )
    output: OutputSpec = Field(
        default_factory=_defaults(OutputSpec), description="Output length per step."
    )
    tools: dict[str, float] = Field(
        default_factory=dict,
        description="Tools this class may call (names from the top-level catalog), with relative weights; a list means equal weights.",
    )
    tool_call_probability: float = Field(
        0.0, ge=0, le=1, description="Chance a step (other than the last) ends in a tool call."
    )
    tool_choice: Literal["required", "named", "auto"] = Field(
        "required",
        description="Actual mode, on steps that expect a tool call: 'required', 'named' (the planned tool), or 'auto'.",
    )
    think_time_s: Dist = Field(
        default_factory=lambda: constant(1.0),
        description="User think time before each user turn (s).",
    )
    parallel_tools: Dist = PARALLEL_TOOLS_FIELD
    subagents: SubagentSpec | None = SUBAGENTS_FIELD
    reasoning: ReasoningSpec | None = REASONING_FIELD
    context: ContextPolicy = Field(
        default_factory=_defaults(ContextPolicy), description="Context policy."
    )
    request: RequestSpec = Field(
        default_factory=_defaults(RequestSpec), description="Request extras."
    )
    timeouts: Timeouts = Field(default_factory=_defaults(Timeouts), description="Request timeouts.")
    retries: int = Field(
        0,
        ge=0,
        le=10,
        description="Re-sends of a failed request (same body, next attempt number) before the session fails.",
    )
    slo: SLO = Field(
        default_factory=_defaults(SLO), description="Service-level objectives for this class."
    )
    arrival: ArrivalSpec | None = Field(
        None,
        description=(
            "Open loop: sessions of this class start by this arrival process, whatever the "
            "server's speed (steps inside a session stay closed-loop); unset = closed-loop users."
        ),
    )

    @field_validator("tools", mode="before")
    @classmethod
    def _list_to_weights(cls, v: Any) -> Any:
        if isinstance(v, list):
            return {name: 1.0 for name in v}
        return v

    @field_validator("tools")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        for name, w in v.items():
            if w <= 0:
                raise ValueError(f"tool weight for {name!r} must be > 0")
        return v

    @model_validator(mode="after")
    def _check(self) -> TrafficClass:
        if self.weight is not None and self.fixed_count is not None:
            raise ValueError("give weight or fixed_count, not both")
        if self.weight is None and self.fixed_count is None:
            self.weight = 1.0
        if self.tool_call_probability > 0 and not self.tools:
            raise ValueError("tool_call_probability > 0 needs at least one tool in tools")
        return self


class Profile(_M):
    """A whole workload: traffic classes plus run-wide settings."""

    schema_version: int = Field(SCHEMA_VERSION, description="Profile format version.")
    name: str = Field("", description="Profile name (default: the file name without .yaml).")
    description: str = Field("", description="One line shown by `agentload profiles list`.")
    extends: str | None = Field(
        None, description="Built-in name or file path this profile overrides (deep merge)."
    )
    seed: int = Field(
        0, ge=0, le=2**63 - 1, description="Run seed: same seed, same request bodies."
    )
    history: Literal["scripted", "actual"] = Field(
        "scripted",
        description="scripted: assistant turns are synthesized (traffic independent of replies); actual: replies and tool calls go into history.",
    )
    max_error_ratio: float = Field(
        0.05, ge=0, le=1, description="Failed-request ratio above which `agentload run` exits 1."
    )
    run: RunDefaults = Field(
        default_factory=_defaults(RunDefaults), description="Default run shape."
    )
    compare: CompareThresholds = Field(
        default_factory=_defaults(CompareThresholds), description="A/B regression thresholds."
    )
    tools: dict[str, ToolSpec] = Field(default_factory=dict, description="Tool catalog by name.")
    classes: dict[str, TrafficClass] = Field(description="Traffic classes by name (at least one).")

    @field_validator("classes")
    @classmethod
    def _some(cls, v: dict[str, TrafficClass]) -> dict[str, TrafficClass]:
        if not v:
            raise ValueError("at least one traffic class is needed")
        return v

    def check(self) -> list[str]:
        """Cross-field problems pydantic cannot see field by field: (path, message) lines."""
        out: list[str] = []
        for cname, c in self.classes.items():
            for t in c.tools:
                if t not in self.tools:
                    known = ", ".join(sorted(self.tools)) or "none defined"
                    close = difflib.get_close_matches(t, list(self.tools), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    out.append(f"classes.{cname}.tools.{t}: unknown tool{hint} (catalog: {known})")
            if self.history == "actual" and c.request.endpoint == "completions" and c.tools:
                out.append(
                    f"classes.{cname}.request.endpoint: history actual needs endpoint chat for "
                    "tool calls (allowed: chat, or history scripted)"
                )
            out += floor_problems(f"classes.{cname}", c, DIST_FLOORS)
            out += shape_problems(f"classes.{cname}", c, self.classes)
            if c.steps.dist == "constant" and not float(c.steps.value).is_integer():  # type: ignore[union-attr]
                out.append(f"classes.{cname}.steps: must be a whole number of steps")
        out += nesting_problems(self.classes)
        for tname, tool in self.tools.items():
            out += floor_problems(f"tools.{tname}", tool, TOOL_DIST_FLOORS)
        out.extend(self._check_load_model())
        return out

    def _check_load_model(self) -> list[str]:
        """Open-loop arrivals and stages that cannot be played together."""
        out: list[str] = []
        open_classes = [n for n, c in self.classes.items() if c.arrival is not None]
        if self.run.arrival is not None:
            for n in open_classes:
                out.append(
                    f"classes.{n}.arrival: run.arrival already starts every weighted class's "
                    "sessions; set one of the two"
                )
            if not any(c.fixed_count is None for c in self.classes.values()):
                out.append("run.arrival: no weighted class to start (every class has fixed_count)")
        for n in open_classes:
            if self.classes[n].fixed_count is not None:
                out.append(
                    f"classes.{n}.arrival: an open-loop class has no fixed_count "
                    "(its rate sets how many sessions run)"
                )
        stages = self.run.stages
        if stages and stages[0].dimension == "arrival_rate":
            if open_classes:
                out.append(
                    f"run.stages: arrival_rate stages drive the run-level stream; use run.arrival "
                    f"(process, cap) instead of classes.{open_classes[0]}.arrival"
                )
            elif not any(c.fixed_count is None for c in self.classes.values()):
                out.append("run.stages: arrival_rate stages need a weighted class to start")
        return out
