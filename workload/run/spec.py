"""The run options, defined once, and the run they resolve to (`RunSpec`).

`OPTIONS` is the one table of run options. It feeds `agentload run`'s parser
(`build_run_parser`), the options `agentload canary` passes to both sides
(`CANARY_FORBIDDEN` are the ones it sets itself), and Locust's parser
(`workload.locust.options.add_arguments` iterates it). Both parsers store an
option under the same `dest`, so `raw_values(namespace)` reads either.

`resolve_spec(values)` turns raw values into a frozen `RunSpec` exactly once:
the profile is loaded with its --set overrides, the seed is parsed, the
profile's defaults (users, spawn rate, duration, seed, max error ratio) are
applied, labels and SLO overrides are parsed and checked, the host is checked.
`RunSpec.to_json()` / `RunSpec.from_json()` carry it, as one value, from
`agentload run` to its Locust process and from Locust's master to its workers.

Adding an option: add an `Option` row (its `parse` turns the raw string, or
list of strings for `repeat` options, into the typed value; raise UsageError
with a one-line message), then a `RunSpec` field of the same name. Options
whose value depends on the profile are finished in `resolve_spec`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from workload.errors import ProfileError, UsageError

# ---------------------------------------------------------------------------------------------
# value parsers (each raises UsageError with one line naming the flag)

MIN_DURATION_S = 1.0  # Locust's run time is whole seconds: shorter would round to "no limit"
MAX_DURATION_S = 30 * 86400.0
MAX_SEED = 2**63 - 1

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """'90', '90s', '2m', '1h30m', '1m30s' -> seconds (> 0)."""
    t = text.strip().lower()
    m = _DURATION.match(t)
    if not t or not m or not any(m.groups()):
        raise UsageError(f"bad --duration {text!r}: use e.g. 30s, 5m, 1h30m")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + s
    if total <= 0:
        raise UsageError(f"bad --duration {text!r}: it must be longer than 0s")
    if total > MAX_DURATION_S:
        raise UsageError(f"bad --duration {text!r}: at most {MAX_DURATION_S / 86400:g} days")
    return total


def check_duration(seconds: float, source: str) -> float:
    """A run length agentload can keep: at least MIN_DURATION_S (Locust counts whole seconds)."""
    if seconds < MIN_DURATION_S:
        raise UsageError(f"bad {source} {seconds:g}s: the shortest run is {MIN_DURATION_S:g}s")
    return seconds


def check_host(url: str) -> str:
    """A base URL such as http://127.0.0.1:8000, without a trailing slash."""
    p = urlparse(url)
    if p.scheme not in ("http", "https") or not p.hostname:
        from workload.observe.safe import redact_url

        raise UsageError(
            f"bad --host {redact_url(url)!r}: use a base URL such as http://127.0.0.1:8000"
        )
    return url.rstrip("/")


