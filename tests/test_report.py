"""report: self-contained HTML, escaping, and a real render in headless Chromium."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.builders import write_run
from tests.stats_builders import req
from workload.analyze.verdict import compare_runs
from workload.cli.main import main as agentload_main
from workload.measure.stats import Aggregate
from workload.report.compare_report import write_compare_report
from workload.report.run_report import write_run_report

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def evil_run(tmp_path):
    fp = {
        "version": {"value": EVIL, "source": "/version"},
        "model": {"value": EVIL, "source": "/v1/models"},
    }
    return write_run(tmp_path / "a", model=EVIL, fingerprint=fp, labels={"team": EVIL})


@pytest.fixture
def comparison(tmp_path, evil_run):
    b = write_run(
        tmp_path / "b", run_id="run-b", noise_seed=2, ttft_scale=1.3, labels={"runner": "v2"}
    )
    return compare_runs(evil_run, b)


def _offline(html: str) -> None:
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)=["']?https?:""", html)
    assert "<img" not in html


def test_run_report_renders_and_escapes(evil_run):
    out = write_run_report(evil_run)
    assert out == evil_run / "report.html"
    html = out.read_text()
    _offline(html)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    # The headline first, then the charts, then the tables.
    order = ['id="headline"', 'id="charts"', 'id="summary"', 'id="tool-loop"', 'id="fingerprint"']
    assert [html.index(s) for s in order] == sorted(html.index(s) for s in order)
    assert html.count('<figure class="chart"') == 14
    for title in ("TTFT over time", "TPOT over time", "Cached ratio by session step",
                  "Spec-decode acceptance length by session step", "Session timeline (sample)",
                  "Spec-decode acceptance length by request kind",
                  "Cached ratio by idle gap before the step", "TTFT by idle gap before the step",
                  "Output throughput over time", "TTFT by session step",
                  "ITL distribution", "Spec-decode acceptance histogram", "Server KV cache usage",
                  "Server queue"):  # fmt: skip
        assert title in html
    # Numbers for people, definitions one hover away, the fingerprint collapsed.
    assert not re.search(r"\d\.\d+e[+-]\d", html)
    assert 'title="Spec-decode acceptance length, token-weighted' in html
    assert '<details class="fp">' in html and "fingerprint.model_runner" not in html
    assert "interactive" in html and "background" in html


def test_run_report_says_server_metrics_absent(tmp_path):
    run = write_run(tmp_path / "r", metrics=False)
    html = write_run_report(run, tmp_path / "x.html").read_text()
    assert "absent: no /metrics samples" in html


def test_compare_report_has_verdict_and_diff_on_top(tmp_path, comparison):
    html = write_compare_report(comparison, tmp_path / "cmp.html").read_text()
    _offline(html)
    assert "Verdict: worse" in html
    assert (
        html.index('id="verdict"') < html.index('id="fingerprint-diff"') < html.index('id="charts"')
    )
    assert "labels.runner" in html and "&lt;script&gt;" in html
    assert "A interactive" in html and "B interactive" in html


