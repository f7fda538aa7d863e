"""Self-contained offline HTML reports: one run, or a comparison of two.

Charts are inline SVG computed here (no JavaScript, no network): this module
turns run data into chart models with pixel coordinates, and the jinja2
templates in workload/templates draw them. Every string that came from a
server or a run directory goes through jinja2 autoescaping.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from workload import __version__
from workload.analyze.compare import (
    VERDICT_BETTER,
    VERDICT_NODATA,
    VERDICT_WORSE,
    CompareError,
    Comparison,
    MetricDiff,
    QuietParser,
    RunData,
    fmt_change,
    fmt_threshold,
    fmt_value,
    load_run,
    metric_series,
    run_cli,
    spec_histogram,
)

_HERE = Path(__file__).parent
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
SIDE_COLORS = {"A": "#1f77b4", "B": "#ff7f0e"}
W, H = 640, 260
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 12, 40


# --------------------------------------------------------------------------- chart models


@dataclass
class Series:
    """One line (or bar group member) of a chart."""

    name: str
    points: list[tuple[float, float]]
    color: str = PALETTE[0]
    dash: bool = False


@dataclass
class Chart:
    """A chart ready to draw: pixel paths, ticks and legend (see templates/report.html.j2)."""

    title: str
    kind: str = "line"  # line | bar
    x_label: str = ""
    y_label: str = ""
    note: str = ""
    width: int = W
    height: int = H
    paths: list[dict[str, Any]] = field(default_factory=list)
    bars: list[dict[str, Any]] = field(default_factory=list)
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    legend: list[dict[str, Any]] = field(default_factory=list)
    empty: bool = True
    plot: tuple[int, int, int, int] = (PAD_L, PAD_T, W - PAD_R, H - PAD_B)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    t = start
    while t <= hi + step * 1e-9 and len(ticks) < 20:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 10))
    return ticks


def _fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:g}" if abs(v) >= 1 else f"{v:.3g}"


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    note: str = "",
    *,
    gaps: bool = False,
) -> Chart:
    """Scale `series` into pixel paths; y starts at 0; `gaps` breaks lines over missing x steps."""
    c = Chart(title, "line", x_label, y_label, note)
    pts = [(x, y) for s in series for x, y in s.points if y is not None and math.isfinite(y)]
    if not pts:
        return c
    c.empty = False
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    xt = _nice_ticks(x0, x1 if x1 > x0 else x0 + 1)
    yt = _nice_ticks(0.0, max(p[1] for p in pts) or 1.0)
    left, top, right, bottom = c.plot

    def sx(x: float) -> float:
        return left + (x - xt[0]) / (xt[-1] - xt[0]) * (right - left)

    def sy(y: float) -> float:
        return bottom - (y - yt[0]) / (yt[-1] - yt[0]) * (bottom - top)

    c.xticks = [(round(sx(t), 1), _fmt_tick(t)) for t in xt]
    c.yticks = [(round(sy(t), 1), _fmt_tick(t)) for t in yt]
    for s in series:
        good = [(x, y) for x, y in s.points if y is not None and math.isfinite(y)]
        if not good:
            continue
        # Break the line where data is missing, so gaps show as gaps.
        d, pen = [], "M"
        prev_x = None
        xs = [p[0] for p in s.points]
        step = min((b - a for a, b in zip(xs, xs[1:], strict=False) if b > a), default=None)
        for x, y in good:
            if gaps and prev_x is not None and step and x - prev_x > 1.5 * step:
                pen = "M"
            d.append(f"{pen}{sx(x):.1f},{sy(y):.1f}")
            pen, prev_x = "L", x
        c.paths.append(
            {
                "d": " ".join(d),
                "color": s.color,
                "dash": s.dash,
                "name": s.name,
                "markers": [
                    (round(sx(x), 1), round(sy(y), 1), f"{s.name}: {_fmt_tick(x)} → {y:.4g}")
                    for x, y in good
                ]
                if len(good) <= 60
                else [],
            }
        )
        c.legend.append({"name": s.name, "color": s.color, "dash": s.dash})
    return c


def bar_chart(
    title: str, categories: list[str], series: list[Series], y_label: str, note: str = ""
) -> Chart:
    """Grouped bars: series[i].points[j] = (j, value) for categories[j]."""
    c = Chart(title, "bar", "", y_label, note)
    vals = [y for s in series for _, y in s.points if y is not None]
    if not vals or not categories:
        return c
    c.empty = False
    yt = _nice_ticks(0.0, max(vals) or 1.0)
    left, top, right, bottom = c.plot
    slot = (right - left) / len(categories)
    bw = slot * 0.8 / max(1, len(series))

    def sy(y: float) -> float:
        return bottom - (y - yt[0]) / (yt[-1] - yt[0]) * (bottom - top)

    c.yticks = [(round(sy(t), 1), _fmt_tick(t)) for t in yt]
    c.xticks = [(round(left + slot * (j + 0.5), 1), cat) for j, cat in enumerate(categories)]
    for i, s in enumerate(series):
        for j, y in s.points:
            if y is None:
                continue
            x = left + slot * j + slot * 0.1 + bw * i
            c.bars.append(
                {
                    "x": round(x, 1),
                    "y": round(sy(y), 1),
                    "w": round(bw, 1),
                    "h": round(bottom - sy(y), 1),
                    "color": s.color,
                    "tip": f"{s.name} {categories[int(j)]}: {y:.4g}",
                }
            )
        c.legend.append({"name": s.name, "color": s.color, "dash": False})
    return c


# --------------------------------------------------------------------------- run views


def run_summary(data: RunData) -> dict[str, Any]:
    """Aggregate.summary() of a run: from run.json, else stats.json, else rebuilt from the rows."""
    s = data.run.get("summary")
    if isinstance(s, dict) and isinstance(s.get("overall"), dict):
        return s
    from workload.measure.stats import Aggregate

    if isinstance(data.stats, dict):
        try:
            return Aggregate.from_dict(data.stats).summary(data.duration_s)
        except (ValueError, KeyError, TypeError):
            pass
    from workload.measure.records import RequestRecord, SessionRecord

    agg = Aggregate()
    rf, sf = set(RequestRecord.__dataclass_fields__), set(SessionRecord.__dataclass_fields__)
    for r in data.requests:
        agg.add_request(RequestRecord(**{k: v for k, v in r.items() if k in rf}))
    for r in data.sessions:
        agg.add_session(SessionRecord(**{k: v for k, v in r.items() if k in sf}))
    return agg.summary(data.duration_s)


def _g(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _ms(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _pct(v: Any) -> str:
    return f"{100 * v:.1f} %" if isinstance(v, (int, float)) else "-"


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "-"


SUMMARY_COLUMNS = (
    "class", "requests", "errors", "sessions ok / finished", "TTFT p50", "TTFT p95", "TTFT p99",
    "ITL p50", "ITL p95", "TPOT p50", "E2E p50", "E2E p95", "out tok/s", "cached", "acc. length", "draft acc.",
)  # fmt: skip


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
                str(v.get("requests", "-")),
                _pct(v.get("error_ratio")),
                f"{s.get('completed', 0)} / {s.get('finished', 0)}",
                _ms(_g(v, "ttft_ms", "p50")),
                _ms(_g(v, "ttft_ms", "p95")),
                _ms(_g(v, "ttft_ms", "p99")),
                _ms(_g(v, "itl_ms", "p50")),
                _ms(_g(v, "itl_ms", "p95")),
                _ms(_g(v, "tpot_ms", "p50")),
                _ms(_g(v, "e2e_ms", "p50")),
                _ms(_g(v, "e2e_ms", "p95")),
                _num(_g(v, "throughput", "output_tokens_per_s"), "{:.1f}"),
                _pct(v.get("cached_ratio")),
                _num(_g(v, "spec_decode", "acceptance_length_token_weighted")),
                _pct(_g(v, "spec_decode", "draft_acceptance_rate")),
            ]
        )
    return rows


def _time_series(data: RunData) -> dict[str, Any]:
    from workload.measure.series import time_series

    span = data.duration_s or 60.0
    bucket = max(1.0, round(span / 60.0))  # about 60 points whatever the run length
    return time_series(data.requests, bucket_s=bucket)


def _step_points(summary: dict, cls: str, stat: str) -> list[tuple[float, float]]:
    steps = _g(summary, "by_step", cls) or {}
    pts = []
    for k, v in steps.items():
        y = _g(v, "ttft_ms", stat)
        if isinstance(y, (int, float)):
            pts.append((float(k), float(y)))
    return sorted(pts)


def _itl_points(data: RunData, cls: str | None) -> tuple[list[tuple[float, float]], str]:
    """ITL quantile curve: per token gap from stats.json when present, else per-request mean ITL."""
    pcts = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9]
    if isinstance(data.stats, dict):
        try:
            from workload.measure.stats import Aggregate

            agg = Aggregate.from_dict(data.stats)
            vals = [agg.percentile_ms("itl", p, cls) for p in pcts]
            if any(v is not None for v in vals):
                return [
                    (float(p), float(v)) for p, v in zip(pcts, vals, strict=True) if v is not None
                ], "per token gap"
        except (ValueError, KeyError, TypeError):
            pass
    means = sorted(
        float(r["itl_ms"]["mean"])
        for r in data.requests
        if (cls is None or r.get("user_class") == cls)
        and isinstance(r.get("itl_ms"), dict)
        and isinstance(r["itl_ms"].get("mean"), (int, float))
    )
    if not means:
        return [], "per request"
    n = len(means)
    return [
        (p, means[min(n - 1, max(0, math.ceil(p / 100 * n) - 1))]) for p in pcts
    ], "per-request mean"


_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_QUEUE = ("vllm:num_requests_waiting",)
_RUNNING = ("vllm:num_requests_running",)


def _server_points(
    data: RunData, names: tuple[str, ...], scale: float = 1.0
) -> list[tuple[float, float]]:
    series = metric_series(data.metrics)
    for n in names:
        if n in series:
            t0 = series[n][0][0]
            return [(t - t0, v * scale) for t, v in series[n]]
    return []


def _charts(runs: list[tuple[str, RunData, dict]], classes: list[str]) -> list[Chart]:
    """Charts for one run (one line per class) or two (A and B per class, overlaid)."""
    compare = len(runs) > 1
    out: list[Chart] = []

    def color(side: str, i: int) -> str:
        return SIDE_COLORS[side] if compare else PALETTE[i % len(PALETTE)]

    def name(side: str, cls: str) -> str:
        return f"{side} {cls}" if compare else cls

    groups = [[c] for c in classes] if compare else [classes]
    ts = {side: _time_series(d) for side, d, _ in runs}
    for grp in groups:
        suffix = f" — {grp[0]}" if compare else ""
        s_ttft, s_tp, s_step, s_itl = [], [], [], []
        itl_note = ""
        for side, d, summ in runs:
            for i, cls in enumerate(grp):
                ser = _g(ts[side], "by_class", cls) or {}
                t = ser.get("t") or []
                s_ttft.append(
                    Series(
                        name(side, cls) + " p95",
                        list(zip(t, ser.get("ttft_p95_ms") or [], strict=False)),
                        color(side, i),
                    )
                )
                s_ttft.append(
                    Series(
                        name(side, cls) + " p50",
                        list(zip(t, ser.get("ttft_p50_ms") or [], strict=False)),
                        color(side, i),
                        dash=True,
                    )
                )
                s_tp.append(
                    Series(
                        name(side, cls),
                        list(zip(t, ser.get("output_tokens_per_s") or [], strict=False)),
                        color(side, i),
                    )
                )
                s_step.append(
                    Series(name(side, cls) + " p95", _step_points(summ, cls, "p95"), color(side, i))
                )
                s_step.append(
                    Series(
                        name(side, cls) + " p50",
                        _step_points(summ, cls, "p50"),
                        color(side, i),
                        dash=True,
                    )
                )
                pts, itl_note = _itl_points(d, cls)
                s_itl.append(Series(name(side, cls), pts, color(side, i)))
        out.append(
            line_chart(
                "TTFT over time" + suffix,
                s_ttft,
                "seconds since start",
                "ms",
                "p95 solid, p50 dashed",
                gaps=True,
            )
        )
        out.append(
            line_chart(
                "Output throughput over time" + suffix, s_tp, "seconds since start", "tokens/s"
            )
        )
        out.append(
            line_chart(
                "TTFT by session step" + suffix,
                s_step,
                "session step",
                "ms",
                "p95 solid, p50 dashed",
            )
        )
        out.append(line_chart(f"ITL distribution ({itl_note})" + suffix, s_itl, "percentile", "ms"))
        hists = [(side, cls, spec_histogram(d.requests, cls)) for side, d, _ in runs for cls in grp]
        k = max((len(h) for *_, h in hists), default=0)
        bars = []
        for j, (side, cls, h) in enumerate(hists):
            tot = sum(h)
            if tot:
                bars.append(
                    Series(
                        name(side, cls),
                        [(i, h[i] / tot if i < len(h) else 0.0) for i in range(k)],
                        color(side, j if not compare else 0) if not compare else SIDE_COLORS[side],
                    )
                )
        out.append(
            bar_chart(
                "Spec-decode acceptance histogram" + suffix,
                [str(i) for i in range(k)],
                bars,
                "share of spec steps",
                "x: draft tokens accepted per step",
            )  # fmt: skip
        )
    kv, queue = [], []
    for side, d, _ in runs:
        col = SIDE_COLORS[side] if compare else PALETTE[0]
        label = f"{side} " if compare else ""
        kv.append(Series(label + "KV cache usage %", _server_points(d, _KV, 100.0), col))
        queue.append(Series(label + "waiting", _server_points(d, _QUEUE), col))
        queue.append(Series(label + "running", _server_points(d, _RUNNING), col, dash=True))
    out.append(line_chart("Server KV cache usage", kv, "seconds since first scrape", "%"))
    out.append(
        line_chart(
            "Server queue",
            queue,
            "seconds since first scrape",
            "requests",
            "waiting solid, running dashed",
        )
    )
    for c in out[-2:]:
        if c.empty:
            c.note = "absent: no /metrics samples (metrics.jsonl) with this series"
    return out


def _fingerprint_rows(run: dict) -> list[tuple[str, str, str]]:
    from workload.analyze.compare import _flatten_fp

    rows = []
    for section in ("fingerprint", "labels"):
        for k, (v, src) in sorted(_flatten_fp(run.get(section) or {}).items()):
            rows.append(
                (
                    f"{section}.{k}",
                    "unknown" if v is None else str(v),
                    "" if src is None else str(src),
                )
            )
    return rows


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


def _css() -> str:
    return (_HERE / "static" / "report.css").read_text(encoding="utf-8")


def _run_header(data: RunData) -> list[tuple[str, str]]:
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


def _spec_check_rows(run: dict) -> list[tuple[str, dict[str, str]]]:
    """run.json's spec_decode_crosscheck as table rows (none when nothing was scraped)."""
    check = run.get("spec_decode_crosscheck") or {}
    rows = []
    for name in (
        "accepted_tokens",
        "draft_tokens",
        "spec_steps",
        "draft_acceptance_rate",
        "acceptance_length",
    ):
        row = check.get(name)
        if isinstance(row, dict) and row.get("server") is not None:
            rows.append(
                (name, {k: _num(row.get(k), "{:.4g}") for k in ("client", "server", "difference")})
            )
    return rows


