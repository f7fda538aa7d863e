"""Console and web-UI text from a stats summary: the run table, progress lines, table rows.

Latencies arrive in milliseconds (``Aggregate.summary()``); they are rounded only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workload.measure.stats import Aggregate


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _pct0(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def console_table(summary: Mapping[str, Any], history: str = "scripted") -> str:
    """A compact plain-text table: one row per class and one overall (`history`: the
    profile's history mode, which says what the tool-call counts mean)."""
    header = (
        "class",
        "reqs",
        "err%",
        "sess ok/fin",
        "TTFT p50",
        "TTFT p95",
        "ITL p95",
        "E2E p95",
        "out tok/s",
        "cached",
        "acc.len",
        "goodput req/sess",
    )
    rows = [header]
    views = list((summary.get("by_class") or {}).items()) + [("overall", summary["overall"])]
    for name, v in views:
        s = v.get("sessions") or {}
        spec = v.get("spec_decode") or {}
        tps = (v.get("throughput") or {}).get("output_tokens_per_s")
        acc = spec.get("acceptance_length_token_weighted")
        rows.append(
            (
                name,
                str(v["requests"]),
                _pct(v.get("error_ratio")),
                f"{s.get('completed', 0)}/{s.get('finished', 0)}",
                _ms(v["ttft_ms"].get("p50")),
                _ms(v["ttft_ms"].get("p95")),
                _ms(v["itl_ms"].get("p95")),
                _ms(v["e2e_ms"].get("p95")),
                "-" if tps is None else f"{tps:.1f}",
                _pct(v.get("cached_ratio")),
                "-" if acc is None else f"{acc:.2f}",
                f"{_pct0(v.get('request_goodput_ratio'))}/{_pct0(s.get('goodput_ratio'))}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for j, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    cancelled = summary["overall"].get("cancelled") or 0
    note = f"; reqs include {cancelled} cancelled when the run stopped" if cancelled else ""
    absent = "".join(f"\n{w}" for w in absent_figures(summary["overall"], short=True))
    return (
        "\n".join(lines)
        + f"\n(latencies in ms{note}){absent}\n{TABLE_KEY}"
        + content_line(summary)
        + tool_line(summary["overall"], history)
    )


def content_line(summary: Mapping[str, Any]) -> str:
    """'\nfirst visible content (TTFT above counts hidden reasoning): p50 .. ms, p95 .. ms'
    per class and overall, when some answers streamed reasoning first (else TTFT is it)."""
    if not (summary["overall"].get("reasoning_requests") or 0):
        return ""
    views = list((summary.get("by_class") or {}).items())
    views = [(n, v) for n, v in views if (v.get("ttft_content_ms") or {}).get("count")]
    parts = []
    for name, v in ([] if len(views) < 2 else views) + [("overall", summary["overall"])]:
        t = v.get("ttft_content_ms") or {}
        parts.append(f"{name} p50 {_ms(t.get('p50'))} ms, p95 {_ms(t.get('p95'))} ms")
    return "\nfirst visible content (TTFT above counts hidden reasoning): " + "; ".join(parts)


# The table's abbreviations, spelled out once under it (definitions: docs/metrics.md).
TABLE_KEY = (
    "key: sess ok/fin = sessions completed / finished; out tok/s = output tokens per second; "
    "cached = share of prompt tokens served from the prefix cache;\n"
    "     acc.len = speculative-decoding acceptance length (tokens per decoding step); "
    "goodput req/sess = share of requests / sessions that met every SLO "
    "(see docs/metrics.md)"
)


NO_GAPS = "no inter-token gaps (every answer came in one chunk, or none was streamed)"
NO_SPEC = "the server reported no speculative decoding"


def absent_figures(view: Mapping[str, Any], *, short: bool = False) -> list[str]:
    """Why a column of a run that answered shows no figure ("-"): ITL with no gap between
    two content chunks, an acceptance length without speculative decoding (`short`: the
    console table's column names)."""
    if not view.get("ok"):
        return []  # nothing answered: every figure is absent, and the table says why
    out = []
    if not (view.get("itl_ms") or {}).get("count"):
        out.append(f"{'ITL p95' if short else 'ITL'} -: {NO_GAPS}")
    if (view.get("spec_decode") or {}).get("acceptance_length_token_weighted") is None:
        out.append(f"{'acc.len' if short else 'acc. length, draft acc.'} -: {NO_SPEC}")
    return out


def _p95(label: str, stats: Mapping[str, Any] | None, answered: bool, why: str) -> str:
    """'ITL p95 12.5 ms', or 'ITL p95 n/a (why)' without a sample ('no answer yet' before
    the first)."""
    p = (stats or {}).get("p95")
    if p is not None:
        return f"{label} {_ms(p)} ms"
    return f"{label} n/a ({why if answered else 'no answer yet'})"


def tool_calls_text(planned: int, returned: int, history: str) -> str:
    """The tool-call counts in the words of the history mode.

    Scripted history (the default) synthesizes the assistant's tool calls from the profile,
    so the server is never asked for one and "0 returned" would read as a broken tool loop;
    under `history: actual` the server must produce them, and the two counts are compared."""
    if history == "actual":
        return f"{planned:,} planned, {returned:,} returned by the server"
    text = (
        f"{planned:,} played from the profile; the server was not asked to produce them "
        "(scripted history; set history: actual in the profile to test tool calling)"
    )
    if returned:
        text += f"; it returned {returned:,} anyway"
    return text


def tool_line(view: Mapping[str, Any], history: str = "scripted") -> str:
    """'\ntool calls: 176 planned, 0 returned by the server; tool-loop failures: 22' (or '')."""
    planned = int(view.get("tool_calls_planned", 0) or 0)
    returned = int(view.get("tool_calls_returned", view.get("tool_calls", 0)) or 0)
    fails = int(view.get("tool_loop_failures", 0) or 0)
    if not (planned or returned or fails):
        return ""
    line = f"\ntool calls: {tool_calls_text(planned, returned, history)}"
    if history == "actual" or fails:
        line += f"; tool-loop failures: {fails:,}"
    return line


def _r(x: float | None, nd: int = 1) -> float | str:
    return "" if x is None else round(x, nd)


def view_row(label: str, view: Mapping[str, Any]) -> dict[str, Any]:
    """One table row (web UI "Agents" tab) from a view summary; blanks where there is no data."""
    spec = view.get("spec_decode") or {}
    sessions = view.get("sessions")
    return {
        "scope": label,
        "requests": view.get("requests", 0),
        "errors": view.get("errors", 0),
        "ttft_p50": _r(view["ttft_ms"].get("p50")),
        "ttft_p95": _r(view["ttft_ms"].get("p95")),
        "itl_p95": _r(view["itl_ms"].get("p95")),
        "tpot_p50": _r(view["tpot_ms"].get("p50")),
        "e2e_p95": _r(view["e2e_ms"].get("p95")),
        "cached_ratio": _r(view.get("cached_ratio"), 3),
        "accept_len": _r(spec.get("acceptance_length_token_weighted"), 2),
        "draft_accept": _r(spec.get("draft_acceptance_rate"), 3),
        "sessions_ok": sessions["completed"] if sessions else "",
        "sessions_failed": sessions["failed"] + sessions["tool_loop_failure"] if sessions else "",
        "tool_loop_failures": view.get("tool_loop_failures", 0),
        "tool_calls_planned": view.get("tool_calls_planned", 0),
        "tool_calls_returned": view.get("tool_calls_returned", view.get("tool_calls", 0)),
        "request_goodput": _r(view.get("request_goodput_ratio"), 3),
        "session_goodput": _r(sessions.get("goodput_ratio") if sessions else None, 3),
    }


def step_rows(summary: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, view) for every (class, step) view, labelled "class #step", in step order."""
    out = []
    for cls, by_step in (summary.get("by_step") or {}).items():
        for step in sorted(by_step, key=int):
            out.append((f"{cls} #{step}", by_step[step]))
    return out


def progress_line(
    agg: Aggregate | Mapping[str, Any], *, elapsed_s: float, users: int | None
) -> str:
    """One console line for headless runs: totals so far, overall latency tails, throughput
    (users None: an open-loop run, whose load is its arrival rate, not a user count)."""
    if isinstance(agg, Aggregate):
        v = agg.overall.summary(elapsed_s, with_sessions=True)
    else:
        v = agg["overall"]
    s = v["sessions"]
    tps = (v.get("throughput") or {}).get("output_tokens_per_s")
    return (
        f"[{elapsed_s:6.0f}s] {'open loop' if users is None else f'users {users}'} | reqs {v['requests']} ok {v['ok']} "
        f"err {_pct(v.get('error_ratio'))} | sessions {s['completed']}/{s['finished']} done | "
        f"{_p95('TTFT p95', v['ttft_ms'], bool(v['ok']), 'no streamed answer')} | "
        f"{_p95('ITL p95', v['itl_ms'], bool(v['ok']), 'no inter-token gaps')} | "
        f"out {'-' if tps is None else f'{tps:.0f}'} tok/s"
    )
