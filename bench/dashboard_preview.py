"""Draw the Grafana dashboard from a real Prometheus scraping a real run (not Grafana).

    python bench/dashboard_preview.py --out docs/img/dashboard-preview.png

Runs the simulator, `agentload run --metrics-port` (tests/fixtures/dashboard_run.yaml with
load stages, so the lines move) and Prometheus (bench/_promstack.py), evaluates every target
of deploy/grafana/agentload-dashboard.json with Grafana's variables substituted, and draws
the panels from those results into one self-contained HTML page laid out by the panels'
gridPos: row titles, panel titles, units from fieldConfig (overrides by query included), one
inline SVG line chart per panel, a legend from legendFormat. Headless Chromium screenshots the
page. Grafana itself cannot be installed on this machine; this shows what its queries return.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _promstack import DASHBOARD, PROFILE, PromStack, dashboard_queries, substitute, variable_values

CHROMIUM = "/usr/bin/chromium"
WIDTH, GRID_H, HEADER = 1600, 28, 66
COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9",
          "#fade2a", "#37872d", "#c4162a", "#1f60c4", "#8f3bb8"]  # fmt: skip
STAGES = [{"duration_s": 20, "users": 2}, {"duration_s": 25, "users": 8, "ramp_s": 5},
          {"duration_s": 25, "users": 3}]  # fmt: skip


# ------------------------------------------------------------------ units


def fmt(value: float, unit: str | None) -> str:
    """A tick label in the panel's unit, roughly as Grafana writes it."""
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "percent":
        return f"{value:.3g}%"
    if unit == "s":
        if value == 0:
            return "0 s"
        if abs(value) < 1e-3:
            return f"{value * 1e6:.3g} µs"
        if abs(value) < 1:
            return f"{value * 1e3:.3g} ms"
        return f"{value:.3g} s"
    suffix = {"ops": " ops/s", "reqps": " req/s"}.get(unit or "", "")
    for bound, letter in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= bound:
            return f"{value / bound:.3g}{letter}{suffix}"
    return f"{value:.3g}{suffix}"


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step) * step
    return [start + k * step for k in range(int((hi - start) / step + 1.999))]


def overrides(panel: dict) -> dict[str, dict[str, object]]:
    """{refId: {property: value}} from fieldConfig overrides matched by query (byFrameRefID)."""
    out: dict[str, dict[str, object]] = {}
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        if o.get("matcher", {}).get("id") == "byFrameRefID":
            props = out.setdefault(o["matcher"]["options"], {})
            props.update({p["id"]: p["value"] for p in o.get("properties", [])})
    return out


def legend(fmt_: str | None, labels: dict[str, str]) -> str:
    if fmt_:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt_)
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__") + "}"


# ------------------------------------------------------------------ drawing


