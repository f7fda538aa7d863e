"""Fit an agentload profile to an agent-session trace (a recording, or imported sessions).

One traffic class whose sessions look like the trace's: steps per session (empirical),
a system prompt the size of the prefix later sessions' first rounds reused (shared by
every session when there is one), the first user turn, output sizes, the think time
between rounds, and one catalog tool per recorded tool name with its recorded latency and
the result size (what the next round's prompt grew by, past the answer, per call). ``run.users`` is the mean number of sessions
in flight over the trace, ``run.duration_s`` its span plus one session.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from workload.errors import TraceError
from workload.plan.loading import validate_profile
from workload.plan.traces._agent import AgentTrace
from workload.plan.traces._fit import _hist

MAX_USERS = 1000


def _session_span(rounds: list[Any]) -> float:
    return max(0.0, rounds[-1].t_end + rounds[-1].tool_wait_s - rounds[0].t_start)


def _dist(values: list[float] | list[int], lo: int) -> dict[str, Any]:
    """Tokens: the trace's empirical histogram (whole tokens), or a constant."""
    if not values:
        return {"dist": "constant", "value": lo}
    return _hist([max(lo, round(v)) for v in values], lo)


def _float_dist(values: list[float], floor: float) -> dict[str, Any]:
    """Seconds: an empirical dist of the values (ms precision), or a constant."""
    vals = [round(max(floor, v), 3) for v in values]
    if not vals:
        return {"dist": "constant", "value": floor}
    if len(set(vals)) == 1:
        return {"dist": "constant", "value": vals[0]}
    return {"dist": "empirical", "values": vals}


def _tools(trace: AgentTrace) -> tuple[dict[str, Any], dict[str, float], float]:
    """(catalog, class weights, tool call probability) from the recorded tool calls."""
    lat: dict[str, list[float]] = {}
    result: dict[str, list[float]] = {}
    tool_rounds = non_final = 0
    for rs in trace.sessions.values():
        for k, r in enumerate(rs):
            if k < len(rs) - 1:
                non_final += 1
                tool_rounds += bool(r.tools)
            nxt = rs[k + 1] if k + 1 < len(rs) else None
            per = None
            if nxt is not None and r.tools:
                # what the prompt grew by past the answer: the results (whatever was reused)
                per = max(1.0, (nxt.input_tokens - r.input_tokens - r.output_tokens) / len(r.tools))
            for t in r.tools:
                lat.setdefault(t.name, []).append(
                    t.latency_s if t.latency_s is not None else t.wait_s
                )
                if per is not None:
                    result.setdefault(t.name, []).append(per)
    catalog = {
        name: {
            "description": f"Recorded tool {name}",
            "latency_s": _float_dist(lat[name], 0.0),
            "result_tokens": _dist(result.get(name, []), 1),
            "weight": len(lat[name]),
        }
        for name in sorted(lat)
    }
    weights = {name: float(len(lat[name])) for name in sorted(lat)}
    prob = tool_rounds / non_final if non_final else 0.0
    return catalog, weights, round(prob, 4)


def fit_agent_profile(
    trace: AgentTrace, *, name: str = "recorded", seed: int = 1
) -> dict[str, Any]:
    """A profile dict (validated) whose sessions have the trace's shape (see the module)."""
    roots = trace.roots
    if not roots:
        raise TraceError(f"{trace.source}: no sessions to fit")
    firsts = [trace.sessions[s][0] for s in roots]
    shared = int(statistics.median([r.prefix_tokens for r in firsts[1:]])) if len(firsts) > 1 else 0
    shared = min(shared, min(r.input_tokens for r in firsts) - 1)
    shared = max(0, shared)
    steps = [len(trace.sessions[s]) for s in roots]
    rounds = [r for s in roots for r in trace.sessions[s]]
    catalog, weights, prob = _tools(trace)
    starts = [trace.sessions[s][0].t_start for s in roots]
    spans = [_session_span(trace.sessions[s]) for s in roots]
    span = max(starts) - min(starts)
    total = max(s + d for s, d in zip(starts, spans, strict=True)) - min(starts)
    # the mean number of sessions in flight over the recording
    users = max(1, min(MAX_USERS, round(sum(spans) / total))) if total > 0 else len(roots)
    think = [r.think_s for r in rounds if r.round > 0 and r.think_s > 0]
    cls: dict[str, Any] = {
        "description": f"Sessions shaped like the {len(roots)} recorded in {trace.source}",
        "weight": 1,
        "steps": {"dist": "empirical", "values": sorted(set(steps)),
                  "weights": [steps.count(v) for v in sorted(set(steps))]},
        "max_steps": max(steps),
        "system_prompt": {"tokens": shared, "share": "global" if shared else "session"},
        "user_turn": _dist([r.input_tokens - shared for r in firsts], 1),
        "output": {"tokens": _dist([r.output_tokens for r in rounds], 1), "ignore_eos": True},
        "think_time_s": _float_dist(think, 0.0),
        "tools": weights,
        "tool_call_probability": prob,
        "tool_choice": "required" if prob >= 0.999 else "auto",
    }  # fmt: skip
    if not weights:
        del cls["tools"], cls["tool_choice"]
        cls["tool_call_probability"] = 0.0
    raw: dict[str, Any] = {
        "schema_version": 1,
        "name": name,
        "description": (
            f"Fitted from agent-session trace {trace.source}: {len(roots)} sessions, "
            f"{len(rounds)} rounds, {sum(len(r.tools) for r in rounds)} tool calls"
        ),
        "seed": seed,
        "run": {"users": users, "duration_s": max(1.0, round(span + max(spans, default=1.0), 1))},
        "tools": catalog,
        "classes": {"recorded": cls},
    }
    if not math.isfinite(raw["run"]["duration_s"]):
        raise TraceError(f"{trace.source}: times are not finite")
    validate_profile(raw, f"fit of {trace.source}")
    return raw
