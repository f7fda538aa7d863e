"""`agentload run --trace FILE`: the trace a run replays, its context check, and its report.

Every process re-reads the trace from the path in the RunSpec with the same format,
limit and bad-line rule (reading is deterministic), so the spec sent to Locust and its
workers never carries the requests themselves. The replay plan is: read, take the first
``--limit`` requests, schedule them (``--speedup``; same-timestamp bursts spread), then
clip to the server's ``max_model_len`` when ``--trace-clip`` asks (otherwise a trace with
too-long requests is refused before the run).

The report block (``summary.trace`` in run.json) sets the ideal prefix-cache hit ratio
of the replayed requests (infinite cache, and an LRU of the server's KV size when the
fingerprint knows it) next to what the server reported: Σcached_tokens / Σprompt_tokens
of the records and the /metrics prefix-cache hits / queries deltas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload.errors import SetupError, UsageError
from workload.measure import artifacts
from workload.plan.traces import (
    ContextFit,
    Trace,
    TraceRequest,
    fit_to_context,
    hit_ratio,
    schedule,
)
from workload.run.agent_replay import agent_lines, agent_note, agent_summary, check_agent_context
from workload.run.spec import RunSpec, read_run_trace


@dataclass(frozen=True)
class Replay:
    """The requests a run replays (arrival_s = replay offset in seconds) and how they fit."""

    trace: Trace
    requests: list[TraceRequest]
    fit: ContextFit


def is_agent_replay(spec: RunSpec) -> bool:
    """Whether the spec replays agent sessions (closed loop) rather than requests."""
    return spec.trace_info is not None and spec.trace_info.sessions > 0


def trace_note(spec: RunSpec) -> str:
    """One line about the trace a resolved spec will replay (bad lines skipped included)."""
    info = spec.trace_info
    if info is None:
        return f"agentload: replaying {spec.trace}"
    if is_agent_replay(spec):
        return agent_note(spec)
    line = (
        f"agentload: replaying {info.requests} requests of {spec.trace} "
        f"({info.format}, span {info.span_s:.1f}s at speedup {spec.speedup:g})"
    )
    if info.bad_lines:
        line += f"; skipped {info.bad_lines} bad line(s), first {info.first_bad_line}"
    if info.reuse:
        line += f"; prefix reuse {info.reuse}"
    return line


def load_replay(spec: RunSpec, max_model_len: int | None = None) -> Replay:
    """The replay plan of a spec with --trace (see the module docstring). Raises UsageError."""
    trace = read_run_trace(spec.trace, spec.trace_format, spec.trace_limit, spec.on_bad_line)
    timed = schedule(trace, speedup=spec.speedup)
    reqs, fit = fit_to_context(timed, max_model_len, clip=spec.trace_clip)
    return Replay(trace, reqs, fit)


def check_context(spec: RunSpec, max_model_len: int | None) -> ContextFit:
    """Before the run: refuse a trace with too-long requests unless --trace-clip (UsageError)."""
    if is_agent_replay(spec):
        return check_agent_context(spec, max_model_len)
    trace = read_run_trace(spec.trace, spec.trace_format, spec.trace_limit, spec.on_bad_line)
    _, fit = fit_to_context(trace.requests, max_model_len, clip=spec.trace_clip)
    if fit.too_long and not fit.clipped:
        raise UsageError(
            f"{fit.message('--trace ' + spec.trace)}: they cannot be replayed; pass "
            "--trace-clip to clip them (output to at most half the context, then the "
            "prompt's tail) or use --limit"
        )
    return fit


def replay_for_process(spec: RunSpec) -> Replay:
    """Inside a Locust process: the plan against the discovered max_model_len (SetupError)."""
    try:
        rp = load_replay(spec, spec.max_model_len)
    except UsageError as e:
        raise SetupError(str(e)) from None
    if rp.fit.too_long and not rp.fit.clipped:
        raise SetupError(
            f"{rp.fit.message('--trace ' + spec.trace)}; pass --trace-clip to clip them"
        )
    return rp


# ---------------------------------------------------------------------------- the report


def _value(fp: Mapping[str, Any], key: str) -> Any:
    v = fp.get(key)
    return v.get("value") if isinstance(v, dict) else v


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def trace_summary(
    spec: RunSpec,
    rows: Iterable[Mapping[str, Any]],
    *,
    fingerprint: Mapping[str, Any],
    scrape: Mapping[str, Any],
    arrivals: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The `summary.trace` block: what was replayed, ideal vs reported cache hits, lateness."""
    if is_agent_replay(spec):
        return agent_summary(spec, rows, scrape=scrape)
    rp = load_replay(spec, spec.max_model_len)
    sent: set[int] = set()
    cached = prompt = 0
    ok_with_usage = 0
    for r in rows:
        k = r.get("trace_index")
        if k is None or r.get("status") == "cancelled":
            continue
        sent.add(int(k))
        if r.get("status") == "ok" and r.get("prompt_tokens"):
            prompt += int(r["prompt_tokens"])
            cached += int(r.get("cached_tokens") or 0)
            ok_with_usage += 1
    replayed = [q for k, q in enumerate(rp.requests) if k in sent]
    has_ids = rp.trace.has_hash_ids
    kv_tokens = _value(fingerprint, "kv_capacity_tokens")
    lru_blocks = int(kv_tokens) // rp.trace.block_tokens if isinstance(kv_tokens, int) else None
    ideal: dict[str, Any] | None = None
    if has_ids:
        inf = hit_ratio(replayed, block_tokens=rp.trace.block_tokens)
        ideal = {
            "infinite_blocks": inf.ratio,
            "infinite_tokens": inf.token_ratio,
            "lru_capacity_blocks": lru_blocks,
            "lru_tokens": None,
            "lru_blocks": None,
        }
        if lru_blocks:
            lru = hit_ratio(replayed, lru_blocks, block_tokens=rp.trace.block_tokens)
            ideal["lru_tokens"], ideal["lru_blocks"] = lru.token_ratio, lru.ratio
    counters = scrape.get("counters") or {}
    hits = counters.get("vllm:prefix_cache_hits_total")
    queries = counters.get("vllm:prefix_cache_queries_total")
    late = arrivals or {}
    return {
        "source": spec.trace,
        "format": rp.trace.format,
        "speedup": spec.speedup,
        "limit": spec.trace_limit,
        "requests": len(rp.requests),
        "sent": len(sent),
        "not_sent": len(rp.requests) - len(sent),
        "bad_lines": len(rp.trace.bad_lines),
        "max_model_len": rp.fit.max_model_len,
        "too_long": rp.fit.too_long,
        "clipped": rp.fit.clipped,
        "ideal_hit_ratio": ideal,
        "server": {
            "cached_tokens": cached,
            "prompt_tokens": prompt,
            "records_with_usage": ok_with_usage,
            "cached_ratio": _ratio(cached, prompt) if ok_with_usage else None,
            "metrics_prefix_hits": hits,
            "metrics_prefix_queries": queries,
            "metrics_hit_ratio": _ratio(hits, queries),
        },
        "send_lateness": {
            "p50_s": late.get("p50_s"),
            "p99_s": late.get("p99_s"),
            "max_s": late.get("max_s"),
            "fell_behind": late.get("fell_behind"),
        },
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def trace_lines(t: Mapping[str, Any] | None) -> list[str]:
    """Console lines: what was replayed, and the hit-ratio comparison."""
    if not t:
        return []
    if t.get("mode") == "agent-sessions":
        return agent_lines(t)
    late = t.get("send_lateness") or {}

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1000:.0f}ms"

    lines = [
        f"trace replay: {t['sent']} of {t['requests']} requests sent ({t['format']}, speedup "
        f"{t['speedup']:g}); send lateness p50 {ms(late.get('p50_s'))} p99 {ms(late.get('p99_s'))}"
        + (f"; {t['too_long']} clipped to max_model_len" if t.get("clipped") else "")
    ]
    ideal, srv = t.get("ideal_hit_ratio"), t.get("server") or {}
    ideal_text = (
        "no hash ids in this trace (no ideal)"
        if ideal is None
        else f"ideal {_pct(ideal['infinite_tokens'])} (infinite cache)"
        + (
            f", {_pct(ideal['lru_tokens'])} (LRU of the server's KV, "
            f"{ideal['lru_capacity_blocks']} blocks)"
            if ideal.get("lru_tokens") is not None
            else ""
        )
    )
    lines.append(
        f"prefix-cache hits by tokens: {ideal_text}; server cached_tokens "
        f"{_pct(srv.get('cached_ratio'))}, /metrics {_pct(srv.get('metrics_hit_ratio'))}"
    )
    return lines


def read_rows(out: Path) -> list[dict[str, Any]]:
    """The run's request records (every worker's file)."""
    return artifacts.read_records(Path(out), "requests")
