"""`agentload run --trace` with agent sessions: the replay plan and its fidelity report.

Every process re-reads the trace from the spec (deterministic), as request traces are.
The plan: read (``--limit`` = top-level sessions, with their subagents), hold each round
to the server's ``max_model_len`` (refused, or clipped with ``--trace-clip``), and start
the top-level sessions at their recorded offsets (``workload.plan.traces._agent_replay``).

The report block (``summary.trace``, ``mode: agent-sessions``) says how faithful the
replay was: rounds planned and sent, rounds whose prompt the server counted at exactly
the recorded input tokens, the cached tokens the server reported next to the recorded
reused prefix, each session's recorded, planned (recorded waits scaled) and replayed
duration, and the cached ratio against the idle time since the session's previous
request ended (when a prefix cache forgets a paused agent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workload.errors import SetupError, UsageError
from workload.plan.traces import AgentTrace, ContextFit, ReplayOptions, fit_rounds
from workload.plan.traces import planned_duration_s as planned
from workload.run.spec import AGENT_CAP_FACTOR, RunSpec, read_run_agent_trace

PER_SESSION_SHOWN = 100  # sessions listed one by one in run.json (all are counted)
IDLE_BINS_S = (1.0, 5.0, 30.0, 120.0, 600.0)  # cached ratio vs idle gap: bin upper edges


@dataclass(frozen=True)
class AgentReplay:
    """The sessions a run replays, how they fit the context, and the replay options."""

    trace: AgentTrace
    fit: ContextFit
    options: ReplayOptions


def options_of(spec: RunSpec, model: str = "") -> ReplayOptions:
    """The replay options a spec asks for."""
    return ReplayOptions(
        model=model or spec.model,
        seed=spec.seed,
        speedup=spec.speedup,
        max_gap_s=spec.max_gap_s,
    )


def load_agent_replay(spec: RunSpec, max_model_len: int | None, model: str = "") -> AgentReplay:
    """The replay plan of a spec whose --trace holds agent sessions."""
    raw = read_run_agent_trace(spec.trace, spec.trace_format, spec.trace_limit, spec.on_bad_line)
    trace, too_long, largest = fit_rounds(raw, max_model_len, clip=spec.trace_clip)
    fit = ContextFit(max_model_len, too_long, largest, spec.trace_clip and bool(too_long))
    return AgentReplay(trace, fit, options_of(spec, model))


def check_agent_context(spec: RunSpec, max_model_len: int | None) -> ContextFit:
    """Before the run: refuse rounds longer than the context unless --trace-clip."""
    fit = load_agent_replay(spec, max_model_len).fit
    if fit.too_long and not fit.clipped:
        raise UsageError(
            f"{fit.message('--trace ' + spec.trace).replace('trace request', 'round')}: they "
            "cannot be replayed; pass --trace-clip to clip them (output to at most half the "
            "context, then the prompt's tail) or use --limit"
        )
    return fit


def agent_replay_for_process(spec: RunSpec, model: str) -> AgentReplay:
    """Inside a Locust process: the plan against the discovered max_model_len (SetupError)."""
    try:
        rp = load_agent_replay(spec, spec.max_model_len, model)
    except UsageError as e:
        raise SetupError(str(e)) from None
    if rp.fit.too_long and not rp.fit.clipped:
        raise SetupError(
            f"{rp.fit.message('--trace ' + spec.trace)}; pass --trace-clip to clip them"
        )
    return rp


def agent_note(spec: RunSpec) -> str:
    """One line about the sessions a resolved spec will replay."""
    info = spec.trace_info
    assert info is not None
    line = (
        f"agentload: replaying {info.sessions} session(s), {info.requests} rounds of "
        f"{spec.trace} ({info.format}, closed loop, starts over {info.span_s:.1f}s at speedup "
        f"{spec.speedup:g}"
        + (f", waits capped at {spec.max_gap_s:g}s" if spec.max_gap_s else "")
        + f"); runs until every session has ended, at most {_cap(spec)}"
    )
    if info.bad_lines:
        line += f"; skipped {info.bad_lines} bad line(s), first {info.first_bad_line}"
    return line


def _cap(spec: RunSpec) -> str:
    """The run's length cap, and where it came from."""
    info = spec.trace_info
    default = info is not None and spec.duration_s == info.duration_s
    s = spec.duration_s
    text = f"{s:.0f}s" if s < 600 else f"{s / 60:.0f}m" if s < 36000 else f"{s / 3600:.0f}h"
    if default:
        return f"{text} ({AGENT_CAP_FACTOR:g}x the longest session; --duration sets the cap)"
    return f"{text} (--duration)"


