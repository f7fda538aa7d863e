"""The run report in headless Chromium: the headline, the tool-loop section and the charts render
at desktop (1280 px) and narrow (420 px) widths, with no horizontal overflow of the headline.

Screenshots go to pytest's tmp dir (AGENTLOAD_SCREENSHOTS=DIR copies them there too).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.report_runs import agent_run
from workload.report.run_report import write_run_report

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip


def _playwright_or_skip():  # type: ignore[no-untyped-def]
    required = os.environ.get("AGENTLOAD_REQUIRE_BROWSER") == "1"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            pytest.fail("AGENTLOAD_REQUIRE_BROWSER=1 but playwright is not installed")
        pytest.skip("playwright not installed")
    if not CHROMIUM.exists():
        if required:
            pytest.fail(f"AGENTLOAD_REQUIRE_BROWSER=1 but {CHROMIUM} is missing")
        pytest.skip(f"{CHROMIUM} missing")
    return sync_playwright


@pytest.mark.parametrize("width", [1280, 420])
def test_report_headline_tool_loop_and_charts_render(tmp_path, width):
    sync_playwright = _playwright_or_skip()
    report = write_run_report(agent_run(tmp_path / "run"))
    shot = tmp_path / f"report-{width}.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            problems: list[str] = []
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on(
                "request",
                lambda r: None if r.url.startswith(("file:", "data:")) else problems.append(r.url),
            )
            page.goto(report.resolve().as_uri())
            page.wait_for_load_state("load")
            page.screenshot(path=str(shot), full_page=True)
            keep = os.environ.get("AGENTLOAD_SCREENSHOTS")
            if keep:
                shutil.copy(shot, Path(keep) / f"report13-{width}.png")
            assert problems == []
            head = page.locator("#headline")
            assert head.is_visible()
            assert "exit 1" in head.inner_text() and "error ratio" in head.inner_text()
            box = head.bounding_box()
            assert box and box["y"] < 200  # the headline comes first
            overflow = page.evaluate(
                "() => { const h = document.querySelector('#headline');"
                " return [h.scrollWidth, h.clientWidth, document.documentElement.scrollWidth,"
                " window.innerWidth]; }"
            )
            assert overflow[0] <= overflow[1] + 1, f"headline overflows: {overflow}"
            assert overflow[2] <= overflow[3] + 1, f"page overflows horizontally: {overflow}"
            tool = page.locator("#tool-loop")
            tool.scroll_into_view_if_needed()
            assert tool.is_visible() and "malformed tool call" in tool.inner_text()
            chart = page.locator("figure.chart svg[role=img]").first
            chart.scroll_into_view_if_needed()
            cb = chart.bounding_box()
            assert chart.is_visible() and cb and cb["width"] > 200 and cb["height"] > 80
            assert page.locator("figure[data-kind=timeline] rect").count() > 0
            # "overall" stays on one line in the summary table
            cell = page.locator("table.summary td", has_text="overall").first
            assert cell.bounding_box()["height"] < 30  # type: ignore[index]
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000


def _open_loop_run(path: Path) -> Path:
    """agent_run with what newer runs record: goodput, a not-judged SLO, stages, arrivals."""
    import json

    run = agent_run(path)
    meta = json.loads((run / "run.json").read_text())
    meta["slo_results"].append(
        {"class_name": "background", "metric": "e2e_p95_ms", "threshold": 5000, "observed": None,
         "passed": True, "unit": "ms", "bound": "<=", "skipped": True, "judged": False,
         "status": "not judged", "message": ""}
    )  # fmt: skip
    stages = [
        {"index": i, "start_s": 60.0 * i, "end_s": 60.0 * (i + 1), "ramp_s": 0.0,
         "arrival_rate": rate, "t_start": 60.0 * i, "t_end": 60.0 * (i + 1), "requests": 100 + i,
         "errors": i, "ttft_p95_ms": 300.0 + i, "tpot_p95_ms": 20.0, "goodput_ratio": 0.9,
         "goodput_per_s": 1.5, "sessions_scheduled": 30, "lateness": {"p99_s": 0.02}}
        for i, rate in enumerate((0.5, 2.0))
    ]  # fmt: skip
    meta["stages"] = {"dimension": "arrival_rate", "t0": 0.0, "stages": stages}
    meta["summary"] = None  # rebuilt from the rows below, which carry the goodput counters
    (run / "run.json").write_text(json.dumps(meta))
    return run


@pytest.mark.parametrize("width", [1280, 420])
def test_report_goodput_not_judged_slo_and_stage_table_render(tmp_path, width):
    sync_playwright = _playwright_or_skip()
    report = write_run_report(_open_loop_run(tmp_path / "run"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(report.resolve().as_uri())
            page.wait_for_load_state("load")
            shot = tmp_path / f"report-stages-{width}.png"
            page.screenshot(path=str(shot), full_page=True)
            keep = os.environ.get("AGENTLOAD_SCREENSHOTS")
            if keep:
                shutil.copy(shot, Path(keep) / f"report13-stages-{width}.png")
            goodput = page.locator("#goodput")
            assert goodput.is_visible()
            assert "of requests" in goodput.inner_text() and "met every SLO" in goodput.inner_text()
            counts = page.locator("#slo-counts").inner_text()
            assert "1 met" in counts and "1 violated" in counts and "1 not judged" in counts
            status = page.locator("#slo td.slo-status").all_inner_texts()
            assert sorted(status) == ["VIOLATED", "met", "not judged"]
            stages = page.locator("#stages")
            stages.scroll_into_view_if_needed()
            assert stages.is_visible() and stages.locator("tr").count() == 3
            assert "2 /s" in stages.inner_text()
            good = page.locator("table.summary th", has_text="good req.")
            assert good.count() == 1
            width_now = page.evaluate("() => document.documentElement.scrollWidth")
            assert width_now <= width + 1, "page overflows horizontally"
        finally:
            browser.close()
