"""What the run report says first: the headline, tool calls and tool-loop failures, idle gaps,
and the fingerprint in groups. Plain data from a run directory; the template draws it."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from workload.analyze.run_shape import argv_words
from workload.analyze.rundata import RunData
from workload.observe.fingerprint import flatten_fingerprint
from workload.report.console import tool_calls_text
from workload.report.views import dig, fmt_count, fmt_ms, fmt_num, fmt_pct, fmt_value

EXIT_MEANING = {
    0: "passed",
    1: "failed: too many errors",
    2: "bad input",
    3: "failed: SLO violated",
    129: "SIGHUP",
    130: "SIGINT",
    143: "SIGTERM",
}
# The headline's first word for exits by signal (stopped early: neither passed nor failed).
SIGNAL_VERDICT = {129: "Stopped", 130: "Interrupted", 143: "Terminated"}
DEFAULT_MAX_ERROR_RATIO = 0.05


def max_error_ratio(run: Mapping[str, Any]) -> float:
    """The error-ratio gate the run used: --max-error-ratio in argv, else the profile's, else 5 %."""
    argv = argv_words(run.get("argv"))
    for i, a in enumerate(argv):
        val = None
        if a == "--max-error-ratio" and i + 1 < len(argv):
            val = argv[i + 1]
        elif a.startswith("--max-error-ratio="):
            val = a.split("=", 1)[1]
        if val is not None:
            try:
                v = float(val)
            except ValueError:
                continue
            if v >= 0:
                return v
    v = dig(run, "profile", "max_error_ratio")
    return float(v) if isinstance(v, (int, float)) else DEFAULT_MAX_ERROR_RATIO


def slo_status(r: Mapping[str, Any]) -> str:
    """'met', 'violated', 'not judged' (no samples: neither met nor violated) or 'skipped'.

    run.json's ``status`` when present; older runs: from ``passed`` / ``skipped``."""
    st = r.get("status")
    if st in ("met", "violated", "not judged"):
        return str(st)
    if r.get("judged") is False:
        return "not judged"
    if r.get("skipped"):
        return "skipped"
    return "met" if r.get("passed") else "violated"


def slo_text(r: Mapping[str, Any]) -> str:
    """'interactive ttft_p95_ms 1,234 ms > 800 ms' (the observed value against its bound)."""
    unit = str(r.get("unit") or "")
    obs, thr = r.get("observed"), r.get("threshold")
    bound = str(r.get("bound") or "<=")
    cls = "overall" if r.get("class_name") == "*" else r.get("class_name")
    if obs is None:
        if slo_status(r) == "violated":  # --require-slo-samples: no samples fails
            return f"{cls} {r.get('metric')}: no samples (required)"
        # the run's own reason (workload.run.short_run): what was missing, the run it needs
        msg = r.get("message")
        why = (
            msg.split("(no samples): ", 1)[1]
            if isinstance(msg, str) and "(no samples): " in msg
            else ""
        )
        return f"{cls} {r.get('metric')}: no samples, not judged" + (f" — {why}" if why else "")
    broke = ">" if bound == "<=" else "<"
    held = "≤" if bound == "<=" else "≥"
    op = held if slo_status(r) == "met" else broke
    return f"{cls} {r.get('metric')} {fmt_value(obs, unit)} {op} {fmt_value(thr, unit)}"