def chart(series: list[dict], t0: float, t1: float, w: int, h: int) -> str:
    """One SVG: a left axis (and a right one when an override puts series there), time axis."""
    pad_l, pad_r, pad_t, pad_b = 62, 8, 6, 18
    right = [s for s in series if s["axis"] == "right"]
    if right:
        pad_r = 62
    pw, ph = w - pad_l - pad_r, h - pad_t - pad_b
    out = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">']

    def scale(group: list[dict]) -> tuple[list[float], float, float]:
        vals = [v for s in group for _t, v in s["points"] if v is not None]
        lo, hi = (min(vals + [0.0]), max(vals + [0.0])) if vals else (0.0, 1.0)
        ticks = nice_ticks(lo, hi if hi > lo else lo + 1)
        return ticks, ticks[0], ticks[-1]

    left = [s for s in series if s["axis"] != "right"]
    axes = {"left": scale(left)}
    if right:
        axes["right"] = scale(right)
    for side, (ticks, lo, hi) in axes.items():
        unit = next(
            (s["unit"] for s in series if (s["axis"] == "right") == (side == "right")), None
        )
        for tick in ticks:
            y = pad_t + ph - (tick - lo) / (hi - lo) * ph
            if side == "left":
                out.append(f'<line x1="{pad_l}" x2="{pad_l + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                           'stroke="#2c3235"/>')  # fmt: skip
                out.append(f'<text x="{pad_l - 6}" y="{y + 4:.1f}" text-anchor="end">'
                           f"{html.escape(fmt(tick, unit))}</text>")  # fmt: skip
            else:
                out.append(f'<text x="{pad_l + pw + 6}" y="{y + 4:.1f}">'
                           f"{html.escape(fmt(tick, unit))}</text>")  # fmt: skip
    span = max(t1 - t0, 1)
    every = 15 if span > 60 else 5
    for tick in range(int(t0 // every + 1) * every, int(t1) + 1, every):
        x = pad_l + (tick - t0) / span * pw
        if pad_l + 24 < x < pad_l + pw - 24:  # a label cut at the edge reads as a wrong time
            label = time.strftime("%H:%M:%S", time.gmtime(tick))
            out.append(f'<text x="{x:.1f}" y="{h - 4}" text-anchor="middle">{label}</text>')
    for s in series:
        _ticks, lo, hi = axes["right" if s["axis"] == "right" else "left"]
        path, pen = [], "M"
        for t, v in s["points"]:
            if v is None:
                pen = "M"
                continue
            x = pad_l + (t - t0) / span * pw
            y = pad_t + ph - (v - lo) / (hi - lo) * ph
            path.append(f"{pen}{x:.1f},{y:.1f}")
            pen = "L"
        out.append(f'<path d="{" ".join(path)}" fill="none" stroke="{s["color"]}" '
                   'stroke-width="1.5"/>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def page(dash: dict, results: dict[int, list[dict]], t0: float, t1: float, note: str) -> str:
    """Long because it lays out every panel kind (rows, timeseries) with its chart and legend."""
    col = WIDTH / 24
    cells = []
    for panel in dash["panels"]:
        g = panel["gridPos"]
        x, y = g["x"] * col, HEADER + g["y"] * GRID_H
        w, h = g["w"] * col, g["h"] * GRID_H
        title = html.escape(panel.get("title", ""))
        if panel.get("type") == "row":
            cells.append(f'<div class="row" style="left:{x + 4:.0f}px;top:{y:.0f}px;'
                         f'width:{w - 8:.0f}px">{title}</div>')  # fmt: skip
            continue
        series = results.get(panel["id"], [])
        items = (
            "".join(
                f'<span><i style="background:{s["color"]}"></i>{html.escape(s["name"])}</span>'
                for s in series
            )
            or '<span class="none">no data</span>'
        )
        legend_h = 18 * max(1, math.ceil(len(series) / 4))
        svg = chart(series, t0, t1, int(w - 18), int(h - 8 - 26 - legend_h))
        cells.append(
            f'<div class="panel" style="left:{x + 4:.0f}px;top:{y + 4:.0f}px;width:{w - 8:.0f}px;'
            f'height:{h - 8:.0f}px"><div class="title">{title}</div>{svg}'
            f'<div class="legend">{items}</div></div>'
        )
    height = HEADER + max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"]) * GRID_H
    css = (
        "body{margin:0;background:#111217;color:#ccccdc;font:12px Inter,Helvetica,Arial,sans-serif}"
        ".head{position:absolute;left:8px;top:8px;right:8px}.head b{font-size:17px;color:#fff}"
        ".head div{color:#8e8e8e;margin-top:4px}"
        ".row{position:absolute;font-size:14px;font-weight:600;color:#d8d9da;padding-top:6px}"
        ".panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:2px;"
        "padding:0 8px;box-sizing:border-box;overflow:hidden}"
        ".title{font-weight:600;color:#d8d9da;height:26px;line-height:26px;white-space:nowrap}"
        "svg text{fill:#8e8e8e;font-size:10px}"
        ".legend{display:flex;flex-wrap:wrap;gap:2px 12px;font-size:11px}"
        ".legend i{display:inline-block;width:12px;height:3px;margin:0 5px 3px 0}"
        ".none{color:#f2495c}"
    )
    head = (f'<div class="head"><b>{html.escape(dash["title"])}</b><div>{html.escape(note)}</div>'
            "</div>")  # fmt: skip
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{css}</style></head>"
            f'<body style="height:{height}px">{head}{"".join(cells)}</body></html>')  # fmt: skip


# ------------------------------------------------------------------ the run


def collect(stack: PromStack, dash: dict, step_s: float) -> tuple[dict[int, list[dict]], float]:
    """{panel id: drawable series} from query_range over the run; the end time used."""
    end = time.time()
    variables = variable_values(dash, stack.prom, stack.started, end)
    out: dict[int, list[dict]] = {}
    for panel, target in dashboard_queries(dash):
        expr = substitute(target["expr"], variables, step_s, end - stack.started)
        props = overrides(panel).get(target.get("refId", ""), {})
        unit = props.get("unit", panel.get("fieldConfig", {}).get("defaults", {}).get("unit"))
        drawn = out.setdefault(panel["id"], [])
        for s in stack.prom.query_range(expr, stack.started, end, step_s):
            points = [(float(t), None if v in ("NaN", "+Inf", "-Inf") else float(v))
                      for t, v in s["values"]]  # fmt: skip
            drawn.append({"name": legend(target.get("legendFormat"), s["metric"]),
                          "points": points, "unit": unit, "color": COLORS[len(drawn) % 12],
                          "axis": props.get("custom.axisPlacement", "left")})  # fmt: skip
    return out, end


def screenshot(page_html: Path, png: Path, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile_dir:
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", f"--user-data-dir={profile_dir}",
                        "--hide-scrollbars", f"--screenshot={png}",
                        f"--window-size={WIDTH},{height}", page_html.as_uri()],
                       check=True, capture_output=True, timeout=120)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("dashboard-preview.png"))
    ap.add_argument("--html", type=Path, help="also keep the page here")
    ap.add_argument("--step", type=float, default=2.0, help="query step, seconds (default 2)")
    args = ap.parse_args()
    dash = json.loads(DASHBOARD.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        profile = yaml.safe_load(PROFILE.read_text())
        profile["run"] = {"stages": STAGES}
        moving = work / "dashboard_run.yaml"
        moving.write_text(yaml.safe_dump(profile))
        duration = sum(s["duration_s"] for s in STAGES)
        with PromStack(work, duration_s=duration, profile=moving) as stack:
            code = stack.wait_for_run(timeout_s=duration + 180)
            time.sleep(3)
            results, end = collect(stack, dash, args.step)
            run_log = stack.log("run").strip().splitlines()
        # the x axis starts where the run's numbers do (its start-up is not drawn)
        first = min((t for ss in results.values() for s in ss for t, v in s["points"]
                     if v is not None), default=stack.started)  # fmt: skip
        note = (f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(stack.started))} UTC, "
                f"{end - first:.0f} s of samples: Prometheus 2.42 (scrape 1 s) scraping agentload run "
                f"(dashboard_run.yaml, users 2 → 8 → 3 + an open-loop class, exit {code}) and "
                "the embedded simulator's vLLM /metrics (3 % HTTP 500 injected). Drawn by "
                "bench/dashboard_preview.py from the dashboard's own queries, not by Grafana.")  # fmt: skip
        html_path = args.html or work / "dashboard.html"
        html_path.write_text(page(dash, results, first - args.step, end, note))
        height = (
            HEADER + max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"]) * GRID_H
        )
        screenshot(html_path.resolve(), args.out.resolve(), height + 8)
    if shutil.which("pngquant"):  # 256 colours: a third of the size, no visible change
        subprocess.run(["pngquant", "--force", "--skip-if-larger", "--output", str(args.out),
                        str(args.out)], check=False, timeout=60)  # fmt: skip
    empty = [
        p["title"] for p in dash["panels"] if p.get("type") != "row" and not results.get(p["id"])
    ]
    print("\n".join(run_log[-3:]))
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB); panels without data: "
          f"{empty or 'none'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
