"""capacity.html: latency percentiles and goodput against load, the knee marked; one offline file.

Input is capacity.json's shape (``run.capacity_run``). Charts are inline SVG from
``report.charts.line_chart``, drawn by the same ``chart`` macro as the run report; the knee
(the capacity found) is a dashed vertical line, the first failing load a dotted one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from workload.measure.slo import parse_slo_key
from workload.orchestrate.capacity.text import answer_line, step_verdict_text
from workload.report.charts import PALETTE, Series, line_chart
from workload.report.views import TEMPLATES_DIR as _TEMPLATES
from workload.report.views import fmt_ms, fmt_num, fmt_pct

KNEE, FAIL = "#000000", "#999999"  # apart from the series colours

_PAGE = """<!doctype html>
{% import "charts.html.j2" as ch %}
<html lang="en"><head><meta charset="utf-8"><title>agentload capacity</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
.headline{font-size:1.3em;margin:.5em 0 1em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
tr.fail td{background:#fde8e8}.chart svg{width:100%;max-width:640px}
.grid line{stroke:#eee}.grid text,.label{font-size:11px;fill:#555}.axis{stroke:#888}
path.series{fill:none;stroke-width:2}.legend{list-style:none;padding:0}.legend li{display:inline-block;margin-right:1em}
.muted{color:#777}.absent{color:#999}
</style></head><body>
<h1>Capacity search</h1>
<p class="headline">{{ headline }}</p>
<p class="muted">Dimension: {{ dim }}. Each step: {{ warmup }} s warm-up, then a {{ window }} s
measurement window judged against the SLOs {{ slos }}. Goodput = requests that met every
request-level SLO, per second of the window. Stop: {{ stop }}.</p>
{% for c in charts %}{{ ch.chart(c) }}{% endfor %}
<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for css, row in rows %}<tr class="{{ css }}">{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}
</table>
{% if few %}<p class="muted">(few) = too few samples to tell a quantile SLO's pass from a fail
at 95 % confidence (exact binomial test on the samples beyond its threshold); run steps
longer (--step-duration).</p>{% endif %}
</body></html>
"""


def _knee(name: str, x: float | None, top: float, color: str, dash: bool) -> list[Series]:
    return [] if x is None else [Series(name, [(x, 0.0), (x, top)], color, dash)]


def capacity_charts(result: Mapping[str, Any]) -> list[Any]:
    """Latency percentiles vs load and goodput vs load, with the knee lines."""
    steps = sorted(result.get("steps") or [], key=lambda s: s["load"])
    unit = "users" if result.get("dimension") == "users" else "sessions/s"
    cap, first = result.get("capacity"), result.get("first_failing")
    lat: list[Series] = []
    i = 0
    for metric in ("ttft", "e2e"):
        for p in ("p50", "p95", "p99"):
            # a step without the percentile leaves a gap (line_chart skips None)
            pts: list[Any] = [
                (s["load"], ((s.get("percentiles") or {}).get(metric) or {}).get(p)) for s in steps
            ]
            lat.append(Series(f"{metric.upper()} {p}", pts, PALETTE[i % len(PALETTE)], p == "p50"))
            i += 1
    top = max((y for s in lat for _, y in s.points if isinstance(y, (int, float))), default=1.0)
    lat += _knee("capacity (knee)", cap, top, KNEE, True)
    lat += _knee("first failing", first, top, FAIL, True)
    good = [
        Series("good requests/s", [(s["load"], s.get("goodput")) for s in steps], PALETTE[0]),
    ]
    gtop = max((y for _, y in good[0].points if isinstance(y, (int, float))), default=1.0)
    good += _knee("capacity (knee)", cap, gtop, KNEE, True)
    good += _knee("first failing", first, gtop, FAIL, True)
    ratio = [
        Series(
            "good request share",
            [(s["load"], s.get("request_goodput_ratio")) for s in steps],
            PALETTE[0],
        ),
        Series(
            "good session share",
            [(s["load"], s.get("session_goodput_ratio")) for s in steps],
            PALETTE[1],
        ),
    ]
    ratio += _knee("capacity (knee)", cap, 1.0, KNEE, True)
    return [
        line_chart("Latency percentiles against load", lat, unit, "ms"),
        line_chart("Goodput against load", good, unit, "good requests / s"),
        line_chart("Goodput share against load", ratio, unit, "share"),
    ]


def _headline(result: Mapping[str, Any]) -> str:
    """The console's answer line, as the page's headline."""
    line = answer_line(result)
    return line[:1].upper() + line[1:] + "."


def _slo_text(slos: Mapping[str, Mapping[str, float]]) -> str:
    parts = []
    for cls, keys in slos.items():
        for key, v in keys.items():
            bound = parse_slo_key(key)[2].replace("<=", "≤").replace(">=", "≥")
            parts.append(f"{'' if cls == '*' else cls + '.'}{key} {bound} {v:g}")
    return ", ".join(parts)


def capacity_html(result: Mapping[str, Any]) -> str:
    """The page as one string (no external resources)."""
    steps = list(result.get("steps") or [])
    keys = sorted({k for s in steps for k in s.get("slo_values") or {}})
    header = ["#", "load", "SLO", "goodput req/s", "good req", "good sess", "samples", *keys]
    rows = []
    for i, s in enumerate(steps, 1):
        vals = s.get("slo_values") or {}
        rows.append(
            (
                "" if s["slo_met"] else "fail",
                [
                    i,
                    fmt_num(s["load"], "{:g}"),
                    step_verdict_text(s) + (" (ended early)" if s.get("early_stop") else ""),
                    fmt_num(s.get("goodput")),
                    fmt_pct(s.get("request_goodput_ratio")),
                    fmt_pct(s.get("session_goodput_ratio")),
                    f"{s.get('samples', 0)}{' (few)' if s.get('too_few_samples') else ''}",
                    *(fmt_ms(vals.get(k)) if k.endswith("_ms") else fmt_num(vals.get(k), "{:.3g}") for k in keys),
                ],
            )
        )  # fmt: skip
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)), autoescape=True, keep_trailing_newline=True
    )
    return env.from_string(_PAGE).render(
        headline=_headline(result),
        dim=result.get("dimension"),
        warmup=fmt_num(result.get("warmup_s"), "{:g}"),
        window=fmt_num(result.get("step_duration_s"), "{:g}"),
        slos=_slo_text(result.get("slos") or {}),
        stop=result.get("stop_reason"),
        charts=capacity_charts(result),
        header=header,
        rows=rows,
        few=any(s.get("too_few_samples") for s in steps),
    )


def write_capacity_page(path: Path, result: Mapping[str, Any]) -> None:
    """Write capacity.html."""
    Path(path).write_text(capacity_html(result), encoding="utf-8")
