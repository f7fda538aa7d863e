"""The web UI in a real browser: start form fields, the live "Agents" tab, stop and restart,
the printed URL, the form prefilled from the profile, a fresh run directory per start,
the "Agent charts" tab and the folded per-step rows.

Locust runs as a child process (its own process group) against the simulator, on
127.0.0.1 only; headless Debian chromium drives the page. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests" / "fixtures" / "e2e_chat.yaml"
SCREENSHOT = Path("/tmp/agents_tab.png")
# Once per session, outside pytest's tmp dir, for a person to look at.
SHARED_SHOTS = Path(os.environ.get("AGENTLOAD_SCREENSHOTS", "/tmp"))


def _need_browser() -> None:
    missing = None
    if not CHROMIUM.exists():
        missing = f"{CHROMIUM} is missing (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "python playwright is not installed"
    if missing is None:
        return
    if os.environ.get("AGENTLOAD_REQUIRE_BROWSER") == "1":
        pytest.fail(f"AGENTLOAD_REQUIRE_BROWSER=1 but {missing}")
    pytest.skip(missing)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except OSError:
        return 0


def _post(url: str, form: dict[str, str] | None = None) -> dict[str, Any]:
    data = urllib.parse.urlencode(form or {}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=5) as r:
        return json.loads(r.read() or b"{}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class LocustWeb:
    """`locust` with its web UI on a free loopback port, in its own process group."""

    def __init__(self, host: str, out: Path, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, "-m", "locust", "-f", str(REPO / "workload/locust/locustfile.py"),
               "--host", host, "--web-host", "127.0.0.1", "--web-port", str(self.port),
               "--agent-profile", str(PROFILE), "--seed", "3", "--out", str(out),
               "--scrape-interval", "1"]  # fmt: skip
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"locust exited {self.proc.returncode}:\n{self.output()}")
        return _get(self.url + "/") == 200

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


@pytest.fixture
def locust_web(tmp_path: Path) -> Iterator[LocustWeb]:
    _need_browser()
    from workload.sim.launcher import SimProcess

    sim = SimProcess(preset="fast")
    sim.start()
    web = None
    try:
        web = LocustWeb(sim.url, tmp_path / "run", tmp_path / "locust.log")
        _wait_for("the Locust web UI", web.ready, 30)
        yield web
    finally:
        if web is not None:
            web.stop()
        sim.stop()


def _agents_table(page: Any) -> dict[str, dict[str, str]]:
    """The Agents tab's table as {row label: {column title: cell text}}."""
    cells = page.evaluate(
        """() => {
            const t = document.querySelector('table');
            if (!t) return null;
            const head = [...t.querySelectorAll('thead th')].map(th => th.textContent.trim());
            const rows = [...t.querySelectorAll('tbody tr')].map(
                tr => [...tr.querySelectorAll('td')].map(td => td.textContent.trim()));
            return {head, rows};
        }"""
    )
    if not cells or not cells["rows"]:
        return {}
    return {r[0]: dict(zip(cells["head"], r, strict=False)) for r in cells["rows"] if r}


def _all_requests(page: Any) -> int:
    row = _agents_table(page).get("All")
    return int(row["Requests"]) if row and row["Requests"].isdigit() else 0


def _start_from_form(page: Any, seed: str) -> None:
    page.fill("input[name=userCount]", "4")
    page.fill("input[name=spawnRate]", "4")
    seed_box = page.locator("input[name=seed]")
    if not seed_box.is_visible():
        page.get_by_text("Custom parameters").click()
    seed_box.fill(seed)
    page.get_by_role("button", name="Start").click()


