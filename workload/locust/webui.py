"""agentload in Locust's web UI: the "Agents" table, the "Agent charts" tab, the start form.

Locust's React UI renders extra tabs from `template_args["extended_tabs"]`, one
table each, with the columns of `template_args["extended_tables"]`; it fills
them from `extended_stats` in the /stats/requests poll (every ~2 s). We add our
rows there from the runtime's aggregate: "All", each traffic class, then each
(class, step) as "class #step".

The "Agent charts" tab is a one-cell table that `webui.js` (served here, and
loaded by a script tag added to Locust's index page) fills with per-class
charts drawn from `/agentload/history`: points sampled every `HISTORY_EVERY_S`
on the master from the running aggregate (`workload.measure.window`). The same
script folds each class's step rows in the Agents table (collapsed by default).

At start we print the UI's URL and put the run's defaults (the profile's users,
spawn rate and run time) into the start form.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import gevent
from flask import Response, jsonify, request

from workload.errors import AgentloadError
from workload.locust.options import spec_from_options
from workload.measure.window import AgentHistory
from workload.report.console import step_rows, view_row

log = logging.getLogger("agentload")

TAB_KEY = "agents"
CHARTS_KEY = "agent_charts"
CHARTS_TITLE = "Agent metrics per class over time (each point: the last 5 s window)"
HISTORY_EVERY_S = 5.0
SCRIPT = Path(__file__).with_name("webui.js")

# (row key, column title); units in the title, values as `workload.report.console.view_row` rounds them.
COLUMNS = [
    ("scope", "Class / step"),
    ("requests", "Requests"),
    ("errors", "Errors"),
    ("ttft_p50", "TTFT p50 (ms)"),
    ("ttft_p95", "TTFT p95 (ms)"),
    ("itl_p95", "ITL p95 (ms)"),
    ("tpot_p50", "TPOT p50 (ms)"),
    ("e2e_p95", "E2E p95 (ms)"),
    ("cached_ratio", "Cached ratio"),
    ("accept_len", "Spec accept len"),
    ("draft_accept", "Draft accept rate"),
    ("sessions_ok", "Sessions done"),
    ("sessions_failed", "Sessions failed"),
    ("tool_loop_failures", "Tool-loop failures"),
    ("goodput", "Goodput (sessions/min)"),
    ("request_goodput", "Good requests (share)"),
    ("session_goodput", "Good sessions (share)"),
]


def install(environment: Any) -> None:
    """Add our tabs, their rows in every stats poll, the history endpoint and the script."""
    web_ui = environment.web_ui
    environment.agentload_history = AgentHistory()
    web_ui.template_args["extended_tabs"] = [
        {"title": "Agents", "key": TAB_KEY},
        {"title": "Agent charts", "key": CHARTS_KEY},
    ]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in COLUMNS]},
        {"key": CHARTS_KEY, "structure": [{"key": "charts", "title": CHARTS_TITLE}]},
    ]

    @web_ui.app.route("/agentload/history")
    def _history():  # type: ignore[no-untyped-def]
        return jsonify(environment.agentload_history.to_dict())

    @web_ui.app.route("/agentload/webui.js")
    def _script():  # type: ignore[no-untyped-def]
        return Response(SCRIPT.read_text(), mimetype="text/javascript")

    @web_ui.app.after_request
    def _add_script(response):  # type: ignore[no-untyped-def]
        # The start page only (Locust's downloadable HTML report must stay self-contained).
        index = (request.endpoint or "").rpartition(".")[2] == "index"
        if not index or response.mimetype != "text/html" or response.status_code != 200:
            return response
        page = response.get_data(as_text=True)
        if "window.templateArgs" in page and "agentload/webui.js" not in page:
            tag = '<script src="./agentload/webui.js"></script>'
            response.set_data(page.replace("</body>", tag + "</body>", 1))
        return response

    @web_ui.app.after_request
    def _agent_stats(response):  # type: ignore[no-untyped-def]
        if request.path != "/stats/requests" or response.status_code != 200:
            return response
        try:
            rt = getattr(environment, "agentload", None)
            rows = rows_for(rt.total.summary()) if rt is not None else []
            body = response.get_json(silent=True) or {}
            body["extended_stats"] = [
                {"key": TAB_KEY, "data": rows},
                {"key": CHARTS_KEY, "data": [{"charts": ""}]},
            ]
            response.set_data(json.dumps(body))
        except Exception:  # noqa: BLE001 - Locust's own statistics must keep updating
            log.exception("agentload: Agents tab rows failed")
        return response


def rows_for(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: overall, then each class followed by its (class, step) rows in step order
    (webui.js folds a class's step rows under it)."""
    steps: dict[str, list[dict[str, Any]]] = {}
    for label, v in step_rows(summary):
        steps.setdefault(label.rpartition(" #")[0], []).append(view_row(label, v) | {"goodput": ""})
    rows = [_row("All", summary["overall"])]
    for name, v in summary.get("by_class", {}).items():
        rows += [_row(name, v), *steps.get(name, [])]
    return rows[:500]


def _row(label: str, view: dict[str, Any]) -> dict[str, Any]:
    goodput = (view.get("sessions") or {}).get("goodput_per_min")
    return view_row(label, view) | {"goodput": "" if goodput is None else round(goodput, 1)}


def web_url(opts: Any) -> str:
    """The address to open: Locust's --web-host (all interfaces: 127.0.0.1) and --web-port."""
    host = str(getattr(opts, "web_host", "") or "")
    if host in ("", "*", "0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    scheme = (
        "https" if getattr(opts, "tls_cert", None) and getattr(opts, "tls_key", None) else "http"
    )
    base = str(getattr(opts, "web_base_path", "") or "")
    return f"{scheme}://{host}:{getattr(opts, 'web_port', 8089)}{base}"


def announce(environment: Any) -> None:
    """Print where the UI is (`agentload run --web` hides Locust's own log line)."""
    print(f"agentload: web UI at {web_url(environment.parsed_options)}", flush=True)


def prefill_form(environment: Any) -> None:
    """Start-form defaults from the run: the profile's users, spawn rate and run time,
    unless Locust's command line gave them. A bad profile is reported when a test starts."""
    opts = environment.parsed_options
    try:
        spec = spec_from_options(opts, environment.host or "", 1)
    except AgentloadError:
        return
    if getattr(opts, "run_time", None) is None:
        opts.run_time = max(1, int(round(spec.duration_s)))
    if getattr(opts, "num_users", None) is None:
        opts.num_users = spec.users
    if getattr(opts, "spawn_rate", None) is None:
        opts.spawn_rate = spec.spawn_rate


def start_history(environment: Any, rt: Any) -> None:
    """Sample the run's per-class window metrics for the charts while the test runs."""
    history = environment.agentload_history = AgentHistory()
    history.sample(rt.total, time.time())

    def loop() -> None:
        while True:
            gevent.sleep(HISTORY_EVERY_S)
            try:
                history.sample(rt.total, time.time())
            except Exception:  # noqa: BLE001 - the charts must never stop the run
                log.exception("agentload: chart sample failed")

    rt.history_sampler = gevent.spawn(loop)


def stop_history(environment: Any, rt: Any) -> None:
    """Stop sampling after one last point (the points stay on the charts until the next start)."""
    sampler = getattr(rt, "history_sampler", None)
    if sampler is None:
        return
    sampler.kill(block=False)
    rt.history_sampler = None
    environment.agentload_history.sample(rt.total, time.time())