def exit_reason(run: Mapping[str, Any], summary: Mapping[str, Any]) -> tuple[int | None, str]:
    """The run's exit code and why, e.g. (1, 'error ratio 16.9 % > 5 %')."""
    code = run.get("exit_code")
    code = int(code) if isinstance(code, (int, float)) else None
    recorded = run.get("exit_reason")
    if isinstance(recorded, str) and recorded and recorded != "ok":
        return code, recorded  # what the run itself said (signals, partial runs, bad SLOs)
    err = dig(summary, "overall", "error_ratio")
    limit = max_error_ratio(run)
    failed = [
        r
        for r in run.get("slo_results") or []
        if isinstance(r, dict) and slo_status(r) == "violated"
    ]
    if code == 1 or (code is None and isinstance(err, (int, float)) and err > limit):
        return code, f"error ratio {fmt_pct(err)} > {fmt_pct(limit)}"
    if code == 3 or (code is None and failed):
        if not failed:
            return code, "SLO not met"
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return code, f"SLO failed: {slo_text(failed[0])}{more}"
    if code == 0:
        st = Counter(slo_status(r) for r in run.get("slo_results") or [] if isinstance(r, dict))
        n = st["met"]
        slos = f", {n} SLO{'s' if n != 1 else ''} met" if n else ""
        if st["not judged"]:
            slos += f", {st['not judged']} not judged (no samples)"
        return code, f"error ratio {fmt_pct(err)} ≤ {fmt_pct(limit)}{slos}"
    if code in SIGNAL_VERDICT:
        return code, f"{SIGNAL_VERDICT[code].lower()} ({EXIT_MEANING[code]})"
    return code, EXIT_MEANING.get(code, "unknown") if code is not None else "exit code not recorded"