def test_agents_tab_live_seed_from_form_and_restart(locust_web: LocustWeb, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    web = locust_web
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            page.set_default_timeout(10_000)
            page.goto(web.url + "/")

            # The start form carries our options, pre-filled from the command line.
            page.get_by_text("Custom parameters").click()
            assert page.locator("input[name=agentProfile]").input_value() == str(PROFILE)
            assert page.locator("input[name=seed]").input_value() == "3"
            assert "quickstart" in page.get_by_text("Agent Profile").first.inner_text()
            # One profile field: Locust's own "Profile" (a run-grouping label) is hidden.
            page.get_by_text("Advanced options").click()
            page.locator("input[name=runTime]").wait_for()
            assert page.locator("input[name=profile]").is_hidden()
            profile_labels = page.evaluate(
                """() => [...document.querySelectorAll('label')]
                    .filter(l => l.offsetParent !== null && /\\bProfile\\b/.test(l.textContent))
                    .map(l => l.textContent.trim().split(' (')[0])"""
            )
            assert profile_labels == ["Agent Profile"]

            _start_from_form(page, seed="7")
            page.get_by_role("tab", name="Agents").click()
            first = _wait_for("rows in the Agents tab", lambda: _all_requests(page), 40)
            want = {"All", "chat", "chat #1", "chat #2", "chat #3"}
            _wait_for("every step's row", lambda: want <= set(_agents_table(page)), 10)
            table = _agents_table(page)
            assert "TTFT p95 (ms)" in table["All"] and table["All"]["Errors"] == "0"
            # Live: the UI's own poll brings growing counts without a reload.
            _wait_for("the request count to grow", lambda: _all_requests(page) > first, 10)
            page.screenshot(path=str(SCREENSHOT), full_page=True)

            page.get_by_role("button", name="Stop").click()
            run1 = _wait_for(
                "run.json after stop", lambda: _read_json(tmp_path / "run" / "run.json"), 15
            )
            assert run1["seed"] == 7  # from the form, not the command line's 3
            assert run1["summary"]["overall"]["requests"] > 0
            assert "seed 7" in web.output()

            # Start again from the UI with another seed: a new run in its own directory.
            page.get_by_role("button", name="New").click()
            _start_from_form(page, seed="9")
            page.get_by_role("tab", name="Agents").click()
            _wait_for("rows after the restart", lambda: _all_requests(page), 20)
        finally:
            browser.close()

    _post(web.url + "/stop")
    run2_dir = _wait_for("the restarted run's run.json",
                         lambda: [p.parent for p in tmp_path.glob("run-*/run.json")], 15)[0]  # fmt: skip
    run2 = _read_json(run2_dir / "run.json")
    assert run2["seed"] == 9 and run2["run_id"] != run1["run_id"]
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    assert len(lines) == run1["summary"]["overall"]["requests"]  # nothing appended by run 2

    # A bad profile in the form is one error line, and the UI stays up for the next try.
    _post(
        web.url + "/swarm",
        {"user_count": "1", "spawn_rate": "1", "agent_profile": "no-such-profile"},
    )
    _wait_for("the setup error line", lambda: "agentload: error:" in web.output(), 10)
    _wait_for("the failed test to stop", lambda: _state(web.url) == "stopped", 10)
    assert web.proc.poll() is None and _get(web.url + "/") == 200


def _state(url: str) -> str:
    with urllib.request.urlopen(url + "/stats/requests", timeout=5) as r:
        return str(json.loads(r.read())["state"])


PROFILE_WITH_RUN = """\
schema_version: 1
description: web UI test profile with run defaults
seed: 5
run: {users: 3, spawn_rate: 3, duration_s: 47}
classes:
  chat:
    weight: 1
    steps: 3
    system_prompt: {tokens: 64, share: global}
    user_turn: 32
    output: {tokens: 5}
    think_time_s: 0.1
  coder:
    weight: 1
    steps: 2
    system_prompt: {tokens: 64, share: global}
    user_turn: 32
    output: {tokens: 5}
    think_time_s: 0.1
"""


class AgentloadWeb(LocustWeb):
    """`agentload run --web` (embedded simulator, no --out) in `cwd`, its own process group."""

    def __init__(self, profile: Path, cwd: Path, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, "-m", "workload.cli", "run", "--web", "--web-port", str(self.port),
               "--profile", str(profile), "--sim-preset", "fast", "--scrape-interval", "1"]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(REPO))
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)  # fmt: skip


def _visible_rows(page: Any) -> list[str]:
    return page.evaluate(
        """() => [...document.querySelectorAll('tbody tr')]
            .filter(tr => tr.offsetParent !== null)
            .map(tr => tr.querySelector('td').textContent.trim())"""
    )


def _charts_drawn(page: Any) -> int:
    """Points drawn in the first chart of the charts tab (one line per class)."""
    return int(page.evaluate(
        "() => document.querySelectorAll('#agentload-charts figure:first-of-type circle').length"
    ))  # fmt: skip


