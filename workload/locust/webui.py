"""The "Agents" tab in Locust's web UI: per-class and per-step tables, updated live.

Locust's React UI renders extra tabs from `template_args["extended_tabs"]` and
fills their tables from `extended_stats` in the /stats/requests poll; we add
our rows there from the runtime's aggregate.
"""

from __future__ import annotations

import json
from typing import Any

TAB_KEY = "agents"

COLUMNS = [
    ("scope", "Class / step"),
    ("requests", "Requests"),
    ("errors", "Errors"),
    ("ttft_p50", "TTFT p50 ms"),
    ("ttft_p95", "TTFT p95 ms"),
    ("itl_p95", "ITL p95 ms"),
    ("tpot_p50", "TPOT p50 ms"),
    ("e2e_p95", "E2E p95 ms"),
    ("cached_ratio", "Cached ratio"),
    ("accept_len", "Spec accept len"),
    ("draft_accept", "Draft accept rate"),
    ("sessions_ok", "Sessions done"),
    ("sessions_failed", "Sessions failed"),
    ("tool_loop_failures", "Tool-loop failures"),
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
        rt = getattr(environment, "agentload", None)
        rows = rows_for(rt.total.summary()) if rt is not None else []
        body = response.get_json(silent=True) or {}
        body["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
        response.set_data(json.dumps(body))
        return response


def rows_for(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: overall, each class, then each (class, step)."""
    from workload.stats import view_row

    rows = [view_row("All", summary["overall"])]
    rows += [view_row(name, v) for name, v in summary.get("by_class", {}).items()]
    rows += [view_row(label, v) for label, v in summary.get("by_step", {}).items()]
    return rows[:500]