def headline(data: RunData, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The facts a reader wants before any chart (see templates/report.html.j2, #headline)."""
    run = data.run
    code, reason = exit_reason(run, summary)
    ov = summary.get("overall") or {}
    sess = ov.get("sessions") or {}
    slos = [r for r in run.get("slo_results") or [] if isinstance(r, dict)]
    status = Counter(slo_status(r) for r in slos)
    reasons = Counter(
        (str(s.get("outcome")), str(s.get("reason") or s.get("outcome")))
        for s in data.sessions
        # cancelled: still running when the run ended, counted in the Sessions fact
        if s.get("outcome") not in ("completed", "cancelled", None)
    )
    if code is not None:
        ok = code == 0
    else:  # an old run.json: judge from the computed reason
        ok = not (
            reason.startswith("SLO") or (reason.startswith("error ratio") and " > " in reason)
        )
    broken = int(sess.get("failed") or 0) + int(sess.get("tool_loop_failure") or 0)
    # exit 0 gates on errors and SLOs only: say so when sessions still ended early
    warns = []
    if ok and broken:
        warns.append(
            f"{fmt_count(broken)} of {fmt_count(sess.get('finished'))} sessions did not complete"
        )
    if ok and (summary.get("arrivals") or {}).get("fell_behind"):
        warns.append("the load generator fell behind its schedule")
    warn = " and ".join(warns)
    stopped = stop_line(run)
    if code in SIGNAL_VERDICT and stopped and reason.startswith(("interrupted", "stopped")):
        reason = ""  # the stop line says it, with the time
    return {
        "ok": ok,
        "verdict": SIGNAL_VERDICT.get(code or 0) or ("Passed" if ok else "Failed"),
        "warn": warn,
        "code": "-" if code is None else str(code),
        "meaning": (
            "failed: partial run"
            if code == 1 and run.get("partial")
            else EXIT_MEANING.get(code, "")
            if code is not None
            else ""
        ),
        "reason": reason,
        "stopped": stopped,
        "warnings": [
            w for w in (data.skipped_warning(), health_warning(run), reconcile_warning(run)) if w
        ],
        "goodput_line": goodput_line(summary, has_slos=bool(slos or run.get("slos"))),
        "arrivals": arrivals_line(summary.get("arrivals")),
        "arrivals_loud": bool((summary.get("arrivals") or {}).get("fell_behind")),
        "arrivals_note": arrivals_note(summary.get("arrivals")),
        "slo_met": status["met"],
        "slo_violated": status["violated"],
        "slo_not_judged": status["not judged"],
        "slo_skip": status["skipped"],
        "slo_failed": [slo_text(r) for r in slos if slo_status(r) == "violated"],
        "slo_unjudged": [slo_text(r) for r in slos if slo_status(r) == "not judged"],
        "requests": fmt_count(ov.get("requests")),
        "errors": fmt_count(ov.get("errors")),
        "error_ratio": fmt_pct(ov.get("error_ratio")),
        "cancelled": fmt_count(ov.get("cancelled")) if ov.get("cancelled") else "",
        "errors_by_kind": [
            (k, fmt_count(n))
            for k, n in sorted((ov.get("errors_by_kind") or {}).items(), key=lambda kv: -kv[1])
        ],
        "sessions_finished": fmt_count(sess.get("finished")),
        "sessions_completed": fmt_count(sess.get("completed")),
        "sessions_failed": fmt_count(sess.get("failed")),
        "sessions_tool_loop": fmt_count(sess.get("tool_loop_failure")),
        "sessions_cancelled": fmt_count(sess.get("cancelled")),
        "success_ratio": fmt_pct(sess.get("success_ratio")),
        "session_reasons": [(o, r, fmt_count(n)) for (o, r), n in reasons.most_common(6)],
        "tool_calls_planned": fmt_count(ov.get("tool_calls_planned")),
        "tool_calls_returned": fmt_count(ov.get("tool_calls_returned", ov.get("tool_calls"))),
        "tool_loop_failures": fmt_count(ov.get("tool_loop_failures")),
        "tool_calls_text": _tool_calls_text(ov, run),
    }


def _tool_calls_text(ov: Mapping[str, Any], run: Mapping[str, Any]) -> str:
    planned = _int(ov.get("tool_calls_planned"))
    return tool_calls_text(
        planned, _int(ov.get("tool_calls_returned", ov.get("tool_calls"))), history_mode(run)
    )


def _int(x: Any) -> int:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0


def history_mode(run: Mapping[str, Any]) -> str:
    """The profile's history mode ('scripted', the default, or 'actual') from run.json."""
    mode = dig(run, "profile", "history")
    return mode if mode in ("scripted", "actual") else "scripted"


def health_warning(run: Mapping[str, Any]) -> str:
    """A warning when the load generator itself was busy (run.json ``generator_health``)."""
    gh = run.get("generator_health")
    if not isinstance(gh, Mapping) or not gh.get("crossed"):
        return ""
    parts = []
    if isinstance(gh.get("cpu_max"), (int, float)):
        mean = gh.get("cpu_mean")
        parts.append(
            f"CPU max {fmt_pct(gh['cpu_max'])} of a core"
            + (f", mean {fmt_pct(mean)}" if isinstance(mean, (int, float)) else "")
        )
    if isinstance(gh.get("loop_lag_ms_max"), (int, float)):
        parts.append(f"event-loop lag max {fmt_ms(gh['loop_lag_ms_max'])} ms")
    seen = f" ({'; '.join(parts)})" if parts else ""
    return f"the load generator was busy{seen}: timings may be bent; add --workers"


def reconcile_warning(run: Mapping[str, Any]) -> str:
    """When the summary was rebuilt from the JSONL files (run.json ``reconcile``), say so, and
    how much of the ITL it holds: the files keep no per-gap ITL, only the live counts do."""
    note = run.get("reconcile")
    if not isinstance(note, Mapping) or note.get("source") != "files":
        return ""
    live, ok = note.get("itl_ok_requests"), note.get("ok_requests")
    itl = note.get("itl")
    if itl == "partial" and isinstance(live, int) and isinstance(ok, int):
        return (
            f"ITL is partial: its percentiles count the gaps of {fmt_count(live)} of "
            f"{fmt_count(ok)} successful requests (the rest reached the files but not the live "
            "counts, e.g. a worker's last report was lost); every other figure counts all of them"
        )
    if itl == "none":
        return (
            "ITL is unavailable: no successful request reached the live counts, so no "
            "inter-token gap was counted (requests*.jsonl keeps each request's ITL summary)"
        )
    return ""


def goodput_line(summary: Mapping[str, Any], has_slos: bool = True) -> str:
    """'93.1 % of requests, 80.0 % of sessions met every SLO (12.4 good sessions/min)'.

    Without SLOs every ok request and completed session is good, and the line says so."""
    ov = summary.get("overall") or {}
    sess = ov.get("sessions") or {}
    req, ses = ov.get("request_goodput_ratio"), sess.get("goodput_ratio")
    per_min = sess.get("goodput_per_min")
    parts = []
    if isinstance(req, (int, float)):
        parts.append(f"{fmt_pct(req)} of requests")
    if isinstance(ses, (int, float)):
        parts.append(f"{fmt_pct(ses)} of sessions")
    if not parts:
        return ""
    text = ", ".join(parts) + (
        " met every SLO" if has_slos else " good (no SLOs set: ok requests, completed sessions)"
    )
    if isinstance(per_min, (int, float)):
        text += f" ({per_min:,.1f} good sessions/min)"
    return text


def _s(x: Any) -> str:
    """Seconds for people: 0.012 -> '12 ms', 3.4 -> '3.4 s'."""
    if not isinstance(x, (int, float)):
        return "-"
    return f"{x * 1000:,.0f} ms" if x < 1 else f"{x:,.1f} s"


def arrivals_line(a: Mapping[str, Any] | None) -> str:
    """The open-loop schedule kept or not: sessions due / started / dropped and start lateness."""
    if not isinstance(a, Mapping) or not a:
        return ""
    text = (
        f"{fmt_count(a.get('scheduled'))} sessions due, {fmt_count(a.get('started'))} started, "
        f"{fmt_count(a.get('dropped'))} dropped, {fmt_count(a.get('delayed'))} started late "
        f"(> {_s(a.get('tolerance_s'))}); start lateness p50 {_s(a.get('p50_s'))} · "
        f"p99 {_s(a.get('p99_s'))} · max {_s(a.get('max_s'))}"
    )
    if a.get("fell_behind"):
        why = f" ({a['lateness_why']})" if isinstance(a.get("lateness_why"), str) else ""
        text = (
            f"THE LOAD GENERATOR FELL BEHIND its arrival schedule{why}: the server saw less "
            "load than asked (raise --max-in-flight, add --workers or lower the rate). " + text
        )
    return text


def arrivals_note(a: Mapping[str, Any] | None) -> str:
    """A few late starts, too few to say the generator fell behind: a note, not an alarm."""
    if not isinstance(a, Mapping) or a.get("fell_behind") or a.get("lateness_verdict") != "note":
        return ""
    why = a.get("lateness_why")
    if not isinstance(why, str) or not why:
        return ""
    return f"{why}; if a longer run shows more, add --workers or lower the rate"


def stop_line(run: Mapping[str, Any]) -> str:
    """'interrupted (SIGINT)', 'partial: worker 1 lost at 12.3 s', both, or '' (ran to its end)."""
    parts = []
    by = run.get("stopped_by")
    if isinstance(by, str) and by and by != "end of run":
        text = f"interrupted ({by})" if by == "SIGINT" else f"stopped by {by}"
        if isinstance(run.get("duration_s"), (int, float)):
            text += f" after {run['duration_s']:,.1f} s: the numbers cover only the part that ran"
        parts.append(text)
    lost = [w for w in run.get("lost_workers") or [] if isinstance(w, Mapping)]
    if lost:
        at = ", ".join(
            f"worker {w.get('worker')} lost"
            + (f" at {w['t_s']:,.1f} s" if isinstance(w.get("t_s"), (int, float)) else "")
            for w in lost
        )
        parts.append(f"partial: {at}; later load is missing")
    elif run.get("partial"):
        parts.append(f"partial: {run.get('partial_reason') or 'the run is incomplete'}")
    return " · ".join(parts)


def stage_rows(summary: Mapping[str, Any], run: Mapping[str, Any]) -> list[list[str]]:
    """Per load stage: window, level, requests, errors, TTFT / TPOT p95, goodput, lateness p99."""
    stages = summary.get("stages")
    if not isinstance(stages, list):
        stages = dig(run, "stages", "stages")
    if not isinstance(stages, list):
        return []
    rows: list[list[str]] = []
    for r in stages:
        if not isinstance(r, Mapping):
            continue
        if r.get("arrival_rate") is not None:
            level = f"{fmt_value(r['arrival_rate'])} /s"
        elif r.get("users") is not None:
            level = f"{fmt_count(r['users'])} users"
        else:
            level = "-"
        if isinstance(r.get("ramp_s"), (int, float)) and r["ramp_s"] > 0:
            level += f" (ramp {fmt_value(r['ramp_s'])} s)"
        late = r.get("lateness") or {}
        rows.append([
            str(r.get("index", len(rows))),
            f"{fmt_value(r.get('start_s'))}–{fmt_value(r.get('end_s'))} s",
            level,
            fmt_count(r.get("requests")),
            fmt_count(r.get("errors")),
            fmt_ms(r.get("ttft_p95_ms")),
            fmt_ms(r.get("tpot_p95_ms")),
            fmt_pct(r.get("goodput_ratio")),
            fmt_num(r.get("goodput_per_s")),
            _s(late.get("p99_s")) if late else "-",
        ])  # fmt: skip
    return rows


def tool_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Per class and step: requests, tool calls planned / returned, tool-loop failures."""
    rows = []
    for cls, by_step in (summary.get("by_step") or {}).items():
        for step in sorted(by_step, key=int):
            v = by_step[step]
            planned = v.get("tool_calls_planned", 0)
            returned = v.get("tool_calls_returned", v.get("tool_calls", 0))
            fails = v.get("tool_loop_failures", 0)
            if not (planned or returned or fails):
                continue
            rows.append([cls, str(step), fmt_count(v.get("requests")), fmt_count(planned),
                         fmt_count(returned), fmt_count(fails)])  # fmt: skip
    return rows


def tool_failure_examples(requests: Iterable[Mapping[str, Any]], n: int = 8) -> list[list[str]]:
    """The first tool-loop failures: request id, class #step, planned tool, returned, what was wrong."""
    out = []
    for r in sorted(requests, key=lambda d: d.get("t_start") or 0.0):
        why = r.get("tool_loop_failure")
        if not why and r.get("error_kind") != "tool_loop":
            continue
        returned = ", ".join(
            str(c.get("name")) for c in r.get("tool_calls") or [] if isinstance(c, dict)
        )
        detail = _short_detail(str(r.get("error_detail") or ""))
        wrong = str(why or r.get("error_kind"))
        if detail and detail not in wrong:
            wrong += f" ({detail[:160]})"
        bad = [
            c
            for c in r.get("tool_calls") or []
            if isinstance(c, dict) and not c.get("arguments_valid", True)
        ]
        if bad:  # show what the server sent, cut short
            wrong += f"; arguments: {str(bad[0].get('arguments') or '')[:80]!r}"
        out.append([str(r.get("request_id") or "-"), f"{r.get('user_class')} #{r.get('step')}",
                    str(r.get("planned_tool") or "-"), returned or "none", wrong])  # fmt: skip
        if len(out) >= n:
            break
    return out


_JSON_MESSAGE = re.compile(r'\{.*"message"\s*:\s*"((?:[^"\\]|\\.)*)".*\}', re.S)


def _short_detail(detail: str) -> str:
    """An error detail for people: a server's JSON error body becomes its message
    ('HTTP 500: {"error":{"message":"boom",...}}' -> 'HTTP 500: boom')."""
    m = _JSON_MESSAGE.search(detail)
    if m:
        detail = detail[: m.start()] + m.group(1) + detail[m.end() :]
    return detail


# Idle gap before a step: how long the session's prefix sat in the server's cache unused.
IDLE_BUCKETS = (0.0, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0)


def idle_gaps(requests: Iterable[Mapping[str, Any]]) -> list[tuple[float, Mapping[str, Any]]]:
    """(seconds since the previous request of the same session ended, row) for every request
    after a session's first. A request's end is t_start + e2e_ms (t_start when e2e is absent)."""
    by_session: dict[str, list[Mapping[str, Any]]] = {}
    for r in requests:
        if r.get("session_id") and isinstance(r.get("t_start"), (int, float)) and r["t_start"]:
            by_session.setdefault(str(r["session_id"]), []).append(r)
    out = []
    for rows in by_session.values():
        rows.sort(key=lambda d: (d["t_start"], d.get("step") or 0, d.get("attempt") or 0))
        prev_end = None
        for r in rows:
            if prev_end is not None:
                out.append((max(0.0, r["t_start"] - prev_end), r))
            prev_end = r["t_start"] + (r.get("e2e_ms") or 0.0) / 1000.0
    return out


def bucket_label(i: int) -> str:
    lo = IDLE_BUCKETS[i]
    if i + 1 < len(IDLE_BUCKETS):
        return f"{lo:g}–{IDLE_BUCKETS[i + 1]:g} s"
    return f"≥ {lo:g} s"


def idle_gap_table(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per idle-gap bucket (non-empty only): requests, cached ratio, TTFT p50 / p95 (ok requests)."""
    acc: dict[int, dict[str, Any]] = {}
    for gap, r in idle_gaps(requests):
        i = max(j for j, lo in enumerate(IDLE_BUCKETS) if gap >= lo)
        a = acc.setdefault(i, {"n": 0, "cached": 0, "prompt": 0, "ttft": []})
        a["n"] += 1
        if r.get("cached_tokens") is not None:
            a["cached"] += r["cached_tokens"] or 0
            a["prompt"] += r.get("prompt_tokens") or 0
        if r.get("status") == "ok" and isinstance(r.get("ttft_ms"), (int, float)):
            a["ttft"].append(float(r["ttft_ms"]))
    out = []
    for i in sorted(acc):
        a = acc[i]
        t = sorted(a["ttft"])
        out.append({
            "bucket": bucket_label(i),
            "requests": a["n"],
            "cached_ratio": a["cached"] / a["prompt"] if a["prompt"] else None,
            "ttft_p50_ms": _pct(t, 50),
            "ttft_p95_ms": _pct(t, 95),
        })  # fmt: skip
    return out


def _pct(sorted_vals: list[float], p: float) -> float | None:
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, max(0, math.ceil(p / 100 * len(sorted_vals)) - 1))]


# Fingerprint groups: first match on the field name wins; the rest is "other".
FP_GROUPS = (
    ("runner", ("model_runner", "vllm_use_v2_model_runner", "attention_backend", "fallback_warnings",
                "cuda_graph", "estimated_cuda_graph", "weights_memory", "compilation")),
    ("parallelism", ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                     "expert_parallel", "kv_engines")),
    ("KV cache", ("kv_", "prefix_caching", "gpu_memory_utilization", "cache_config",
                  "num_gpu_blocks", "block_size", "max_concurrency", "mamba")),
    ("server", ("server_version", "version", "model", "served_models", "max_model_len",
                "system_fingerprint", "architecture", "quantization", "vllm_env")),
)  # fmt: skip
_GROUP_ORDER = ("server", "KV cache", "runner", "parallelism", "labels", "other")


def _is_unknown(v: Any) -> bool:
    return v is None or v == "unknown" or v == [] or v == {}


def fingerprint_groups(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Fingerprint and labels by group: [{name, rows [(field, value, source)], unknown [fields]}]."""
    groups: dict[str, dict[str, Any]] = {
        name: {"name": name, "rows": [], "unknown": []} for name in _GROUP_ORDER
    }
    fp = {k: v for k, v in (run.get("fingerprint") or {}).items() if not str(k).startswith("_")}
    for key, (v, src) in sorted(flatten_fingerprint(fp).items()):
        if key.startswith("label."):
            name = "labels"
            key = key[len("label.") :]
        else:
            name = next((g for g, pre in FP_GROUPS if key.startswith(pre)), "other")
        _put(groups[name], key, v, src)
    for key, (v, src) in sorted(flatten_fingerprint(run.get("labels") or {}).items()):
        if not any(r[0] == key for r in groups["labels"]["rows"]):
            _put(groups["labels"], key, v, src or "label")
    return [g for g in groups.values() if g["rows"] or g["unknown"]]


def _put(group: dict[str, Any], key: str, v: Any, src: Any) -> None:
    if _is_unknown(v):
        group["unknown"].append(key)
    else:
        text = ", ".join(map(str, v)) if isinstance(v, list) else str(v)
        group["rows"].append((key, text, "" if src is None else str(src)))


def _agent_rows(t: Mapping[str, Any], pct: Callable[[Any], str]) -> list[tuple[str, str]]:
    """`agentload run --trace` of agent sessions: what was played and how faithfully."""
    srv = t.get("server") or {}
    rows = [
        ("agent sessions", f"{t.get('source')} ({t.get('format')}, speedup {t.get('speedup')}"
         + (f", waits capped at {t.get('max_gap_s')} s" if t.get("max_gap_s") else "") + ")"),
        ("sessions played", f"{t.get('sessions_played')} of {t.get('sessions')} "
         f"({t.get('subagents')} subagents)"),
        ("rounds sent / answered", f"{t.get('sent')} / {t.get('ok')} of {t.get('requests')}"),
        ("sessions cut by the run's end", str(t.get("sessions_cut", "-"))),
        ("prompt tokens exactly as recorded", f"{t.get('prompt_exact')} of {t.get('ok')} rounds"),
        ("recorded prefix reuse (after first rounds)",
         f"{pct(t.get('recorded_prefix_ratio'))} ({pct(t.get('recorded_prefix_ratio_after_first'))})"),
        ("server: Σ cached / Σ prompt tokens", pct(srv.get("cached_ratio"))),
        ("session length, replayed / planned (median)", str(t.get("duration_stretch") or "-")),
    ]  # fmt: skip
    for b in t.get("cache_vs_idle") or []:
        rows.append(
            (f"cached ratio after {b['idle']} idle", f"{pct(b['cached_ratio'])} ({b['requests']})")
        )
    return rows


def trace_rows(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """`agentload run --trace`: what was replayed and ideal vs reported prefix-cache hits."""
    t = (run.get("summary") or {}).get("trace")
    if not isinstance(t, Mapping):
        return []

    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * float(x):.1f} %"

    def ms(x: Any) -> str:
        return "-" if x is None else f"{1000 * float(x):.0f} ms"

    if t.get("mode") == "agent-sessions":
        return _agent_rows(t, pct)
    late = t.get("send_lateness") or {}
    srv = t.get("server") or {}
    ideal = t.get("ideal_hit_ratio")
    rows = [
        ("trace", f"{t.get('source')} ({t.get('format')}, speedup {t.get('speedup')})"),
        ("requests sent", f"{t.get('sent')} of {t.get('requests')}"
         + (f" ({t.get('too_long')} clipped to max_model_len)" if t.get("clipped") else "")),
        ("send lateness p50 / p99", f"{ms(late.get('p50_s'))} / {ms(late.get('p99_s'))}"
         + (" (the generator fell behind)" if late.get("fell_behind") else "")),
    ]  # fmt: skip
    if ideal is None:
        rows.append(("ideal prefix-cache hits", "- (the trace has no hash ids)"))
    else:
        rows.append(("ideal prefix-cache hits (infinite cache)", pct(ideal.get("infinite_tokens"))))
        if ideal.get("lru_tokens") is not None:
            rows.append(
                (
                    f"ideal, LRU of the server's KV ({ideal.get('lru_capacity_blocks')} blocks)",
                    pct(ideal.get("lru_tokens")),
                )
            )
    rows.append(("server: Σ cached / Σ prompt tokens", pct(srv.get("cached_ratio"))))
    rows.append(("server: /metrics prefix-cache hits / queries", pct(srv.get("metrics_hit_ratio"))))
    return rows