def test_agentload_run_web_url_prefill_fresh_out_charts_and_folding(tmp_path: Path) -> None:
    _need_browser()
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "two.yaml"
    profile.write_text(PROFILE_WITH_RUN)
    web = AgentloadWeb(profile, tmp_path, tmp_path / "agentload.log")
    try:
        _wait_for("the web UI", web.ready, 60)
        assert f"agentload: web UI at http://127.0.0.1:{web.port}" in web.output()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            try:
                page.set_default_timeout(10_000)
                page.goto(web.url + "/")
                # The profile's run block fills the form; Out is blank (a new directory per run).
                assert page.locator("input[name=userCount]").input_value() == "3"
                assert page.locator("input[name=spawnRate]").input_value() == "3"
                assert page.locator("input[name=runTime]").input_value() == "47"
                page.get_by_text("Custom parameters").click()
                assert page.locator("input[name=out]").input_value() == ""

                page.get_by_role("button", name="Start").click()
                page.get_by_role("tab", name="Agents").click()
                _wait_for("rows in the Agents tab", lambda: _all_requests(page), 40)
                want = {"All", "chat", "coder", "chat #1", "chat #3", "coder #2"}
                _wait_for("every step's row", lambda: want <= set(_agents_table(page)), 10)
                # Step rows are folded away until their class row is clicked.
                _wait_for("folded steps", lambda: "chat #1" not in _visible_rows(page), 5)
                assert {"All", "chat", "coder"} <= set(_visible_rows(page))
                page.locator("tr[data-al-fold]", has_text="chat").first.click()
                _wait_for("chat's steps shown", lambda: "chat #2" in _visible_rows(page), 5)
                assert _visible_rows(page) == [
                    "All",
                    "chat",
                    "chat #1",
                    "chat #2",
                    "chat #3",
                    "coder",
                ]
                for shot in (tmp_path / "agents_open.png", SHARED_SHOTS / "web13-agents-open.png"):
                    page.screenshot(path=str(shot), full_page=True)
                page.locator("tr[data-al-fold]", has_text="chat").first.click()
                _wait_for("chat's steps folded", lambda: "chat #2" not in _visible_rows(page), 5)

                # The charts tab: one line per class in each chart, from the sampled history.
                page.get_by_role("tab", name="Agent charts").click()
                _wait_for("three points per chart line", lambda: _charts_drawn(page) >= 2 * 3, 30)
                titles = page.locator("#agentload-charts figcaption").all_inner_texts()
                assert titles[:2] == ["TTFT p95 (ms)", "TPOT p95 (ms)"] and len(titles) == 6
                for shot in (
                    tmp_path / "agent_charts.png",
                    SHARED_SHOTS / "web13-agent-charts.png",
                ):
                    page.screenshot(path=str(shot), full_page=True)

                page.get_by_role("button", name="Stop").click()
                first = _wait_for(
                    "the first run.json", lambda: list(tmp_path.glob("runs/*/run.json")), 20
                )
                # A second start from the form: a new run id and directory.
                # Writing the run's artifacts holds the UI's process for a moment.
                _wait_for("the test to stop", lambda: _state(web.url) == "stopped", 60)
                page.get_by_role("button", name="New").click(timeout=30_000)
                page.get_by_text("Custom parameters").click()
                assert page.locator("input[name=out]").input_value() == ""
                page.get_by_role("button", name="Start").click()
                page.get_by_role("tab", name="Agents").click()
                _wait_for("rows after the restart", lambda: _all_requests(page), 20)
            except BaseException:
                page.screenshot(path=str(SHARED_SHOTS / "web13-failed.png"), full_page=True)
                raise
            finally:
                browser.close()
        _post(web.url + "/stop")
        runs = _wait_for("the second run.json",
                         lambda: (r := list(tmp_path.glob("runs/*/run.json"))) and len(r) >= 2 and r, 20)  # fmt: skip
        ids = {_read_json(p)["run_id"] for p in runs}
        assert len(ids) == 2 and first[0] in runs
    finally:
        web.stop()
        print(web.output()[-5000:])  # shown when the test fails


def _history_points(url: str) -> int:
    with urllib.request.urlopen(url + "/agentload/history", timeout=5) as r:
        return len(json.loads(r.read())["points"])