def parse_kv(items: list[str], what: str) -> dict[str, str]:
    """KEY=VALUE list -> dict; raises UsageError naming the bad item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad {what} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def parse_slo_overrides(items: list[str]) -> dict[str, dict[str, float]]:
    """'[CLASS.]metric=value' -> {class or '*': {metric: value}}."""
    out: dict[str, dict[str, float]] = {}
    for key, value in parse_kv(items, "--slo").items():
        cls, _, metric = key.rpartition(".")
        try:
            out.setdefault(cls or "*", {})[metric] = float(value)
        except ValueError:
            raise UsageError(f"bad --slo {key}={value!r}: the value must be a number") from None
    return out


def _whole(flag: str, minimum: int) -> Callable[[Any], int | None]:
    def parse(value: Any) -> int | None:
        text = str(value).strip()
        if not text:
            return None
        try:
            n = int(text)
        except ValueError:
            raise UsageError(f"bad {flag} {text!r}: it must be a whole number") from None
        if n < minimum:
            raise UsageError(f"bad {flag} {n}: it must be at least {minimum}")
        return n

    return parse


def _number(flag: str, *, positive: bool) -> Callable[[Any], float | None]:
    def parse(value: Any) -> float | None:
        text = str(value).strip()
        if not text:
            return None
        try:
            x = float(text)
        except ValueError:
            raise UsageError(f"bad {flag} {text!r}: it must be a number") from None
        if positive and x <= 0:
            raise UsageError(f"bad {flag} {text}: it must be greater than 0")
        if not positive and x < 0:
            raise UsageError(f"bad {flag} {text}: it must be >= 0")
        return x

    return parse


def _seed(value: Any) -> int | None:
    text = str(value or "").strip()
    if not text:
        return None
    try:
        seed = int(text)
    except ValueError:
        raise UsageError(f"bad --seed {text!r}: it must be an integer") from None
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"bad --seed {text}: it must be between 0 and 2**63-1")
    return seed


def _port(value: Any) -> int:
    n = _whole("--web-port", 1)(value) or 8089
    if n > 65535:
        raise UsageError(f"bad --web-port {n}: a port is at most 65535")
    return n


def _max_error_ratio(value: Any) -> float | None:
    text = str(value).strip()
    if not text:
        return None
    try:
        x = float(text)
    except ValueError:
        raise UsageError(f"bad --max-error-ratio {text!r}: it must be a number") from None
    return None if x < 0 else x  # negative: the profile's (Locust's old default was -1)


def _arrival_rate(value: Any) -> float | None:
    from workload.plan.arrivals import ArrivalError, parse_arrival_rate

    text = str(value or "").strip()
    if not text:
        return None
    try:
        return parse_arrival_rate(text)
    except ArrivalError as e:
        raise UsageError(str(e)) from None


def _arrival_process(value: Any) -> str:
    from workload.plan.arrivals import ArrivalError, parse_arrival_process

    text = str(value or "").strip()
    if text:
        try:
            parse_arrival_process(text)
        except ArrivalError as e:
            raise UsageError(str(e)) from None
    return text


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _items(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


def _flag(value: Any) -> bool:
    return bool(value) and str(value).lower() not in ("false", "0")


# ---------------------------------------------------------------------------------------------
# the table


@dataclass(frozen=True)
class Option:
    """One run option: its flags on each command line, help, default and parser."""

    name: str  # the RunSpec field it fills (and the key in raw values)
    flags: tuple[str, ...]  # on `agentload run`; () = not an `agentload run` option
    help: str
    default: Any = ""  # the raw default, as typed on a command line
    parse: Callable[[Any], Any] = _text  # raw -> typed; raises UsageError
    dest: str = ""  # argparse dest on both parsers (default: name); the start form's field name
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    repeat: bool = False  # action="append"
    switch: bool = False  # action="store_true"
    locust: tuple[str, ...] | None = None  # flags on Locust's parser; None: same as flags;
    # (): not registered there (Locust owns it, or it only matters to `agentload run`)
    web: bool = False  # shown in Locust's web UI start form
    canary: bool = True  # passed by `agentload canary` to both sides (False: canary sets it)

    @property
    def key(self) -> str:
        return self.dest or self.name

    @property
    def locust_flags(self) -> tuple[str, ...]:
        return self.flags if self.locust is None else self.locust


OPTIONS: tuple[Option, ...] = (
    Option("host", ("--host",), "server base URL; none = start the embedded simulator",
           locust=(), canary=False),
    Option("profile", ("--profile", "--agent-profile"),
           "profile: a built-in name or a YAML file (default: quickstart)",
           default="quickstart", dest="agent_profile", metavar="PROFILE", locust=("--agent-profile",),
           web=True),
    Option("users", ("--users",), "concurrent users (default: the profile's users)",
           parse=_whole("--users", 1), locust=()),
    Option("spawn_rate", ("--spawn-rate",), "users started per second (default: users per second)",
           parse=_number("--spawn-rate", positive=True), locust=()),
    Option("duration_s", ("--duration",), "run length, e.g. 30s, 5m (default: the profile's duration)",
           dest="duration", parse=lambda v: parse_duration(v) if str(v).strip() else None,
           locust=()),
    Option("seed", ("--seed",), "traffic seed (integer; default: the profile's seed)",
           parse=_seed, web=True),
    Option("sets", ("--set",), "override a profile field: path.to.field=value (repeatable)",
           dest="agent_set", metavar="PATH=VALUE", repeat=True, default=(), parse=_items),
    Option("labels", ("--label",),
           "operator label recorded in run.json, e.g. container=vllm:0.29 (repeatable)",
           dest="agent_label", metavar="KEY=VALUE", repeat=True, default=(),
           parse=lambda v: parse_kv(list(v or ()), "--label")),
    Option("slo_overrides", ("--slo",),
           "SLO override [CLASS.]METRIC=VALUE, e.g. ttft_p95_ms=800 or interactive.e2e_p95_ms=20000 "
           "(repeatable)",
           dest="agent_slo", metavar="[CLASS.]METRIC=VALUE", repeat=True, default=(),
           parse=lambda v: parse_slo_overrides(list(v or ()))),
    Option("model", ("--model",), "model name (default: discovered from /v1/models)", web=True),
    Option("tokenizer", ("--tokenizer",),
           "prompt-size tokenizer: offline tiktoken cl100k_base, or the target's /tokenize",
           default="tiktoken", choices=("tiktoken", "server"), web=True),
    Option("sessions_per_user", ("--sessions-per-user",),
           "end each user after N sessions (0: the run time decides)",
           default="0", parse=lambda v: _whole("--sessions-per-user", 0)(v) or 0, web=True),
    Option("scrape_interval", ("--scrape-interval",),
           "seconds between /metrics scrapes of the target (0: off)",
           default="2", parse=lambda v: _number("--scrape-interval", positive=False)(v) or 0.0,
           web=True),
    Option("max_error_ratio", ("--max-error-ratio",),
           "exit 1 above this error ratio (default: the profile's max_error_ratio)",
           parse=_max_error_ratio),
    Option("api_key_env", ("--api-key-env",),
           "environment variable that holds the API key (default OPENAI_API_KEY; never written anywhere)",
           default="OPENAI_API_KEY"),
    Option("workers", ("--workers",), "worker processes on this machine (Locust --processes)",
           default="1", parse=lambda v: _whole("--workers", 1)(v) or 1, locust=()),
    Option("sim_preset", ("--sim-preset",), "simulator preset when no --host is given",
           default="default", locust=()),
    Option("sim_faults", ("--sim-fault",),
           "simulator fault injection, e.g. 500=0.05 or reset=0.01 (no --host only)",
           metavar="KIND=RATE", repeat=True, default=(), parse=_items, locust=()),
    Option("sim_sets", ("--sim-set",),
           "simulator engine setting (no --host only), e.g. ttft_scale=1.1",
           metavar="KEY=VALUE", repeat=True, default=(), parse=_items, locust=()),
    Option("out", ("--out",), "run directory (default runs/<run id>)", web=True, canary=False),
    Option("overwrite", ("--overwrite",),
           "replace the run already in --out (default: refuse to mix two runs in one directory)",
           default=False, switch=True, parse=_flag, locust=(), canary=False),
    Option("require_slo_samples", ("--require-slo-samples",),
           "an SLO whose metric had no samples fails (default: it is shown as not judged)",
           default=False, switch=True, parse=_flag, locust=()),
    Option("server_log", ("--server-log",), "vLLM server log file to fingerprint", canary=False),
    Option("web", ("--web",), "open Locust's web UI instead of running headless",
           default=False, switch=True, parse=_flag, locust=()),
    Option("web_port", ("--web-port",), "web UI port (with --web)", default="8089",
           parse=_port, locust=()),
    # Locust-only: set by `agentload run` through the spec, or by hand on plain `locust`.
    Option("run_id", (), "run id (default: a new one)", dest="agent_run_id", locust=("--run-id",)),
    Option("argv", (), "(internal) the agentload command line", dest="agent_argv",
           locust=("--agent-argv",)),
    Option("progress_interval", (),
           "seconds between progress lines in headless runs (0: off)", default="5",
           parse=lambda v: _number("--progress-interval", positive=False)(v) or 0.0,
           locust=("--progress-interval",)),
    Option("arrival_rate", ("--arrival-rate",),
           "open loop: start sessions at R per second (Xpm: per minute), whatever the server's "
           "speed; overrides the profile's run.arrival",
           metavar="R", parse=_arrival_rate, web=True),
    Option("arrival", ("--arrival",),
           "open-loop arrival process: poisson, constant or gamma:CV (needs a rate)",
           metavar="PROCESS", parse=_arrival_process, web=True),
    Option("max_in_flight", ("--max-in-flight",),
           "open loop: most sessions running at once (the generator's cap)",
           metavar="N", parse=_whole("--max-in-flight", 1)),
    Option("at_cap", ("--at-cap",),
           "open loop, at --max-in-flight: queue (start late, lateness recorded) or drop (count it)",
           choices=("queue", "drop")),
    Option("trace", ("--trace",),
           "replay a request trace (Mooncake JSONL, Azure CSV, a run's requests.jsonl) open "
           "loop at its recorded arrival times instead of the profile's traffic",
           metavar="FILE"),
    Option("trace_format", ("--trace-format",), "the --trace file's format (default: detected)",
           default="auto", choices=("auto", "mooncake", "azure", "requests", "agentload")),
    Option("speedup", ("--speedup",), "--trace: divide the recorded arrival times by X",
           default="1", metavar="X", parse=lambda v: _number("--speedup", positive=True)(v) or 1.0),
    Option("trace_limit", ("--limit",), "--trace: replay only the first N requests",
           metavar="N", parse=_whole("--limit", 1)),
    Option("on_bad_line", ("--on-bad-line",),
           "--trace: a line that cannot be read is skipped (and counted) or stops the run",
           default="skip", choices=("skip", "stop")),
    Option("trace_clip", ("--trace-clip",),
           "--trace: clip requests longer than the server's max_model_len (output to at most "
           "half the context, then the prompt's tail) instead of refusing the trace",
           default=False, switch=True, parse=_flag),
    Option("spec", (), "(internal) the resolved run, as JSON, from agentload run or the master",
           dest="agent_spec", locust=("--agent-spec",), canary=False),
)  # fmt: skip

BY_NAME = {o.name: o for o in OPTIONS}
# Canary sets these per side itself.
CANARY_FORBIDDEN = tuple(f for o in OPTIONS if not o.canary and o.flags for f in o.flags)


def add_options(parser: Any, options: tuple[Option, ...], *, locust: bool = False) -> None:
    """Register `options` on an argparse (or Locust's configargparse) parser."""
    for o in options:
        flags = o.locust_flags if locust else o.flags
        if not flags:
            continue
        kw: dict[str, Any] = {"dest": o.key, "help": o.help}
        if o.switch:
            kw["action"] = "store_true"
        else:
            kw["default"] = list(o.default) if o.repeat else o.default
            if o.repeat:
                kw["action"] = "append"
            if o.metavar:
                kw["metavar"] = o.metavar
            if o.choices:
                kw["choices"] = list(o.choices)
        if locust:
            kw["include_in_web_ui"] = o.web
        parser.add_argument(*flags, **kw)


def raw_values(ns: Any, options: tuple[Option, ...] = OPTIONS) -> dict[str, Any]:
    """{option name: raw value} from a parsed namespace (either parser's)."""
    out: dict[str, Any] = {}
    for o in options:
        if hasattr(ns, o.key):
            v = getattr(ns, o.key)
            out[o.name] = list(v or ()) if o.repeat else v
    return out


class ArgParser(argparse.ArgumentParser):
    """An argparse parser whose errors are UsageError (one line, exit 2), not usage + exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_run_parser(prog: str = "agentload run") -> argparse.ArgumentParser:
    """`agentload run`'s parser: every table option with run flags, then `-- LOCUST ARGS`."""
    p = ArgParser(
        prog=prog, description="Run agent traffic against a server (or the embedded simulator)."
    )
    add_options(p, OPTIONS)
    p.add_argument(
        "locust_args",
        nargs=argparse.REMAINDER,
        help="after --: extra arguments passed to Locust unchanged",
    )
    return p


# ---------------------------------------------------------------------------------------------
# the resolved run


@dataclass(frozen=True)
class RunSpec:
    """A run, resolved once from its options and profile; hand it on, do not re-derive it."""

    profile: Any  # workload.plan.profile.Profile, --set applied and validated
    profile_ref: str  # the name or file given
    sets: tuple[str, ...]
    seed: int
    users: int
    spawn_rate: float
    duration_s: float
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
    # What resolve_spec read: format, requests, span_s, bad_lines, first_bad_line.
    trace_info: dict[str, Any] = field(default_factory=dict)
    # The raw option values this was resolved from (the start form is compared with them).
    options: dict[str, Any] = field(default_factory=dict, compare=False)

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
            slo = getattr(cls, "slo", None)
            values = slo.model_dump(exclude_none=True) if slo is not None else {}
            if values:
                out[name] = dict(values)
        for cls_name, values in self.slo_overrides.items():
            for t in list(self.profile.classes) if cls_name == "*" else [cls_name]:
                out.setdefault(t, {}).update(values)
        return out

    def to_json(self) -> str:
        """One JSON string; `from_json` gives back an equal spec."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["profile"] = self.profile.model_dump(mode="json")
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """The spec `to_json` wrote (the profile is validated again, not re-read from disk)."""
        from workload.plan.loading import validate_profile

        d = json.loads(text)
        d["profile"] = validate_profile(d["profile"], label=d.get("profile_ref") or "<spec>")
        for name in ("sets", "sim_faults", "sim_sets", "locust_args"):
            d[name] = tuple(d.get(name) or ())
        return cls(**d)


def resolve_spec(values: Mapping[str, Any], *, load_profile: Any = None) -> RunSpec:
    """Check every option, load the profile once, apply its defaults: the run's RunSpec.

    `values` maps option names (`OPTIONS`) to raw values, as `raw_values` reads
    them; missing ones take the table's default. Raises UsageError (one line).
    """
    if load_profile is None:
        from workload.plan.loading import load_profile
    typed: dict[str, Any] = {}
    for o in OPTIONS:
        raw = values.get(o.name, o.default)
        typed[o.name] = o.parse(o.default if raw is None else raw)
    host = check_host(typed["host"]) if typed["host"] else ""
    try:
        profile = load_profile(typed["profile"], list(typed["sets"]))
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None
    profile = apply_arrival(profile, typed)
    run = profile.run
    users = typed["users"] or int(run.users)
    trace_info = _trace_info(typed)
    duration_s = check_duration(
        typed["duration_s"]
        or trace_info.get("duration_s")
        or _stages_total(run)
        or float(run.duration_s),
        "--duration" if typed["duration_s"] else "profile run.duration_s",
    )
    check_slos(typed["slo_overrides"], ["trace"] if typed["trace"] else list(profile.classes))
    from workload.plan.load_model import closed_users, is_open_loop

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
        max_error_ratio=float(getattr(profile, "max_error_ratio", 0.05))
        if max_err is None
        else max_err,
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
        locust_args=tuple(a for a in values.get("locust_args") or () if a != "--"),
        options={k: v for k, v in values.items() if k in BY_NAME and k != "spec"},
        overwrite=typed["overwrite"],
        require_slo_samples=typed["require_slo_samples"],
        trace=typed["trace"],
        trace_format=typed["trace_format"] or "auto",
        speedup=typed["speedup"],
        trace_limit=typed["trace_limit"],
        on_bad_line=typed["on_bad_line"] or "skip",
        trace_clip=typed["trace_clip"],
        trace_info=trace_info,
    )


# A replay with no --duration runs until its last request is due plus this much, or until
# every request finished (whichever is first).
TRACE_TAIL_S = 120.0


def _trace_info(typed: Mapping[str, Any]) -> dict[str, Any]:
    """Read the --trace file once (bad lines reported with file:line); {} without --trace."""
    if not typed.get("trace"):
        for name, flag in (("trace_limit", "--limit"), ("trace_clip", "--trace-clip")):
            if typed.get(name):
                raise UsageError(f"{flag} needs --trace FILE")
        return {}
    if typed.get("arrival_rate") is not None or typed.get("arrival"):
        raise UsageError(
            "--trace replays the trace's own arrival times: drop --arrival-rate/--arrival"
        )
    from workload.run.replay import read_run_trace

    trace = read_run_trace(
        typed["trace"], typed["trace_format"], typed["trace_limit"], typed["on_bad_line"]
    )
    span = trace.duration_s / typed["speedup"]
    return {
        "format": trace.format,
        "requests": len(trace.requests),
        "span_s": round(span, 3),
        "duration_s": span + TRACE_TAIL_S,
        "bad_lines": len(trace.bad_lines),
        "first_bad_line": str(trace.bad_lines[0]) if trace.bad_lines else None,
    }


def _stages_total(run: Any) -> float | None:
    stages = getattr(run, "stages", None)
    return sum(s.duration_s for s in stages) if stages else None


def apply_arrival(profile: Any, typed: Mapping[str, Any]) -> Any:
    """The profile with --arrival-rate/--arrival/--max-in-flight/--at-cap applied to run.arrival.

    They make the whole profile open loop (class-level arrivals give way to run.arrival).
    Raises UsageError (one line) when they cannot form an arrival process.
    """
    rate, process = typed.get("arrival_rate"), typed.get("arrival") or ""
    cap, at_cap = typed.get("max_in_flight"), typed.get("at_cap") or ""
    if rate is None and not process and cap is None and not at_cap:
        return profile
    from workload.plan.arrivals import ArrivalError, arrival_spec, one_line_error
    from workload.plan.load_model import run_stream_spec
    from workload.plan.loading import validate_profile

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
    try:
        spec = arrival_spec(
            rate if rate is not None else base.rate_per_s,  # type: ignore[union-attr]
            process or (_process_text(base) if base is not None else "poisson"),
            max_in_flight=cap if cap is not None else (base.max_in_flight if base else None),
            at_cap=at_cap or (base.at_cap if base else "queue"),
        )
    except ArrivalError as e:
        raise UsageError(f"bad open-loop options: {e}") from None
    raw = profile.model_dump(mode="json")
    raw["run"]["arrival"] = spec.model_dump(mode="json")
    for c in raw["classes"].values():
        c["arrival"] = None
    try:
        return validate_profile(raw, label=profile.name or "<profile>")
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None
    except ValueError as e:
        raise UsageError(one_line_error(e)) from None


def _process_text(spec: Any) -> str:
    return f"gamma:{spec.cv:g}" if spec.process == "gamma" else str(spec.process)


def check_slos(overrides: dict[str, dict[str, float]], classes: list[str]) -> None:
    """--slo names known metrics and the profile's classes (checked before any traffic)."""
    from workload.measure.slo import check_slo_overrides

    problems = check_slo_overrides(overrides, classes)
    if problems:
        raise UsageError("; ".join(problems))
