"""The "Agents" tab in Locust's web UI: per-class and per-step tables, updated live.

Locust's React UI renders extra tabs from `template_args["extended_tabs"]`, one
table each, with the columns of `template_args["extended_tables"]`; it fills
them from `extended_stats` in the /stats/requests poll (every ~2 s). We add our
rows there from the runtime's aggregate: "All", each traffic class, then each
(class, step) as "class #step".
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("agentload")

TAB_KEY = "agents"

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
    """Add the tab to the start page and our rows to every stats poll."""
    from flask import request

    web_ui = environment.web_ui
    web_ui.template_args["extended_tabs"] = [{"title": "Agents", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in COLUMNS]}
    ]

    @web_ui.app.after_request
    def _agent_stats(response):  # type: ignore[no-untyped-def]
        if request.path != "/stats/requests" or response.status_code != 200:
            return response
        try:
            rt = getattr(environment, "agentload", None)
            rows = rows_for(rt.total.summary()) if rt is not None else []
            body = response.get_json(silent=True) or {}
            body["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
            response.set_data(json.dumps(body))
        except Exception:  # noqa: BLE001 - Locust's own statistics must keep updating
            log.exception("agentload: Agents tab rows failed")
        return response


def rows_for(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: overall, each class, then each (class, step) in step order."""
    from workload.report.console import step_rows, view_row

    rows = [_row("All", summary["overall"])]
    rows += [_row(name, v) for name, v in summary.get("by_class", {}).items()]
    rows += [view_row(label, v) | {"goodput": ""} for label, v in step_rows(summary)]
    return rows[:500]


def _row(label: str, view: dict[str, Any]) -> dict[str, Any]:
    from workload.report.console import view_row

    goodput = (view.get("sessions") or {}).get("goodput_per_min")
    return view_row(label, view) | {"goodput": "" if goodput is None else round(goodput, 1)}
