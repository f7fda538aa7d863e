"""Report tables for the agent shapes (workload.plan.shapes): the TTFT split and subagents.

``ttft_split_rows``: per traffic class, time to the first token of any kind (``ttft_ms``,
reasoning included) beside time to the first visible content (``ttft_content_ms``), and
the reasoning tokens asked for and reported. Shown only when some request asked for or
streamed reasoning. ``subagent_rows``: per class of subagent sessions, how many ran and
how long, next to the parents that waited for them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from workload.report.views import fmt_count, fmt_ms, fmt_num


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def ttft_split(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per class (ok streamed requests): TTFT any / content p50 and p95, reasoning counts."""
    acc: dict[str, dict[str, list[float]]] = {}
    asked = False
    for r in requests:
        if r.get("reasoning_requested") or r.get("reasoning_chunks"):
            asked = True
        if r.get("status") != "ok" or not isinstance(r.get("ttft_ms"), (int, float)):
            continue
        a = acc.setdefault(
            str(r.get("user_class") or ""),
            {"any": [], "content": [], "reasoned": [], "tokens": [], "asked": []},
        )
        a["any"].append(float(r["ttft_ms"]))
        if isinstance(r.get("ttft_content_ms"), (int, float)):
            a["content"].append(float(r["ttft_content_ms"]))
        a["reasoned"].append(1.0 if r.get("reasoning_chunks") else 0.0)
        if isinstance(r.get("reasoning_tokens"), int):
            a["tokens"].append(float(r["reasoning_tokens"]))
        a["asked"].append(float(r.get("reasoning_requested") or 0))
    if not asked:
        return []
    return [
        {
            "class": name,
            "requests": len(a["any"]),
            "ttft_p50_ms": _pct(a["any"], 50),
            "ttft_p95_ms": _pct(a["any"], 95),
            "content_p50_ms": _pct(a["content"], 50),
            "content_p95_ms": _pct(a["content"], 95),
            "reasoned_share": _mean(a["reasoned"]),
            "reasoning_asked_mean": _mean(a["asked"]),
            "reasoning_reported_mean": _mean(a["tokens"]),
        }
        for name, a in sorted(acc.items())
    ]


def ttft_split_rows(requests: Iterable[Mapping[str, Any]]) -> tuple[list[list[str]], str]:
    """The report's TTFT split table rows, and a note ("" when none is needed)."""
    table = ttft_split(requests)
    rows = [
        [
            t["class"],
            fmt_count(t["requests"]),
            fmt_ms(t["ttft_p50_ms"]),
            fmt_ms(t["ttft_p95_ms"]),
            fmt_ms(t["content_p50_ms"]),
            fmt_ms(t["content_p95_ms"]),
            fmt_num(100 * t["reasoned_share"], "{:.0f} %")
            if t["reasoned_share"] is not None
            else "-",
            fmt_num(t["reasoning_asked_mean"], "{:.0f}"),
            fmt_num(t["reasoning_reported_mean"], "{:.0f}"),
        ]
        for t in table
    ]
    quiet = [
        t["class"]
        for t in table
        if (t["reasoning_asked_mean"] or 0) > 0 and not t["reasoned_share"]
    ]
    note = (
        f"Reasoning was asked for but none streamed ({', '.join(quiet)}): the server ignores "
        "the budget (vLLM needs --reasoning-parser for thinking_token_budget; the simulator "
        "needs --sim-set reasoning_field=reasoning)."
        if quiet
        else ""
    )
    return rows, note


def subagent_rows(sessions: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """Per subagent class: sessions run, completed, mean steps, duration p50 / p95."""
    acc: dict[str, dict[str, list[float]]] = {}
    for s in sessions:
        if not s.get("parent_session"):
            continue
        a = acc.setdefault(str(s.get("user_class") or ""), {"dur": [], "steps": [], "ok": []})
        a["dur"].append(float(s.get("duration_ms") or 0.0))
        a["steps"].append(float(s.get("steps_done") or 0))
        a["ok"].append(1.0 if s.get("outcome") == "completed" else 0.0)
    return [
        [
            name,
            fmt_count(len(a["dur"])),
            fmt_count(int(sum(a["ok"]))),
            fmt_num(_mean(a["steps"]), "{:.1f}"),
            fmt_ms(_pct(a["dur"], 50)),
            fmt_ms(_pct(a["dur"], 95)),
        ]
        for name, a in sorted(acc.items())
    ]
