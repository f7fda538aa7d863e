"""Views of a run shared by the run and the compare report: summary table, header, the page.

Every string that came from a server or a run directory goes through jinja2
autoescaping when the page is rendered.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from workload import __version__
from workload.analyze.rundata import RunData
from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.stats import Aggregate
from workload.observe.safe import sanitize

_HERE = Path(__file__).parent
TEMPLATES_DIR = _HERE / "templates"  # the chart macros other pages import


def run_summary(data: RunData) -> dict[str, Any]:
    """Aggregate.summary() of a run: from run.json, else stats.json, else rebuilt from the rows."""
    s = data.run.get("summary")
    if isinstance(s, dict) and isinstance(s.get("overall"), dict):
        return s

    if isinstance(data.stats, dict):
        try:
            return Aggregate.from_dict(data.stats).summary(data.duration_s)
        except (ValueError, KeyError, TypeError):
            pass

    agg = Aggregate()
    rf, sf = set(RequestRecord.__dataclass_fields__), set(SessionRecord.__dataclass_fields__)
    for r in data.requests:
        agg.add_request(RequestRecord(**{k: v for k, v in r.items() if k in rf}))
    for r in data.sessions:
        agg.add_session(SessionRecord(**{k: v for k, v in r.items() if k in sf}))
    return agg.summary(data.duration_s)


def dig(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def fmt_ms(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def fmt_pct(v: Any) -> str:
    return f"{100 * v:.1f} %" if isinstance(v, (int, float)) else "-"


def fmt_num(v: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "-"


def fmt_count(v: Any) -> str:
    """A count for people: 16860 -> '16,860' (a float count is rounded), '-' when absent."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "-"
    return f"{round(v):,}"