def test_main_report(tmp_path, evil_run, capsys):
    assert agentload_main(["report", str(evil_run), "--out", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").exists()
    capsys.readouterr()
    assert agentload_main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip


def _browser_or_skip():
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


@pytest.mark.browser
def test_reports_render_in_chromium_without_console_errors(tmp_path, evil_run, comparison):
    sync_playwright = _browser_or_skip()
    pages = [write_run_report(evil_run), write_compare_report(comparison, tmp_path / "cmp.html")]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for path in pages:
                page = browser.new_page()
                problems: list[str] = []
                page.on(
                    "console",
                    lambda m, pr=problems: (
                        pr.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
                    ),
                )
                page.on("pageerror", lambda e, pr=problems: pr.append(f"pageerror: {e}"))
                page.on("dialog", lambda d, pr=problems: (pr.append("dialog opened"), d.dismiss()))
                page.on(
                    "request",
                    lambda r, pr=problems: (
                        pr.append(f"network: {r.url}")
                        if not r.url.startswith(("file:", "data:"))
                        else None
                    ),
                )
                page.goto(path.resolve().as_uri())
                page.wait_for_load_state("load")
                assert problems == [], f"{path.name}: {problems}"
                charts = page.locator("figure.chart svg[role=img]")
                assert charts.count() >= 7
                box = charts.first.bounding_box()
                assert box and box["width"] > 200 and box["height"] > 80
                assert page.locator("figure.chart path.series").count() > 0
                # The malicious model name is shown as text, not run.
                assert EVIL in page.inner_text("body") or path.name == "cmp.html"
                page.close()
        finally:
            browser.close()


def test_run_report_of_an_agent_run_says_why_it_failed(tmp_path):
    from tests.report_runs import agent_run

    html = write_run_report(agent_run(tmp_path / "r")).read_text()
    _offline(html)
    head = html[html.index('id="headline"') : html.index('id="charts"')]
    assert "exit 1" in head and "error ratio 6.0 % &gt; 5.0 %" in head
    assert "overall tool_loop_failure_ratio 15.4 % &gt; 5.0 %" in head
    assert (
        "planned" in head
        and "returned by the server" in head
        and "tool_loop_failure: malformed tool call" in head
    )
    assert "0.15384615384615385" not in html
    tool = html[html.index('id="tool-loop"') :]
    assert "First tool-loop failures" in tool and "read_file" in tool
    assert 'id="idle-gap"' in html and "30–60 s" in html


ESC = "m\x1b[2J\x1b]0;pwned\x07x\x00"


def test_terminal_escapes_from_server_strings_never_reach_the_pages(tmp_path):
    fp = {"version": {"value": ESC, "source": "/version"}}
    a = write_run(tmp_path / "a", model=ESC, fingerprint=fp, labels={"team": ESC})
    b = write_run(tmp_path / "b", run_id="run-b", noise_seed=2, model=ESC)
    for page in (
        write_run_report(a),
        write_compare_report(compare_runs(a, b), tmp_path / "c.html"),
    ):
        html = page.read_text()
        assert "\x1b" not in html and "\x07" not in html and "\x00" not in html
        assert "mx" in html  # the text around the escapes stays


@pytest.mark.parametrize(
    ("note", "expected"),
    [
        (
            {"source": "files", "itl": "partial", "itl_ok_requests": 30, "ok_requests": 50},
            "ITL is partial: its percentiles count the gaps of 30 of 50 successful requests",
        ),
        ({"source": "files", "itl": "none", "itl_ok_requests": 0}, "ITL is unavailable"),
        ({"source": "files", "itl": "complete"}, None),
        ({"source": "memory", "itl": "complete"}, None),
        ("not a mapping", None),
    ],
)
def test_run_report_says_when_a_rebuilt_summary_holds_part_of_the_itl(tmp_path, note, expected):
    run = write_run(tmp_path / "r")
    meta = json.loads((run / "run.json").read_text())
    meta["reconcile"] = note
    (run / "run.json").write_text(json.dumps(meta))
    html = write_run_report(run, tmp_path / "x.html").read_text()
    if expected is None:
        assert "ITL is partial" not in html and "ITL is unavailable" not in html
    else:
        assert f"warning: {expected}" in html


def test_run_report_says_why_itl_has_no_figure(tmp_path):
    """A run whose answers all came in one chunk: the summary's ITL cells are "-", and the
    page says under the table that there were no inter-token gaps."""
    run = write_run(tmp_path / "run")
    meta = json.loads((run / "run.json").read_text())
    for gaps, said in (([10.0, 12.0], False), ([], True)):
        agg = Aggregate()
        for i in range(3):
            agg.add_request(req(session_id=f"s{i}", itl_gaps_ms=gaps))
        meta["summary"] = agg.summary(60.0)
        (run / "run.json").write_text(json.dumps(meta))
        page = write_run_report(run).read_text()
        note = "ITL -: no inter-token gaps (every answer came in one chunk, or none was streamed)"
        assert (note in page) is said
    assert re.search(r"<td>-</td>\s*<td>-</td>", page)  # ITL p50, p95
