"""The run options, defined once: the one table every parser of a run is built from.

`OPTIONS` feeds `agentload run`'s parser (`build_run_parser`), `agentload capacity`'s, the
options `agentload canary` passes to both sides (`CANARY_FORBIDDEN` are the ones it sets
itself) and Locust's parser (`workload.locust.options.add_arguments`). Both parsers store
an option under the same `dest`, so `raw_values(namespace)` reads either; `resolve_spec`
(`workload.run.spec`) turns the raw values into the typed, frozen `RunSpec`, once.

Adding an option: add an `Option` row (its `parse` turns the raw string, or list of strings
for `repeat` options, into the typed value; raise UsageError with a one-line message), then
a `RunSpec` field of the same name. Options whose value depends on the profile are finished
in `resolve_spec`.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from workload.errors import ArgParser, UsageError
from workload.observe.safe import redact_url
from workload.plan.arrivals import parse_arrival_process, parse_arrival_rate
from workload.plan.profile import MAX_COUNT

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
    try:
        p = urlparse(url)
        ok = p.scheme in ("http", "https") and bool(p.hostname)
        p.port  # noqa: B018 - a bad port raises here, not later in the client
    except ValueError:  # e.g. "Invalid IPv6 URL", a port out of range
        ok = False
    if not ok:
        raise UsageError(
            f"bad --host {redact_url(url)!r}: use a base URL such as http://127.0.0.1:8000"
        )
    if "@" in p.netloc:  # neither the probe nor the client sends URL credentials
        raise UsageError(
            f"bad --host {redact_url(url)!r}: credentials in the URL are not used; give the "
            "API key in $OPENAI_API_KEY (or name its variable with --api-key-env)"
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


def _whole(flag: str, minimum: int, maximum: int | None = None) -> Callable[[Any], int | None]:
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
        if maximum is not None and n > maximum:
            raise UsageError(f"bad {flag} {n}: it must be at most {maximum}")
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
        if not math.isfinite(x):
            raise UsageError(f"bad {flag} {text}: it must be a finite number")
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


def parse_listen(value: Any) -> str:
    """'--metrics-port [HOST:]PORT' -> 'HOST:PORT' (loopback unless a host is given); '' = off."""
    text = str(value or "").strip()
    if not text:
        return ""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535 or (sep and not host):
        raise UsageError(
            f"bad --metrics-port {text!r}: use a port (9464; 0 = any free one) or HOST:PORT "
            "(0.0.0.0:9464 to serve other machines)"
        )
    return f"{host}:{port}"


_OTLP_SIGNAL_PATHS = ("/v1/metrics", "/v1/traces")
_OTLP_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")  # the otel extra


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def parse_otlp_endpoint(value: Any) -> str:
    """'--otlp-endpoint URL' -> the OTLP/HTTP base URL (no trailing slash; a pasted signal path
    such as /v1/traces is dropped: both signals go to their paths under it); '' = off."""
    text = str(value or "").strip()
    if not text:
        return ""
    try:
        p = urlparse(text)
        ok = p.scheme in ("http", "https") and bool(p.hostname) and not p.query
        p.port  # noqa: B018 - a bad port raises here, not in the exporter's thread
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(
            f"bad --otlp-endpoint {redact_url(text)!r}: use the collector's OTLP/HTTP base URL, "
            "e.g. http://127.0.0.1:4318"
        )
    if "@" in p.netloc:
        raise UsageError(
            f"bad --otlp-endpoint {redact_url(text)!r}: credentials in the URL are not sent; "
            "give headers in $OTEL_EXPORTER_OTLP_HEADERS (e.g. authorization=Bearer ...)"
        )
    missing = [m for m in _OTLP_MODULES if not _importable(m)]
    if missing:
        raise UsageError(
            f"--otlp-endpoint needs the OpenTelemetry SDK ({missing[0]} is not installed): "
            "pip install 'agentload[otel]'"
        )
    url = text.rstrip("/")
    for suffix in _OTLP_SIGNAL_PATHS:
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


def _sample_ratio(value: Any) -> float:
    text = str(value).strip()
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not 0 < x <= 1:
        raise UsageError(
            f"bad --otlp-sample {text!r}: the share of sessions traced, above 0 and at most 1"
        )
    return x


def _max_error_ratio(value: Any) -> float | None:
    text = str(value).strip()
    if not text:
        return None
    try:
        x = float(text)
    except ValueError:
        raise UsageError(f"bad --max-error-ratio {text!r}: it must be a number") from None
    if math.isnan(x) or x > 1:
        # nan or above 1 would switch the error gate off without a word
        raise UsageError(f"bad --max-error-ratio {text}: it must be a ratio between 0 and 1")
    return None if x < 0 else x  # negative: the profile's (Locust's old default was -1)


def _arrival_rate(value: Any) -> float | None:
    text = str(value or "").strip()
    return parse_arrival_rate(text) if text else None


def _arrival_process(value: Any) -> str:
    text = str(value or "").strip()
    if text:
        parse_arrival_process(text)  # raises ArrivalError (a UsageError): one line
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
           parse=_whole("--users", 1, MAX_COUNT), locust=()),
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
    Option("metrics_port", ("--metrics-port",),
           "serve the run's live numbers for Prometheus at http://HOST:PORT/metrics "
           "(loopback unless HOST is given; 0: any free port; the master serves in distributed "
           "mode)",
           metavar="[HOST:]PORT", parse=parse_listen, canary=False),
    Option("metrics_linger_s", ("--metrics-linger",),
           "with --metrics-port: keep serving this many seconds after the run ended, so a "
           "last scrape sees the final counts (default 0)",
           dest="metrics_linger", default="0", metavar="SECONDS",
           parse=lambda v: _number("--metrics-linger", positive=False)(v) or 0.0, canary=False),
    Option("otlp_endpoint", ("--otlp-endpoint",),
           "export the run's metrics with OpenTelemetry (OTLP/HTTP) to this collector, e.g. "
           "http://127.0.0.1:4318 (each measuring process exports its own; needs "
           "agentload[otel])",
           metavar="URL", parse=parse_otlp_endpoint),
    Option("otlp_traces", ("--otlp-traces",),
           "with --otlp-endpoint: also one span per request under one span per agent session",
           default=False, switch=True, parse=_flag),
    Option("otlp_sample", ("--otlp-sample",),
           "with --otlp-traces: trace this share of sessions, whole (chosen from the seed; "
           "default 1)",
           default="1", metavar="RATIO", parse=_sample_ratio),
    Option("otlp_interval_s", ("--otlp-interval",),
           "with --otlp-endpoint: seconds between metric exports (default 10)",
           dest="otlp_interval", default="10", metavar="SECONDS",
           parse=lambda v: _number("--otlp-interval", positive=True)(v) or 10.0),
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
           metavar="N", parse=_whole("--max-in-flight", 1, MAX_COUNT)),
    Option("at_cap", ("--at-cap",),
           "open loop, at --max-in-flight: queue (start late, lateness recorded) or drop (count it)",
           choices=("queue", "drop")),
    Option("trace", ("--trace",),
           "replay a request trace (Mooncake JSONL, Azure CSV, a run's requests.jsonl) open "
           "loop at its recorded arrival times, or agent sessions (agent-session, TraceLab, "
           "Claude Code, Codex) closed loop, instead of the profile's traffic",
           metavar="FILE"),
    Option("trace_format", ("--trace-format",), "the --trace file's format (default: detected)",
           default="auto", choices=("auto", "mooncake", "azure", "requests", "agentload",
                                    "agent-session", "tracelab", "claude-code", "codex")),
    Option("speedup", ("--speedup",), "--trace: divide the recorded arrival times by X",
           default="1", metavar="X", parse=lambda v: _number("--speedup", positive=True)(v) or 1.0),
    Option("trace_limit", ("--limit",), "--trace: replay only the first N requests",
           metavar="N", parse=_whole("--limit", 1)),
    Option("on_bad_line", ("--on-bad-line",),
           "--trace: a line that cannot be read is skipped (and counted) or stops the run",
           default="skip", choices=("skip", "stop")),
    Option("max_gap", ("--max-gap",),
           "--trace of agent sessions: play no recorded wait (tool, think, or between session "
           "starts) longer than S seconds after --speedup",
           metavar="S", parse=_number("--max-gap", positive=True)),
    Option("trace_clip", ("--trace-clip",),
           "--trace: clip requests longer than the server's max_model_len (output to at most "
           "half the context, then the prompt's tail) instead of refusing the trace",
           default=False, switch=True, parse=_flag),
    Option("spec_file", ("--spec",),
           "run exactly the resolved run a spec.json describes (every run directory has one) "
           "into a new run directory, or the spec on standard input with '-' (into the directory "
           "it names); only --out and --overwrite may be given with it",
           dest="agent_spec_file", metavar="SPEC.json", locust=("--agent-spec-file",),
           canary=False),
)  # fmt: skip

BY_NAME = {o.name: o for o in OPTIONS}
# Canary sets these per side itself.
CANARY_FORBIDDEN = tuple(f for o in OPTIONS if not o.canary and o.flags for f in o.flags)


def add_options(
    parser: argparse.ArgumentParser, options: tuple[Option, ...], *, locust: bool = False
) -> None:
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


def raw_values(ns: object, options: tuple[Option, ...] = OPTIONS) -> dict[str, Any]:
    """{option name: raw value} from a parsed namespace (either parser's)."""
    out: dict[str, Any] = {}
    for o in options:
        if hasattr(ns, o.key):
            v = getattr(ns, o.key)
            out[o.name] = list(v or ()) if o.repeat else v
    return out


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