def fmt_value(v: Any, unit: str = "") -> str:
    """A number in its unit for people: ratio -> '15.4 %', ms -> '1,234 ms', per_min -> '3.2 /min'."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "-"
    if unit == "ratio":
        return fmt_pct(v)
    if unit == "ms":
        return fmt_ms(v) + " ms"
    if unit == "per_min":
        return f"{v:,.1f} /min"
    if unit in ("tokens_per_s", "tok/s"):
        return f"{v:,.1f} tok/s"
    if float(v).is_integer() and abs(v) >= 1:
        return fmt_count(v)
    return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"


SUMMARY_COLUMNS = (
    "class", "requests", "errors", "sessions ok / finished", "good req.", "good sess.", "TTFT p50", "TTFT p95", "TTFT p99",
    "ITL p50", "ITL p95", "TPOT p50", "E2E p50", "E2E p95", "out tok/s", "cached", "acc. length", "draft acc.",
)  # fmt: skip

# One hover away: what each summary column means (title attributes on the headers).
COLUMN_HELP = {
    "requests": "Request attempts (retries count), including errors and cancelled ones.",
    "errors": "error ratio = errors / (requests - cancelled)",
    "sessions ok / finished": "Completed sessions / sessions that ended (any outcome but cancelled).",
    "good req.": "Request goodput: good requests / (requests - cancelled). Good = succeeded and met "
    "every request-level SLO of its class (without SLOs: succeeded).",
    "good sess.": "Session goodput: good sessions / finished sessions. Good = completed, every "
    "request good, and the session-level SLOs met.",
    "TTFT p50": "Time to first token (ms), successful requests; HDR percentile.",
    "TTFT p95": "Time to first token (ms), successful requests; HDR percentile.",
    "TTFT p99": "Time to first token (ms), successful requests; HDR percentile.",
    "ITL p50": "Inter-token latency (ms) per gap between content chunks; - when there was no "
    "gap (every answer in one chunk, or none streamed).",
    "ITL p95": "Inter-token latency (ms) per gap between content chunks; - when there was no "
    "gap (every answer in one chunk, or none streamed).",
    "TPOT p50": "Time per output token after the first: (E2E - TTFT) / (tokens - 1), ms.",
    "E2E p50": "Whole request, first byte sent to last byte read (ms).",
    "E2E p95": "Whole request, first byte sent to last byte read (ms).",
    "out tok/s": "Completion tokens / run duration.",
    "cached": "Σ cached prompt tokens / Σ prompt tokens, over requests that reported cached tokens.",
    "acc. length": "Spec-decode acceptance length, token-weighted: Σ(a+s)·L / Σ(a+s) (each emitted "
    "token weighs the same). The server's /metrics give the pooled 1 + Σa/Σs, which differs "
    "when requests differ in length.",
    "draft acc.": "Draft acceptance rate: Σ accepted draft tokens / Σ draft tokens.",
}


def summary_rows(summary: dict[str, Any]) -> list[list[str]]:
    """One table row per class plus overall (latencies in ms)."""
    rows = []
    views = list((summary.get("by_class") or {}).items()) + [
        ("overall", summary.get("overall") or {})
    ]
    for name, v in views:
        s = v.get("sessions") or {}
        rows.append(
            [
                name,
                fmt_count(v.get("requests")),
                fmt_pct(v.get("error_ratio")),
                f"{fmt_count(s.get('completed', 0))} / {fmt_count(s.get('finished', 0))}",
                fmt_pct(v.get("request_goodput_ratio")),
                fmt_pct(s.get("goodput_ratio")),
                fmt_ms(dig(v, "ttft_ms", "p50")),
                fmt_ms(dig(v, "ttft_ms", "p95")),
                fmt_ms(dig(v, "ttft_ms", "p99")),
                fmt_ms(dig(v, "itl_ms", "p50")),
                fmt_ms(dig(v, "itl_ms", "p95")),
                fmt_ms(dig(v, "tpot_ms", "p50")),
                fmt_ms(dig(v, "e2e_ms", "p50")),
                fmt_ms(dig(v, "e2e_ms", "p95")),
                fmt_num(dig(v, "throughput", "output_tokens_per_s"), "{:.1f}"),
                fmt_pct(v.get("cached_ratio")),
                fmt_num(dig(v, "spec_decode", "acceptance_length_token_weighted")),
                fmt_pct(dig(v, "spec_decode", "draft_acceptance_rate")),
            ]
        )
    return rows


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept between processes (Jinja's per-user cache in the temp
    directory, keyed by each template's source): compiling the report's template costs
    about 0.1 CPU-s, at the end of every run and every canary block."""
    try:
        # Its own file names: compiled code depends on the environment's options too (the
        # `finalize` below), which Jinja's cache key (the source) does not see.
        return jinja2.FileSystemBytecodeCache(pattern="__agentload_shown_%s.cache")
    except (OSError, RuntimeError):  # no private temp directory to be had: compile each time
        return None


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=_bytecode_cache(),
        finalize=_shown,
    )
    return env


def _shown(value: Any) -> Any:
    """Every value a page prints: a plain string loses control characters and escape
    sequences (server strings such as an error body or a model id could carry raw ESC bytes
    into the file); markup the renderer built itself passes unchanged."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return sanitize(value, keep_newlines=True)
    return value


def _css() -> str:
    return (_HERE / "static" / "report.css").read_text(encoding="utf-8")


def run_header(data: RunData) -> list[tuple[str, str]]:
    r = data.run
    tgt: dict[str, Any] = r["target"] if isinstance(r.get("target"), dict) else {}
    prof: dict[str, Any] = r["profile"] if isinstance(r.get("profile"), dict) else {}
    items = [
        ("run", str(r.get("run_id", data.path.name))),
        ("started", str(r.get("started_at", "-"))),
        ("duration", f"{data.duration_s:.0f} s" if data.duration_s else "-"),
        ("profile", str(r.get("profile_name") or prof.get("name") or "-")),
        ("seed", str(r.get("seed", "-"))),
        (
            "target",
            str(tgt.get("url") or r.get("target") or "-") if tgt else str(r.get("target", "-")),
        ),
        ("model", str(r.get("model") or tgt.get("model") or "-")),
        ("exit code", str(r.get("exit_code", "-"))),
    ]
    return items


def render_page(**context: Any) -> str:
    """The report page (templates/report.html.j2) with the stylesheet, version and time added."""
    return (
        _env()
        .get_template("report.html.j2")
        .render(
            css=_css(),
            version=__version__,
            generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **context,
        )
    )