# ---------------------------------------------------------------------------- the report
def _idle_bin(idle: float) -> str:
    lo = 0.0
    for hi in IDLE_BINS_S:
        if idle < hi:
            return f"{lo:g}-{hi:g}s"
        lo = hi
    return f">={lo:g}s"


def _cache_vs_idle(by_session: Mapping[str, list[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Σcached / Σprompt of requests by the idle time since the session's previous one ended."""
    bins: dict[str, list[int]] = {}
    for rows in by_session.values():
        prev_end: float | None = None
        for r in sorted(rows, key=lambda r: r.get("step") or 0):
            t0 = float(r.get("t_start") or 0.0)
            if prev_end is not None and r.get("prompt_tokens"):
                b = bins.setdefault(_idle_bin(max(0.0, t0 - prev_end)), [0, 0, 0])
                b[0] += 1
                b[1] += int(r.get("cached_tokens") or 0)
                b[2] += int(r["prompt_tokens"])
            prev_end = t0 + float(r.get("e2e_ms") or 0.0) / 1000
    order = [_idle_bin(x - 1e-9) for x in IDLE_BINS_S] + [_idle_bin(IDLE_BINS_S[-1])]
    return [
        {"idle": k, "requests": bins[k][0], "cached_ratio": bins[k][1] / bins[k][2]}
        for k in order
        if k in bins and bins[k][2]
    ]


def _session_row(rp: AgentReplay, name: str, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    rs = rp.trace.sessions[name]
    ok = [r for r in rows if r.get("status") == "ok"]
    exact = sum(
        1
        for r in ok
        if r.get("prompt_tokens") is not None
        and 0 < int(r.get("step") or 0) <= len(rs)
        and int(r["prompt_tokens"]) == rs[int(r["step"]) - 1].input_tokens
    )
    ends = [float(r["t_start"]) + float(r.get("e2e_ms") or 0) / 1000 for r in rows]
    starts = [float(r["t_start"]) for r in rows]
    return {
        "session": name,
        "parent": rs[0].parent,
        "rounds": len(rs),
        "sent": len(rows),
        "ok": len(ok),
        "prompt_exact": exact,
        "recorded_s": round(rs[-1].t_end - rs[0].t_start, 3),
        "planned_s": round(planned(rp.trace, name, rp.options), 3),
        "replayed_s": round(max(ends) - min(starts), 3) if rows else None,
        "recorded_prefix_tokens": sum(
            rs[int(r["step"]) - 1].prefix_tokens
            for r in ok
            if 0 < int(r.get("step") or 0) <= len(rs)
        ),
        "cached_tokens": sum(int(r.get("cached_tokens") or 0) for r in ok),
    }


def agent_summary(
    spec: RunSpec, rows: Iterable[Mapping[str, Any]], *, scrape: Mapping[str, Any]
) -> dict[str, Any]:
    """The `summary.trace` block of an agent-session replay (see the module docstring)."""
    rp = load_agent_replay(spec, spec.max_model_len)
    by_session: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("trace_index") is None or r.get("status") == "cancelled":
            continue
        if r.get("session_id") in rp.trace.sessions:
            by_session.setdefault(str(r["session_id"]), []).append(r)
    per = [_session_row(rp, s, by_session.get(s, [])) for s in _order(rp.trace)]
    with_usage = [r for rs in by_session.values() for r in rs if r.get("prompt_tokens")]
    cached = sum(int(r.get("cached_tokens") or 0) for r in with_usage)
    prompt = sum(int(r["prompt_tokens"]) for r in with_usage)
    recorded_input = sum(r.input_tokens for r in rp.trace.iter_rounds())
    recorded_prefix = sum(r.prefix_tokens for r in rp.trace.iter_rounds())
    # a session's first round reused a system prompt cached before the recording began:
    # a fresh server cannot have it, so the comparable figure leaves those rounds out
    warm_prefix = sum(r.prefix_tokens for r in rp.trace.iter_rounds() if r.round > 0)
    counters = scrape.get("counters") or {}
    hits = counters.get("vllm:prefix_cache_hits_total")
    queries = counters.get("vllm:prefix_cache_queries_total")
    stretch = [p["replayed_s"] / p["planned_s"] for p in per if p["replayed_s"] and p["planned_s"]]
    return {
        "mode": "agent-sessions",
        "source": spec.trace,
        "format": rp.trace.format,
        "speedup": spec.speedup,
        "max_gap_s": spec.max_gap_s,
        "limit": spec.trace_limit,
        "sessions": len(rp.trace.sessions),
        "subagents": len(rp.trace.sessions) - len(rp.trace.roots),
        "sessions_played": sum(1 for p in per if p["sent"]),
        # sessions the run's end cut short (the cap, Ctrl-C, a stop on errors): fewer
        # rounds sent than recorded (a failed round counts as sent; the agent went on)
        "sessions_cut": sum(1 for p in per if p["sent"] < p["rounds"]),
        "duration_cap_s": spec.duration_s,
        "requests": rp.trace.rounds,
        "sent": sum(p["sent"] for p in per),
        "not_sent": rp.trace.rounds - sum(p["sent"] for p in per),
        "ok": sum(p["ok"] for p in per),
        "prompt_exact": sum(p["prompt_exact"] for p in per),
        "bad_lines": len(rp.trace.bad_lines),
        "max_model_len": rp.fit.max_model_len,
        "too_long": rp.fit.too_long,
        "clipped": rp.fit.clipped,
        "ideal_hit_ratio": None,
        "recorded_prefix_ratio": recorded_prefix / recorded_input if recorded_input else None,
        "recorded_prefix_ratio_after_first": warm_prefix / recorded_input
        if recorded_input
        else None,
        "server": {
            "cached_tokens": cached,
            "prompt_tokens": prompt,
            "records_with_usage": len(with_usage),
            "cached_ratio": cached / prompt if prompt else None,
            "metrics_prefix_hits": hits,
            "metrics_prefix_queries": queries,
            "metrics_hit_ratio": hits / queries if hits is not None and queries else None,
        },
        "duration_stretch": _median(stretch),
        "cache_vs_idle": _cache_vs_idle(by_session),
        "per_session": per[:PER_SESSION_SHOWN],
        "send_lateness": {"p50_s": None, "p99_s": None, "max_s": None, "fell_behind": None},
    }


def _order(trace: AgentTrace) -> list[str]:
    seen: list[str] = []
    for r in trace.iter_rounds():
        if not seen or seen[-1] != r.session:
            seen.append(r.session)
    return seen


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return round(s[len(s) // 2], 3)


def agent_lines(t: Mapping[str, Any]) -> list[str]:
    """Console lines of an agent-session replay."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    srv = t.get("server") or {}
    lines = [
        f"agent replay: {t['sessions_played']} of {t['sessions']} sessions ({t['subagents']} "
        f"subagents), {t['sent']} of {t['requests']} rounds sent, {t['ok']} answered; prompt "
        f"tokens exactly as recorded in {t['prompt_exact']} of {t['ok']}",
        f"prefix reuse: recorded {pct(t.get('recorded_prefix_ratio'))} of input tokens "
        f"({pct(t.get('recorded_prefix_ratio_after_first'))} after each session's first round); "
        f"server cached_tokens {pct(srv.get('cached_ratio'))}, "
        f"/metrics {pct(srv.get('metrics_hit_ratio'))}",
    ]
    if t.get("sessions_cut"):
        lines.append(
            f"sessions cut: {t['sessions_cut']} of {t['sessions']} ended before their last "
            f"round (the run stopped at {t.get('duration_cap_s') or 0:.0f}s, or was stopped): "
            "raise --duration to play them to their end"
        )
    if t.get("duration_stretch") is not None:
        lines.append(
            f"session length: replayed / planned (recorded waits at speedup {t['speedup']:g}) "
            f"median {t['duration_stretch']:.2f}"
        )
    return lines
