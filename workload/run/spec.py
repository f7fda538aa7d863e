"""The run a command resolves to (`RunSpec`): typed, frozen, built once, handed on as a file.

`resolve_spec(values)` turns the raw option values (`workload.run.options`) into a
`RunSpec` exactly once: the profile is loaded with its --set overrides and validated,
the seed is parsed, the profile's defaults (users, spawn rate, duration, seed, max error
ratio) are applied, labels and SLO overrides are parsed and checked, the host is checked.

The spec crosses processes as a file, never on a command line: `agentload run` writes it
to `RUN_DIR/spec.json` (`write_spec`) and starts Locust with `--agent-spec-file` naming
it; the child reads it back (`read_spec`) with the profile validated again, not re-read
from disk. Locust's master hands it to its workers inside its spawn message. Canary and
capacity derive their runs' specs from their own parsed spec with `RunSpec.replace`
(block seed, length, target, load) and write each run's file the same way.

`duration_s` is the one run length: the stop (`workload.locust.run_clock`) and the
arrival plan both read it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from workload.errors import ProfileError, SimConfigError, TraceError, UsageError
from workload.measure.artifacts import write_json
from workload.measure.slo import check_slo_overrides
from workload.plan import loading
from workload.plan.arrivals import ArrivalSpec, arrival_spec
from workload.plan.load_model import closed_users, is_open_loop, run_stream_spec
from workload.plan.loading import validate_profile
from workload.plan.profile import Profile
from workload.plan.traces import (
    AGENT_FORMATS,
    AgentTrace,
    ReplayOptions,
    Trace,
    detect_any,
    planned_duration_s,
    read_agent_trace,
    read_trace_keeping_reuse,
    session_starts,
)
from workload.run.options import BY_NAME, MAX_DURATION_S, OPTIONS, check_duration, check_host
from workload.sim.config import build_config

SPEC_FILE = "spec.json"
SPEC_SCHEMA = 1
MAX_SPEC_BYTES = 16 << 20  # a spec with the largest profile is a few hundred kB
# A raw option value, as a command line or the web UI's start form gives it.
RawValue = str | bool | int | float | list[str] | tuple[str, ...] | None
# A replay with no --duration runs until its last request is due plus this much, or until
# every request finished (whichever is first).
TRACE_TAIL_S = 120.0
# An agent-session replay with no --duration runs until every session has ended, at most
# until the last session start + this many times the longest session (its rounds at their
# recorded LLM time: a server's answers do not speed up with --speedup; its waits scaled)
# + TRACE_TAIL_S. --duration caps it instead.
AGENT_CAP_FACTOR = 10.0


@dataclass(frozen=True)
class TraceInfo:
    """What resolving a --trace run read from the trace (the trace itself is re-read by
    every process from `RunSpec.trace`; it is never carried in the spec)."""

    format: str
    requests: int
    span_s: float  # first to last arrival, after --speedup
    duration_s: float  # the run length it implies: span + TRACE_TAIL_S
    bad_lines: int
    first_bad_line: str | None
    sessions: int = 0  # an agent-session trace: its top-level sessions (0: a request trace)
    reuse: str = ""  # a run directory: its prefix reuse kept, or why not (Trace.reuse)


@dataclass(frozen=True)
class RunSpec:
    """A run, resolved once from its options and profile; hand it on, do not re-derive it."""

    profile: Profile  # --set applied and validated
    profile_ref: str  # the name or file given
    sets: tuple[str, ...]
    seed: int
    users: int
    spawn_rate: float
    duration_s: float  # the run's one length: the stop and the arrival plan read it
    workers: int
    host: str  # "" = start the embedded simulator
    model: str  # requested; after preparation the model the run uses
    max_model_len: int | None  # the target's, found when the model is discovered
    tokenizer: str
    sessions_per_user: int
    scrape_interval: float
    max_error_ratio: float
    api_key_env: str
    labels: dict[str, str]
    slo_overrides: dict[str, dict[str, float]]
    sim_preset: str = "default"
    sim_faults: tuple[str, ...] = ()
    sim_sets: tuple[str, ...] = ()
    out: str = ""
    server_log: str = ""
    web: bool = False
    web_port: int = 8089
    run_id: str = ""
    argv: str = ""
    progress_interval: float = 5.0
    locust_args: tuple[str, ...] = ()
    # Open loop (applied to profile.run.arrival by resolve_spec; kept to show what was asked).
    arrival_rate: float | None = None
    arrival: str = ""
    max_in_flight: int | None = None
    at_cap: str = ""
    # Wall-clock start of the arrival schedules (set by the master / local process at test
    # start, so every worker plays the one global schedule from the same instant).
    arrival_t0: float = 0.0
    overwrite: bool = False  # --overwrite: replace the run already in --out
    require_slo_samples: bool = False  # an SLO with no samples fails instead of "not judged"
    # --trace: replay this file (re-read by every process; see workload.run.replay).
    trace: str = ""
    trace_format: str = "auto"
    speedup: float = 1.0
    trace_limit: int | None = None
    on_bad_line: str = "skip"
    trace_clip: bool = False
    max_gap_s: float | None = None  # agent sessions: no replayed wait longer than this
    trace_info: TraceInfo | None = None
    # --metrics-port: "HOST:PORT" the run's Prometheus endpoint listens on ("" = off).
    metrics_port: str = ""
    metrics_linger_s: float = 0.0
    # --otlp-endpoint: the OTLP/HTTP base URL the measuring processes export to ("" = off).
    otlp_endpoint: str = ""
    otlp_traces: bool = False
    otlp_sample: float = 1.0  # share of sessions traced (whole sessions, chosen from the seed)
    otlp_interval_s: float = 10.0
    # The raw option values this was resolved from (the start form is compared with them).
    options: dict[str, RawValue] = field(default_factory=dict, compare=False)

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with some fields changed (the spec itself never changes)."""
        return dataclasses.replace(self, **changes)

    def slos(self) -> dict[str, dict[str, float]]:
        """Each class's SLOs: the profile's, then --slo overrides (an unqualified one: every class)."""
        out: dict[str, dict[str, float]] = {}
        if self.trace:
            # A replay plays only the trace (class "trace"): the profile's SLOs do not apply.
            for cls_name in ("*", "trace"):
                if self.slo_overrides.get(cls_name):
                    out.setdefault("trace", {}).update(self.slo_overrides[cls_name])
            return out
        for name, cls in self.profile.classes.items():
            values = cls.slo.model_dump(exclude_none=True) if cls.slo is not None else {}
            if values:
                out[name] = dict(values)
        for cls_name, overrides in self.slo_overrides.items():
            for t in list(self.profile.classes) if cls_name == "*" else [cls_name]:
                out.setdefault(t, {}).update(overrides)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data with its schema version; `from_dict` gives back an equal spec."""
        d: dict[str, Any] = {"schema_version": SPEC_SCHEMA}
        d.update((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        d["profile"] = self.profile.model_dump(mode="json")
        d["trace_info"] = dataclasses.asdict(self.trace_info) if self.trace_info else None
        return d

    def to_json(self) -> str:
        """One JSON string (spec.json's content; what the canary hands a block on stdin)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunSpec:
        """The spec `to_dict` wrote (the profile is validated again, not re-read from disk).
        Raises UsageError naming what does not fit."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known - {"schema_version"})
        if unknown:
            raise UsageError(f"not a spec of this agentload: unknown fields {', '.join(unknown)}")
        values = dict(d)
        values.pop("schema_version", None)
        try:
            values["profile"] = validate_profile(
                values["profile"], label=str(values.get("profile_ref") or "<spec>")
            )
        except ProfileError as e:
            raise UsageError("; ".join(e.problems)) from None
        except KeyError:
            raise UsageError("not a spec: it has no profile") from None
        for name in ("sets", "sim_faults", "sim_sets", "locust_args"):
            values[name] = tuple(values.get(name) or ())
        if values.get("trace_info"):
            values["trace_info"] = TraceInfo(**values["trace_info"])
        try:
            return cls(**values)
        except TypeError as e:
            raise UsageError(f"not a complete spec: {e}") from None

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """The spec `to_json` wrote."""
        return cls.from_dict(json.loads(text))


def write_spec(spec: RunSpec, run_dir: str | Path) -> Path:
    """Write `RUN_DIR/spec.json` atomically; its path."""
    path = Path(run_dir) / SPEC_FILE
    write_json(path, spec.to_dict())
    return path


def read_spec(path: str | Path) -> RunSpec:
    """The spec in a spec.json file, a run directory holding one, or standard input ("-",
    how canary hands each block its spec). Raises UsageError."""
    p = Path(path)
    if str(path) != "-" and p.is_dir():
        p = p / SPEC_FILE
    if str(path) != "-" and p.exists() and not p.is_file():
        raise UsageError(f"--spec {p} is not a regular file")
    try:
        if str(path) == "-":
            text = sys.stdin.read(MAX_SPEC_BYTES + 1)
        else:
            with open(p, encoding="utf-8") as fh:
                text = fh.read(MAX_SPEC_BYTES + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read --spec {p}: {getattr(e, 'strerror', None) or e}") from None
    if len(text) > MAX_SPEC_BYTES:
        raise UsageError(f"--spec {p} is larger than {MAX_SPEC_BYTES >> 20} MiB: not a spec")
    try:
        d = json.loads(text)
    except ValueError as e:
        raise UsageError(f"--spec {p} is not JSON: {e}") from None
    if not isinstance(d, dict) or d.get("schema_version") != SPEC_SCHEMA:
        raise UsageError(f"--spec {p} is not a spec.json written by agentload run")
    return RunSpec.from_dict(d)


def resolve_spec(
    values: Mapping[str, RawValue],
    *,
    load_profile: Callable[[str, list[str]], Profile] | None = None,
) -> RunSpec:
    """Check every option, load the profile once, apply its defaults: the run's RunSpec.

    `values` maps option names (`OPTIONS`) to raw values, as `raw_values` reads
    them; missing ones take the table's default. Raises UsageError (one line).

    Long because each option is checked once, here, in the order the errors should come.
    """
    typed: dict[str, Any] = {}
    for o in OPTIONS:
        raw = values.get(o.name, o.default)
        typed[o.name] = o.parse(o.default if raw is None else raw)
    host = check_host(typed["host"]) if typed["host"] else ""
    if not host:  # the embedded simulator's settings: refused here, not by a child at start
        _check_sim(typed)
    try:
        profile = (load_profile or loading.load_profile)(typed["profile"], list(typed["sets"]))
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None
    profile = apply_arrival(profile, typed)
    run = profile.run
    trace_info = _trace_info(typed)
    duration_s = check_duration(
        typed["duration_s"]
        or (trace_info.duration_s if trace_info else None)
        or _stages_total(profile)
        or float(run.duration_s),
        "--duration" if typed["duration_s"] else "profile run.duration_s",
    )
    check_slos(typed["slo_overrides"], ["trace"] if typed["trace"] else list(profile.classes))
    users = typed["users"] or int(run.users)
    if trace_info and not typed["users"]:
        users = 1  # a replay plays only the trace: this user idles and keeps Locust's run up
    elif is_open_loop(profile) and not typed["users"]:
        # 1 at least: with no closed-loop class that user idles and keeps Locust's run up
        users = max(1, closed_users(profile, int(run.users)))
    max_err = typed["max_error_ratio"]
    return RunSpec(
        profile=profile,
        profile_ref=typed["profile"],
        sets=tuple(typed["sets"]),
        seed=int(profile.seed) if typed["seed"] is None else typed["seed"],
        users=users,
        spawn_rate=typed["spawn_rate"] or float(run.spawn_rate or users),
        duration_s=duration_s,
        workers=typed["workers"],
        host=host,
        model=typed["model"],
        max_model_len=None,
        tokenizer=typed["tokenizer"],
        sessions_per_user=typed["sessions_per_user"],
        scrape_interval=typed["scrape_interval"],
        max_error_ratio=float(profile.max_error_ratio) if max_err is None else max_err,
        api_key_env=typed["api_key_env"] or "OPENAI_API_KEY",
        labels=typed["labels"],
        slo_overrides=typed["slo_overrides"],
        sim_preset=typed["sim_preset"],
        sim_faults=tuple(typed["sim_faults"]),
        sim_sets=tuple(typed["sim_sets"]),
        out=typed["out"],
        server_log=typed["server_log"],
        web=typed["web"],
        web_port=typed["web_port"],
        run_id=typed["run_id"],
        argv=typed["argv"],
        progress_interval=typed["progress_interval"],
        arrival_rate=typed["arrival_rate"],
        arrival=typed["arrival"],
        max_in_flight=typed["max_in_flight"],
        at_cap=typed["at_cap"],
        locust_args=tuple(str(a) for a in _items(values.get("locust_args")) if a != "--"),
        options={k: v for k, v in values.items() if k in BY_NAME and k != "spec_file"},
        overwrite=typed["overwrite"],
        require_slo_samples=typed["require_slo_samples"],
        trace=typed["trace"],
        trace_format=typed["trace_format"] or "auto",
        speedup=typed["speedup"],
        trace_limit=typed["trace_limit"],
        on_bad_line=typed["on_bad_line"] or "skip",
        trace_clip=typed["trace_clip"],
        max_gap_s=typed["max_gap"],
        trace_info=trace_info,
        metrics_port=typed["metrics_port"],
        metrics_linger_s=typed["metrics_linger_s"],
        **_otlp(typed),
    )


def _otlp(typed: Mapping[str, Any]) -> dict[str, Any]:
    """The --otlp-* values; the trace options without what they need are refused."""
    if typed["otlp_traces"] and not typed["otlp_endpoint"]:
        raise UsageError("--otlp-traces needs --otlp-endpoint URL (the collector to send to)")
    if typed["otlp_sample"] != 1.0 and not typed["otlp_traces"]:
        raise UsageError("--otlp-sample chooses which sessions are traced: add --otlp-traces")
    return {k: typed[k] for k in ("otlp_endpoint", "otlp_traces", "otlp_sample", "otlp_interval_s")}


def _check_sim(typed: Mapping[str, Any]) -> None:
    """The --sim-preset / --sim-set / --sim-fault values the simulator would refuse, as
    one line naming the flags (SimConfigError is a UsageError)."""
    try:
        build_config(typed["sim_preset"], list(typed["sim_sets"]), list(typed["sim_faults"]))
    except SimConfigError as e:
        raise SimConfigError(f"bad --sim-preset/--sim-set/--sim-fault: {e}") from None


def _items(value: RawValue) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return ()


def _trace_info(typed: Mapping[str, Any]) -> TraceInfo | None:
    """Read the --trace file once (bad lines reported with file:line); None without --trace."""
    if not typed.get("trace"):
        for name, flag in (
            ("trace_limit", "--limit"),
            ("trace_clip", "--trace-clip"),
            ("max_gap", "--max-gap"),
        ):
            if typed.get(name):
                raise UsageError(f"{flag} needs --trace FILE")
        return None
    if typed.get("arrival_rate") is not None or typed.get("arrival"):
        raise UsageError(
            "--trace replays the trace's own arrival times: drop --arrival-rate/--arrival"
        )
    if is_agent_format(typed["trace"], typed["trace_format"]):
        return _agent_trace_info(typed)
    if typed.get("max_gap") is not None:
        raise UsageError("--max-gap applies to agent-session traces only")
    trace = read_run_trace(
        typed["trace"], typed["trace_format"], typed["trace_limit"], typed["on_bad_line"]
    )
    span = trace.duration_s / typed["speedup"]
    return TraceInfo(
        format=trace.format,
        requests=len(trace.requests),
        span_s=round(span, 3),
        duration_s=span + TRACE_TAIL_S,
        bad_lines=len(trace.bad_lines),
        first_bad_line=str(trace.bad_lines[0]) if trace.bad_lines else None,
        reuse=trace.reuse,
    )


def _agent_trace_info(typed: Mapping[str, Any]) -> TraceInfo:
    trace = read_run_agent_trace(
        typed["trace"], typed["trace_format"], typed["trace_limit"], typed["on_bad_line"]
    )
    opts = ReplayOptions(model="", seed=0, speedup=typed["speedup"], max_gap_s=typed["max_gap"])
    starts = session_starts(trace, opts)
    longest = max(planned_duration_s(trace, s, opts, rounds_speedup=1.0) for s in trace.sessions)
    return TraceInfo(
        format=trace.format,
        requests=trace.rounds,
        span_s=round(starts[-1], 3),
        # closed loop: a slower server stretches sessions; the run ends when all are done
        duration_s=min(MAX_DURATION_S, starts[-1] + AGENT_CAP_FACTOR * longest + TRACE_TAIL_S),
        bad_lines=len(trace.bad_lines),
        first_bad_line=str(trace.bad_lines[0]) if trace.bad_lines else None,
        sessions=len(trace.roots),
    )


def is_agent_format(path: str, fmt: str) -> bool:
    """Whether a --trace file holds agent sessions (replayed closed loop); TraceError."""
    try:
        kind = detect_any(path) if (fmt or "auto") == "auto" else fmt
    except TraceError as e:
        raise TraceError(f"--trace: {e}") from None
    return kind in AGENT_FORMATS


def read_run_agent_trace(path: str, fmt: str, limit: int | None, on_bad_line: str) -> AgentTrace:
    """The agent-session trace as `--trace` options name it (--limit: sessions); TraceError."""
    trace = _read_as_option(read_agent_trace, path, fmt, limit, on_bad_line)
    if not trace.sessions:
        raise TraceError(f"--trace {path}: no readable rounds")
    return trace


def read_run_trace(path: str, fmt: str, limit: int | None, on_bad_line: str) -> Trace:
    """The trace file as `--trace` options name it; TraceError (file:line) when unreadable."""
    trace = _read_as_option(read_trace_keeping_reuse, path, fmt, limit, on_bad_line)
    if not trace.requests:
        raise TraceError(f"--trace {path}: no readable requests")
    return trace


_T = TypeVar("_T")


def _read_as_option(
    reader: Callable[..., _T], path: str, fmt: str, limit: int | None, on_bad_line: str
) -> _T:
    """reader(path, ...) with its TraceError said as the `--trace` option's."""
    try:
        # on_bad_line: a str here, "skip" or "stop" (the option's choices)
        return reader(path, fmt or "auto", limit=limit, on_bad_line=on_bad_line)
    except TraceError as e:
        raise TraceError(f"--trace: {e}") from None


def _stages_total(profile: Profile) -> float | None:
    stages = profile.run.stages
    return sum(s.duration_s for s in stages) if stages else None


def apply_arrival(profile: Profile, typed: Mapping[str, Any]) -> Profile:
    """The profile with --arrival-rate/--arrival/--max-in-flight/--at-cap applied to run.arrival.

    They make the whole profile open loop (class-level arrivals give way to run.arrival).
    Raises UsageError (one line) when they cannot form an arrival process.
    """
    rate, process = typed.get("arrival_rate"), typed.get("arrival") or ""
    cap, at_cap = typed.get("max_in_flight"), typed.get("at_cap") or ""
    if rate is None and not process and cap is None and not at_cap:
        return profile
    stages = profile.run.stages
    if rate is not None and stages and stages[0].dimension == "arrival_rate":
        raise UsageError(
            "--arrival-rate conflicts with the profile's arrival_rate stages (run.stages set "
            "the rate over time); drop one of them"
        )
    base = run_stream_spec(profile)
    if base is None:
        class_specs = [c.arrival for c in profile.classes.values() if c.arrival is not None]
        base = class_specs[0] if len(class_specs) == 1 else None
    if rate is None and base is None:
        flag = "--arrival" if process else "--max-in-flight" if cap is not None else "--at-cap"
        raise UsageError(
            f"{flag} needs --arrival-rate R (this profile has no run.arrival to apply it to)"
        )
    spec = arrival_spec(
        # base is set whenever rate is None (raised above otherwise)
        rate if rate is not None else base.rate_per_s,  # type: ignore[union-attr]
        process or (_process_text(base) if base is not None else "poisson"),
        max_in_flight=cap if cap is not None else (base.max_in_flight if base else None),
        at_cap=at_cap or (base.at_cap if base else "queue"),
    )
    try:  # the whole profile once more: open loop must fit its classes and stages
        return validate_profile(
            with_arrival(profile, spec).model_dump(mode="json"), label=profile.name or "<profile>"
        )
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None


def with_arrival(profile: Profile, spec: ArrivalSpec) -> Profile:
    """The profile made open loop by `spec`: run.arrival set, the classes' own arrivals
    cleared. Not validated again (a capacity step changes only the rate of a profile that
    `apply_arrival` validated)."""
    classes = {name: c.model_copy(update={"arrival": None}) for name, c in profile.classes.items()}
    run = profile.run.model_copy(update={"arrival": spec})
    return profile.model_copy(update={"run": run, "classes": classes})


def _process_text(spec: ArrivalSpec) -> str:
    return f"gamma:{spec.cv:g}" if spec.process == "gamma" else str(spec.process)


def check_slos(overrides: dict[str, dict[str, float]], classes: list[str]) -> None:
    """--slo names known metrics and the profile's classes (checked before any traffic)."""
    problems = check_slo_overrides(overrides, classes)
    if problems:
        raise UsageError("; ".join(problems))
