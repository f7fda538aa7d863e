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

``extends: NAME_OR_PATH`` deep-merges this file over another profile (mappings
merge key by key; lists and scalars replace). ``load_profile(..., overrides=
["classes.agent.weight=3"])`` applies ``--set`` overrides (YAML-typed values)
after that. Problems are collected into ``ProfileError.problems``, one line
each naming the file, the field path and what is allowed.

Built-in profiles are the YAML files in the top-level ``profiles/`` folder, the
only copy in the tree; the wheel ships them as the package data
``workload.builtin_profiles``.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workload.errors import ProfileError as ProfileError  # noqa: F401 - re-exported
from workload.plan.dist import Component, Dist, constant

SCHEMA_VERSION = 1
DEFAULT_PROFILE = "quickstart"

# Old schema versions that still load: version -> function(raw dict) -> raw dict one
# version newer. Empty while there is only version 1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def _defaults(cls: type[BaseModel]) -> Any:
    """A default_factory building a sub-model from its own defaults."""
    return lambda: cls.model_validate({})


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# ---------------------------------------------------------------- sub-models
class ToolSpec(_M):
    """One tool in the catalog: its schema as the model sees it, and how it behaves."""

    description: str = Field("", description="Tool description sent in the tool schema.")
    description_tokens: int = Field(
        0,
        ge=0,
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
        return v


class SystemPrompt(_M):
    tokens: int = Field(1000, ge=0, description="System prompt size (tokens).")
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
        description="Context size (tokens) that triggers compaction (required by policy compact).",
    )
    summary_tokens: int = Field(
        1000, ge=1, description="Size of the summary (tokens) after compaction."
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


class Timeouts(_M):
    request_s: float = Field(600.0, gt=0, description="Whole-request timeout (s).")
    stall_s: float = Field(60.0, gt=0, description="Longest gap between stream bytes (s).")


class SLO(_M):
    ttft_p95_ms: float | None = Field(None, gt=0, description="p95 time to first token (ms).")
    itl_p95_ms: float | None = Field(None, gt=0, description="p95 inter-token latency (ms).")
    e2e_p95_ms: float | None = Field(None, gt=0, description="p95 request end-to-end time (ms).")
    session_success_ratio: float | None = Field(
        None, ge=0, le=1, description="Minimum share of sessions with outcome completed."
    )


class CompareThresholds(_M):
    """How much worse B may be than A before `agentload compare` says regression."""

    ttft_p95_pct: float = Field(10.0, ge=0, description="Allowed TTFT p95 increase (%).")
    itl_p95_pct: float = Field(10.0, ge=0, description="Allowed ITL p95 increase (%).")
    e2e_p95_pct: float = Field(10.0, ge=0, description="Allowed E2E p95 increase (%).")
    throughput_pct: float = Field(
        5.0, ge=0, description="Allowed output-token throughput drop (%)."
    )
    session_success_pp: float = Field(
        2.0, ge=0, description="Allowed session success ratio drop (percentage points)."
    )
    cached_ratio_pp: float = Field(
        5.0, ge=0, description="Allowed cached-token ratio drop (points)."
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="Significance level for the A/B tests.")


class RunDefaults(_M):
    """Run shape used when the command line does not say (`agentload run` flags win)."""

    users: int = Field(10, ge=1, description="Concurrent users (sessions in flight).")
    spawn_rate: float | None = Field(
        None, gt=0, description="Users started per second (default: all within one second)."
    )
    duration_s: float = Field(60.0, gt=0, description="Run length (s).")


class TrafficClass(_M):
    """One Locust user class: who sends what, how often, with which tools."""

    description: str = Field("", description="What this class stands for.")
    weight: float | None = Field(
        None, gt=0, description="Relative share of users (default 1 when fixed_count is unset)."
    )
    fixed_count: int | None = Field(
        None, ge=0, description="Exact number of users of this class (instead of weight)."
    )
    steps: Dist = Field(
        default_factory=lambda: constant(1), description="LLM calls per session (integer, >= 1)."
    )
    max_steps: int = Field(
        100,
        ge=1,
        description="Step budget; in actual mode a session past it is a tool-loop failure.",
    )
    system_prompt: SystemPrompt = Field(
        default_factory=_defaults(SystemPrompt), description="Shared prefix."
    )
    user_turn: Dist = Field(
        default_factory=lambda: constant(100), description="User message size (tokens)."
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
    seed: int = Field(0, ge=0, description="Run seed: same seed, same request bodies.")
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
                    out.append(f"classes.{cname}.tools.{t}: unknown tool (catalog: {known})")
            if self.history == "actual" and c.request.endpoint == "completions" and c.tools:
                out.append(
                    f"classes.{cname}.request.endpoint: history actual needs endpoint chat for "
                    "tool calls (allowed: chat, or history scripted)"
                )
            if c.steps.min is not None and c.steps.min < 1:
                out.append(f"classes.{cname}.steps.min: must be >= 1")
        return out


# ---------------------------------------------------------------- loading
def _builtin_dir() -> Path:
    """The one copy of the built-in profiles: profiles/ in a checkout, the package data
    `workload.builtin_profiles` (the same files) in an installed wheel."""
    tree = Path(__file__).resolve().parents[2] / "profiles"
    if (tree / f"{DEFAULT_PROFILE}.yaml").is_file():
        return tree
    return Path(str(importlib.resources.files("workload.builtin_profiles")))


def list_profiles() -> list[tuple[str, str]]:
    """Built-in profiles as (name, description), sorted by name."""
    out = []
    for p in sorted(_builtin_dir().glob("*.yaml")):
        try:
            raw = yaml.safe_load(p.read_text()) or {}
            desc = str(raw.get("description", "")) if isinstance(raw, dict) else ""
        except yaml.YAMLError:
            desc = "(unreadable)"
        out.append((p.stem, desc))
    return out


def _resolve(name_or_path: str, base_dir: Path | None = None) -> Path:
    p = Path(name_or_path)
    if base_dir is not None and not p.is_absolute():
        rel = base_dir / p
        if rel.is_file():
            return rel
    if p.is_file():
        return p
    builtin = _builtin_dir() / f"{name_or_path}.yaml"
    if "/" not in name_or_path and builtin.is_file():
        return builtin
    names = ", ".join(n for n, _ in list_profiles())
    raise ProfileError(
        [f"{name_or_path}: no such profile file or built-in profile (built-ins: {names})"]
    )


def _read_raw(path: Path) -> dict[str, Any]:
    label = str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ProfileError([f"{label}: cannot read ({e.strerror})"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ProfileError([f"{label}:{where}: YAML syntax error: {what}"]) from None
    if raw is None:
        raise ProfileError([f"{label}: empty file (a profile is a YAML mapping with classes:)"])
    if not isinstance(raw, dict):
        raise ProfileError(
            [f"{label}: top level is a {type(raw).__name__}, expected a mapping of profile fields"]
        )
    return raw


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Merge ``over`` into a copy of ``base``: mappings merge, everything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _load_raw(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    rp = path.resolve()
    if rp in seen:
        chain = " -> ".join(str(s) for s in (*seen, rp))
        raise ProfileError([f"{path}: extends: cycle ({chain})"])
    raw = _migrate(_read_raw(path), str(path))
    parent = raw.get("extends")
    if parent is None:
        return raw
    if not isinstance(parent, str):
        raise ProfileError([f"{path}: extends: must be a built-in name or a file path"])
    try:
        base = _load_raw(_resolve(parent, path.parent), (*seen, rp))
    except ProfileError as e:
        raise ProfileError([f"{path}: extends: {p}" for p in e.problems]) from None
    merged = deep_merge(base, raw)
    merged["extends"] = parent
    return merged


def _migrate(raw: dict[str, Any], label: str) -> dict[str, Any]:
    v = raw.get("schema_version", SCHEMA_VERSION)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProfileError(
            [f"{label}: schema_version: must be an integer (current: {SCHEMA_VERSION})"]
        )
    if v > SCHEMA_VERSION:
        raise ProfileError(
            [
                f"{label}: schema_version: {v} is newer than this agentload understands "
                f"({SCHEMA_VERSION}); upgrade agentload"
            ]
        )
    while v < SCHEMA_VERSION:
        step = MIGRATIONS.get(v)
        if step is None:
            raise ProfileError(
                [
                    f"{label}: schema_version: {v} is no longer supported; migrate it to "
                    f"{SCHEMA_VERSION} (see README.md, 'Schema versions') and set "
                    f"schema_version: {SCHEMA_VERSION}"
                ]
            )
        raw = step(dict(raw))
        v += 1
        raw["schema_version"] = v
    return raw


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``path.to.field=value`` overrides (value parsed as YAML) to a raw profile."""
    out = copy.deepcopy(raw)
    problems = []
    for ov in overrides:
        path, eq, text = ov.partition("=")
        if not eq or not path.strip():
            problems.append(f"--set {ov}: expected path.to.field=value")
            continue
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        keys = path.strip().split(".")
        node: Any = out
        ok = True
        for i, k in enumerate(keys[:-1]):
            if isinstance(node, list):
                if not k.isdigit() or int(k) >= len(node):
                    problems.append(f"--set {ov}: {'.'.join(keys[: i + 1])}: no such list index")
                    ok = False
                    break
                node = node[int(k)]
            elif isinstance(node, dict):
                if not isinstance(node.get(k), (dict, list)):
                    node[k] = {}
                node = node[k]
            else:
                ok = False
                problems.append(f"--set {ov}: {'.'.join(keys[:i])} is not a mapping")
                break
        if not ok:
            continue
        last = keys[-1]
        if isinstance(node, list):
            if last.isdigit() and int(last) < len(node):
                node[int(last)] = value
            else:
                problems.append(f"--set {ov}: {path}: no such list index")
        else:
            node[last] = value
    if problems:
        raise ProfileError(problems)
    return out


def load_profile(name_or_path: str = DEFAULT_PROFILE, overrides: Iterable[str] = ()) -> Profile:
    """Load, merge (extends), override (--set) and validate a profile; raises ProfileError."""
    path = _resolve(name_or_path)
    raw = _load_raw(path)
    raw = apply_overrides(raw, overrides)
    if isinstance(raw, dict) and not raw.get("name"):
        raw["name"] = path.stem
    return validate_profile(raw, label=str(path))


def validate_profile(raw: Any, label: str = "<profile>") -> Profile:
    """Validate a raw mapping into a Profile; raises ProfileError with every problem."""
    if not isinstance(raw, dict):
        raise ProfileError([f"{label}: expected a mapping of profile fields"])
    raw = _migrate(raw, label)
    try:
        prof = Profile.model_validate(raw)
    except ValidationError as e:
        raise ProfileError([f"{label}: {line}" for line in _format_errors(e, raw)]) from None
    problems = prof.check()
    if problems:
        raise ProfileError([f"{label}: {p}" for p in problems])
    return prof


def profile_schema() -> dict[str, Any]:
    """JSON Schema of the profile format (printed by `agentload profiles schema`)."""
    return Profile.model_json_schema()


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """The resolved profile as plain JSON-able data (for run.json and `profiles show`)."""
    return json.loads(profile.model_dump_json())


# ---------------------------------------------------------------- error text
_DIST_TAGS = set(get_args(get_args(Dist)[0]))  # the union members


def _format_errors(e: ValidationError, raw: dict[str, Any]) -> list[str]:
    lines = []
    for err in e.errors():
        loc = [str(p) for p in err["loc"]]
        model, clean = _walk(Profile, loc)
        path = ".".join(clean) or "(top level)"
        typ = err["type"]
        msg = err["msg"]
        if typ == "extra_forbidden":
            allowed = ", ".join(sorted(model.model_fields)) if model is not None else "?"
            parent = ".".join(clean[:-1]) or "(top level)"
            lines.append(f"{parent}: unknown key {clean[-1]!r} (allowed: {allowed})")
            continue
        if typ == "missing":
            hint = ""
            if model in _DIST_TAGS:
                tag = get_args(model.model_fields["dist"].annotation)[0]
                need = [n for n, f in model.model_fields.items() if n != "dist" and f.is_required()]
                opt = [
                    n for n, f in model.model_fields.items() if n != "dist" and not f.is_required()
                ]
                hint = f" ({tag} needs {', '.join(need) or 'no field'}; optional {', '.join(opt)})"
            lines.append(f"{path}: required field missing{hint}")
            continue
        if typ == "union_tag_invalid":
            lines.append(f"{path}: unknown distribution (allowed dist: {', '.join(_dist_names())})")
            continue
        if typ == "union_tag_not_found":
            lines.append(
                f"{path}: a distribution needs a dist: tag or a number (allowed dist: {', '.join(_dist_names())})"
            )
            continue
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif msg.startswith("Input should be "):
            msg = "must be " + msg[len("Input should be ") :]
            for words, sym in _COMPARISONS:
                msg = msg.replace(words, sym)
        if typ in ("model_type", "model_attributes_type", "dict_type"):
            msg = f"expected a mapping, got {type(err.get('input')).__name__}"
        lines.append(f"{path}: {msg}")
    return lines


_COMPARISONS = (
    ("greater than or equal to", ">="),
    ("less than or equal to", "<="),
    ("greater than", ">"),
    ("less than", "<"),
)


def _dist_names() -> list[str]:
    from workload.plan.dist import DIST_KINDS

    return list(DIST_KINDS)


def _walk(model: Any, loc: list[str]) -> tuple[Any, list[str]]:
    """Follow a pydantic error location through the models; drop union tags from the path.

    Returns the model class owning the last key (for 'allowed keys') and the clean path.
    """
    clean: list[str] = []
    cur: Any = model
    owner: Any = model
    for part in loc:
        if _is_dist_union(cur):
            # A discriminated union puts the tag in the location: skip it, step into the member.
            member = _dist_member(part)
            if member is not None:
                cur = member
                continue
        if part == "of" and cur is Component:
            cur = Dist
            continue
        if part.startswith("function-"):
            continue
        clean.append(part)
        owner = cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None
        cur = _child(cur, part)
    return owner, clean


def _is_dist_union(t: Any) -> bool:
    return t is Dist


def _dist_member(tag: str) -> Any:
    for m in _DIST_TAGS:
        if get_args(m.model_fields["dist"].annotation) == (tag,):
            return m
    return None


def _child(t: Any, key: str) -> Any:
    if isinstance(t, type) and issubclass(t, BaseModel):
        f = t.model_fields.get(key)
        if f is None:
            return None
        return _unwrap(f.annotation)
    origin = get_origin(t)
    if origin in (dict, list):
        args = get_args(t)
        return _unwrap(args[-1]) if args else None
    return None


def _unwrap(t: Any) -> Any:
    # Optional[X] -> X; Annotated[...] of a Dist union -> Dist
    args = get_args(t)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _unwrap(rest[0])
    if args and set(args) <= _DIST_TAGS:
        return Dist
    return t


# ---------------------------------------------------------------- reference docs
REF_BEGIN = "<!-- BEGIN GENERATED PROFILE REFERENCE (workload.plan.profile.reference_markdown) -->"
REF_END = "<!-- END GENERATED PROFILE REFERENCE -->"


def reference_markdown() -> str:
    """A Markdown reference of every profile field (type, default, description), from the models."""
    from workload.plan import dist

    sections: list[tuple[str, type[BaseModel]]] = [
        ("Profile (top level)", Profile),
        ("run", RunDefaults),
        ("compare", CompareThresholds),
        ("tools.NAME", ToolSpec),
        ("classes.NAME", TrafficClass),
        ("classes.NAME.system_prompt", SystemPrompt),
        ("classes.NAME.output", OutputSpec),
        ("classes.NAME.context", ContextPolicy),
        ("classes.NAME.request", RequestSpec),
        ("classes.NAME.timeouts", Timeouts),
        ("classes.NAME.slo", SLO),
    ]
    out: list[str] = []
    for title, model in sections:
        out += [f"#### `{title}`", "", "| field | type | default | meaning |", "|---|---|---|---|"]
        for name, f in model.model_fields.items():
            out.append(
                f"| `{name}` | {_type_name(f.annotation)} | {_default(f)} | {f.description or ''} |"
            )
        out.append("")
    out += [
        "#### Distributions (`dist:`)",
        "",
        "Every kind also takes `min` and `max` clamps. A bare number is `constant`.",
        "",
    ]
    out += ["| dist | fields |", "|---|---|"]
    for m in (
        dist.Constant,
        dist.Uniform,
        dist.Normal,
        dist.LogNormal,
        dist.Pareto,
        dist.Zipf,
        dist.Empirical,
        dist.Mixture,
    ):
        tag = get_args(m.model_fields["dist"].annotation)[0]
        fields = "; ".join(
            f"`{n}`{'' if f.is_required() else ' (optional)'}: {f.description}"
            for n, f in m.model_fields.items()
            if n not in ("dist", "min", "max")
        )
        out.append(f"| `{tag}` | {fields} |")
    out.append("")
    return "\n".join(out)


def _type_name(t: Any) -> str:
    if _unwrap(t) is Dist or t is Dist:
        return "distribution"
    args = get_args(t)
    if get_origin(t) is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        inner = _type_name(rest[0]) if len(rest) == 1 else " or ".join(_type_name(a) for a in rest)
        return f"{inner} or null"
    if get_origin(t) is dict:
        if args and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            return "mapping: name → entry"
        return f"mapping of {_type_name(args[1])}" if args else "mapping"
    if isinstance(t, type) and issubclass(t, BaseModel):
        return "mapping"
    return getattr(t, "__name__", str(t))


def _default(f: Any) -> str:
    if f.is_required():
        return "required"
    if f.default_factory is not None:
        v = f.default_factory()
        if isinstance(v, BaseModel):
            if "dist" in type(v).model_fields:
                return f"`{v.model_dump(exclude_none=True, exclude={'dist'}).get('value', v.model_dump(exclude_none=True))}`"
            return "see below"
        return f"`{json.dumps(v)}`"
    return f"`{json.dumps(f.default)}`"


def write_reference(path: str | Path) -> bool:
    """Replace the generated reference between the markers in a Markdown file; True if changed."""
    p = Path(path)
    text = p.read_text()
    a, b = text.index(REF_BEGIN) + len(REF_BEGIN), text.index(REF_END)
    new = text[:a] + "\n\n" + reference_markdown() + "\n" + text[b:]
    if new != text:
        p.write_text(new)
    return new != text


# re-exported for tests and callers that want the list
__all__ = [
    "SCHEMA_VERSION",
    "ProfileError",
    "Profile",
    "TrafficClass",
    "ToolSpec",
    "ContextPolicy",
    "RequestSpec",
    "SLO",
    "CompareThresholds",
    "load_profile",
    "validate_profile",
    "list_profiles",
    "profile_schema",
    "profile_to_dict",
    "apply_overrides",
    "deep_merge",
]