def write_run_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write report.html for a run directory (default: RUN_DIR/report.html); return its path."""
    data = load_run(run_dir)
    out = Path(out) if out else Path(run_dir) / "report.html"
    summary = run_summary(data)
    classes = sorted((summary.get("by_class") or {}).keys()) or [c for c in data.classes if c]
    slo = [x for x in data.run.get("slo_results") or [] if isinstance(x, dict)]
    page = (
        _env()
        .get_template("report.html.j2")
        .render(
            title=f"agentload run {data.run.get('run_id', data.path.name)}",
            css=_css(),
            version=__version__,
            generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            header=_run_header(data),
            columns=SUMMARY_COLUMNS,
            summary=summary_rows(summary),
            slo=slo,
            spec_check=_spec_check_rows(data.run),
            fingerprint=_fingerprint_rows(data.run),
            charts=_charts([("A", data, summary)], classes),
            comparison=None,
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _metric_row(m: MetricDiff) -> dict[str, Any]:
    css = {VERDICT_WORSE: "worse", VERDICT_BETTER: "better", VERDICT_NODATA: "nodata"}.get(
        m.verdict, "same"
    )
    return {
        "scope": m.scope,
        "metric": m.metric,
        "a": fmt_value(m, m.a),
        "b": fmt_value(m, m.b),
        "change": fmt_change(m),
        "threshold": fmt_threshold(m),
        "verdict": m.verdict,
        "css": css,
        "paired": f"{100 * m.paired_share:.0f} %",
        "n": f"{m.n_a} / {m.n_b}",
    }


def write_compare_report(comparison: Comparison, out: Path) -> Path:
    """Write the A/B report: verdict and fingerprint diff on top, then A and B overlaid."""
    c = comparison
    sa, sb = run_summary(c.run_a), run_summary(c.run_b)
    classes = sorted(set(sa.get("by_class") or {}) | set(sb.get("by_class") or {})) or [
        x for x in sorted(set(c.run_a.classes) | set(c.run_b.classes)) if x
    ]
    detail = [m for m in c.metrics if not m.gated and not m.scope.startswith("step:")]
    steps = [
        m for m in c.metrics if m.scope.startswith("step:") and m.metric in ("ttft_p50", "ttft_p95")
    ]
    server_names = sorted(set(c.server.get("a", {})) | set(c.server.get("b", {})))
    server_rows = []
    for n in server_names:
        va, vb = c.server["a"].get(n, {}), c.server["b"].get(n, {})
        for stat in ("delta", "mean", "max"):
            if stat in va or stat in vb:
                server_rows.append(
                    (n, stat, _num(va.get(stat), "{:.4g}"), _num(vb.get(stat), "{:.4g}"))
                )
    kinds = sorted(
        set(c.error_kinds["a"].get("overall", {})) | set(c.error_kinds["b"].get("overall", {}))
    )
    page = (
        _env()
        .get_template("report.html.j2")
        .render(
            title="agentload comparison",
            css=_css(),
            version=__version__,
            generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            header=[],
            columns=SUMMARY_COLUMNS,
            summary=[],
            slo=[],
            fingerprint=[],
            charts=_charts([("A", c.run_a, sa), ("B", c.run_b, sb)], classes),
            comparison={
                "verdict": c.verdict,
                "verdict_css": {VERDICT_WORSE: "worse", VERDICT_BETTER: "better"}.get(
                    c.verdict, "same"
                ),
                "exit_code": c.exit_code,
                "confidence": f"{100 * c.confidence:g} %",
                "gated_count": c.gated_count,
                "gating": c.gating,
                "n_boot": c.n_boot,
                "header_a": _run_header(c.run_a),
                "header_b": _run_header(c.run_b),
                "fp_diff": [
                    (
                        d["field"],
                        "unknown" if d["a"] is None else str(d["a"]),
                        "unknown" if d["b"] is None else str(d["b"]),
                        " / ".join(str(x) for x in {d.get("source_a"), d.get("source_b")} if x),
                    )
                    for d in c.fingerprint_diff
                ],  # fmt: skip
                "gated": [_metric_row(m) for m in c.rows(gated=True)],
                "detail": [_metric_row(m) for m in detail],
                "steps": [_metric_row(m) for m in steps],
                "summary_a": summary_rows(sa),
                "summary_b": summary_rows(sb),
                "warnings": c.warnings,
                "errors": [
                    (
                        k,
                        c.error_kinds["a"]["overall"].get(k, 0),
                        c.error_kinds["b"]["overall"].get(k, 0),
                    )
                    for k in kinds
                ],
                "server": server_rows,
            },
        )
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def escape(text: str) -> str:
    """HTML-escape (exposed for callers that build fragments by hand)."""
    return html.escape(text)


def report_argparser(prog: str = "agentload report") -> argparse.ArgumentParser:
    p = QuietParser(
        prog=prog, description="Write the self-contained HTML report of a run directory."
    )
    p.add_argument("run", type=Path, help="run directory")
    p.add_argument("--out", type=Path, help="output file (default RUN/report.html)")
    return p


def main_report(argv: list[str]) -> int:
    """`agentload report RUN [--out FILE]`: 0 written, 2 bad input."""

    def body(args: argparse.Namespace) -> int:
        try:
            path = write_run_report(args.run, args.out)
        except OSError as e:
            raise CompareError(f"cannot write report: {e}") from None
        print(f"report: {path}")
        return 0

    return run_cli("report", report_argparser(), argv, body)
