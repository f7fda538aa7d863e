"""End of a run: evaluate SLOs, write run.json / stats.json / junit.xml / report, pick the exit code.

Exit codes (docs/ci.md): 0 pass, 1 errors above the allowed ratio or a worker
lost (the run is partial), 2 bad input or unusable target, 3 an SLO violated,
129 / 130 / 143 stopped by SIGHUP / SIGINT / SIGTERM (artifacts complete).
The console's last line always says which and why.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workload.errors import (
    EXIT_BAD_INPUT,
    EXIT_ERRORS,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_SLO,
    AgentloadError,
    print_error,
)
from workload.measure import artifacts, slo
from workload.observe import metrics
from workload.observe.safe import redact_url
from workload.report.console import console_table
from workload.report.run_report import write_run_report
from workload.run.load_summary import arrival_lines, load_summary, stage_lines
from workload.run.reconcile import reconciled
from workload.run.replay import read_rows, trace_lines, trace_summary
from workload.run.short_run import explain_unjudged, run_length_s
from workload.stopping import exit_code_for_signal

if TYPE_CHECKING:  # types only
    from workload.measure.slo import SLOResult
    from workload.measure.stats import Aggregate
    from workload.run.spec import RunSpec

log = logging.getLogger("agentload")


@dataclass
class Measured:
    """What a finished run measured and found, next to its RunSpec."""

    total: Aggregate  # over the whole run
    slos: dict[str, dict[str, float]]  # the SLOs the aggregate counted goodput with
    started_iso: str
    started_wall: float
    ended_iso: str | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    users: int | None = None  # the user count at the end (the start form may change it)
    stop_signal: int | None = None  # the signal that stopped the run (None: it ran its course)
    lost_workers: list[dict[str, Any]] = field(default_factory=list)  # {worker, at, t_s, why}
    settle: bool = False  # wait for workers' last lines before counting them (distributed)
    unreported_workers: list[str] = field(default_factory=list)  # no final report came
    defer_last_line: bool = False  # the caller prints `last_line` itself (after Locust's table)
    last_line: str = ""  # "agentload: exit N: why; artifacts in DIR"
    generator_health: dict[str, Any] | None = None  # workload.locust.health summary


def exit_code_for(
    error_ratio: float | None, max_error_ratio: float, slo_results: list[SLOResult]
) -> int:
    """The worst applicable outcome: errors above the threshold beat SLO violations."""
    if error_ratio is not None and error_ratio > max_error_ratio:
        return EXIT_ERRORS
    if any(not r.passed for r in slo_results):
        return EXIT_SLO
    return EXIT_OK


def finalize_run(spec: RunSpec, m: Measured) -> int:
    """Write the run's summary artifacts; return the exit code.

    The summary counts what the JSONL files hold (`workload.run.reconcile`); every file is
    written atomically; the console's last line gives the exit code and why. Long because
    run.json's fields are listed here, in one place.
    """
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    note = _count_what_was_written(m, out)
    agg = m.total
    summary = agg.summary()
    slos = m.slos
    slo_results, code, why, partial_reason = _outcome(spec, m, agg, summary)
    explain_unjudged(
        slo_results,
        artifacts.read_records(out, "sessions"),
        run_length_s(spec.duration_s, time.time() - m.started_wall),
    )

    samples = metrics.read_samples(out / "metrics.jsonl")
    scrape = metrics.scrape_summary(samples) if samples else {"absent": ["/metrics (not scraped)"]}
    spec_check = (
        metrics.spec_decode_crosscheck(summary["overall"]["spec_decode"], scrape)
        if samples
        else None
    )

    load = load_summary(spec, out, slos, spec.arrival_t0 or m.started_wall)
    if load["arrivals"] is not None:
        summary["arrivals"] = load["arrivals"]
    if load["stages"] is not None:
        summary["stages"] = load["stages"]["stages"]
    if spec.trace:
        summary["trace"] = _trace_block(spec, out, m.fingerprint, scrape, load["arrivals"])
    _fill_system_fingerprint(m.fingerprint, out)
    artifacts.write_json(out / "stats.json", {**agg.to_dict(), "reconcile": note})
    artifacts.write_atomic(
        out / "junit.xml", slo.junit_xml(slo_results, suite_name=f"agentload.{spec.profile.name}")
    )
    run = {
        "schema_version": artifacts.SCHEMA_VERSION,
        "run_id": spec.run_id,
        "started_at": m.started_iso,
        "ended_at": m.ended_iso or artifacts.iso_now(),
        "duration_s": round(time.time() - m.started_wall, 3),
        "argv": spec.argv,
        "profile_name": spec.profile.name,
        "profile": spec.profile.model_dump(mode="json"),
        "seed": spec.seed,
        "labels": spec.labels,
        "target": _redacted_target(m.target),
        "model": spec.model,
        "tokenizer": spec.tokenizer,
        "workers": spec.workers,
        "users": m.users,
        "fingerprint": m.fingerprint,
        "summary": summary,
        "server": scrape,
        "spec_decode_crosscheck": spec_check,
        "stages": load["stages"],
        "slos": slos,
        "slo_results": [r.to_json() for r in slo_results],
        "stopped_by": _signame(m.stop_signal) if m.stop_signal else "end of run",
        "partial": bool(partial_reason),
        "partial_reason": partial_reason,
        "lost_workers": list(m.lost_workers),
        "reconcile": note,
        "exit_code": code,
        "exit_reason": why,
        "generator_health": m.generator_health,
    }
    artifacts.write_json(out / "run.json", run)
    try:
        write_run_report(out)
    except Exception as e:  # noqa: BLE001 - the report must never lose the measurements
        log.warning("agentload: report.html not written: %s", e)
    _print_console(summary, spec_check, load, slo_results, spec.profile.history)
    m.last_line = last_line(code, why, out)
    if not m.defer_last_line:
        print(m.last_line, flush=True)
    return code


def _outcome(
    spec: Any, m: Measured, agg: Any, summary: dict[str, Any]
) -> tuple[list[Any], int, str, str | None]:
    """(SLO results, exit code, why, partial reason). Errors beat SLOs; a passing run where
    nothing finished fails, one that lost a worker is partial; a stop signal's code wins."""
    try:
        missing = "fail" if spec.require_slo_samples else "not_judged"
        slo_results = slo.evaluate_slos(agg, m.slos, missing=missing)
    except ValueError as e:
        print_error(f"bad SLO: {e}")
        slo_results = []
        code, why = EXIT_BAD_INPUT, f"bad SLO: {e}"
    else:
        code = exit_code_for(slo.error_ratio(summary), spec.max_error_ratio, slo_results)
        why = outcome_reason(code, slo.error_ratio(summary), spec.max_error_ratio, slo_results)
    ov = summary["overall"]
    if code in (EXIT_OK, EXIT_SLO) and not (ov.get("ok") or ov.get("errors")):
        # Nothing finished: a gate that passes here would pass a server that never answered.
        code = EXIT_ERRORS
        why = (
            f"no request finished ({ov.get('cancelled') or 0} cancelled in flight), so nothing "
            "was measured: give the run a --duration longer than the first answers take, and "
            "check that users started"
        )
    partial_reason = _partial_reason(m.lost_workers)
    if partial_reason and code in (EXIT_OK, EXIT_SLO):
        code, why = EXIT_PARTIAL, f"partial run: {partial_reason}"
    if m.stop_signal:
        code = exit_code_for_signal(m.stop_signal)
        why = f"interrupted ({_signame(m.stop_signal)})"
    return slo_results, code, why, partial_reason


def _print_console(
    summary: dict[str, Any],
    spec_check: dict[str, Any] | None,
    load: dict[str, Any],
    slo_results: list[Any],
    history: str = "scripted",
) -> None:
    """The console's table, spec-decode, stage/arrival/trace lines and each SLO's result."""
    print(console_table(summary, history), flush=True)
    if spec_check and spec_check["draft_tokens"]["server"]:
        print(_spec_line(spec_check), flush=True)

    lines = stage_lines(load["stages"]) + arrival_lines(load["arrivals"])
    for line in lines + trace_lines(summary.get("trace")):
        print(line, flush=True)
    for r in slo_results:
        mark = "  PASS " if r.passed and r.judged else "  FAIL " if not r.passed else "  ---- "
        print(mark + r.message, flush=True)


def last_line(code: int, why: str, out: Path) -> str:
    """The console's last line: the exit code, why, and where the artifacts are."""
    if code == EXIT_OK:
        return f"agentload: artifacts in {out}  (exit 0)"
    if code > 128:
        return f"agentload: exit {code}: {why}; artifacts complete in {out}"
    return f"agentload: exit {code}: {why}; artifacts in {out}"


def outcome_reason(
    code: int, error_ratio: float | None, max_error_ratio: float, slo_results: list[SLOResult]
) -> str:
    """Why `exit_code_for` chose `code`, in a few words."""
    if code == EXIT_ERRORS and error_ratio is not None:
        return (
            f"error ratio {100 * error_ratio:.1f} % > {100 * max_error_ratio:g} % (max_error_ratio)"
        )
    failed = [r for r in slo_results if not r.passed]
    if code == EXIT_SLO and failed:
        parts = []
        for r in failed[:3]:
            if r.observed is None:
                parts.append(f"{r.class_name}.{r.metric} has no samples")
            else:
                parts.append(
                    f"{r.class_name}.{r.metric} {r.observed:.4g} "
                    f"{'>' if r.bound == '<=' else '<'} {r.threshold:g}"
                )
        more = ", ..." if len(failed) > 3 else ""
        noun = "SLO" if len(failed) == 1 else "SLOs"
        return f"{len(failed)} {noun} failed: {', '.join(parts)}{more}"
    return "ok"


def _count_what_was_written(m: Measured, out: Path) -> dict[str, Any]:
    """`m.total` becomes the aggregate that counts the JSONL files (`workload.run.reconcile`);
    returns where its counts came from (stats.json's and run.json's ``reconcile``)."""
    rec = reconciled(m.total, out, m.slos, wait=m.settle, unreported=m.unreported_workers)
    if rec.note["why"]:
        print(f"agentload: {_reconcile_line(rec.note)}", file=sys.stderr, flush=True)
    m.total = rec.total
    return rec.note


def _reconcile_line(note: dict[str, Any]) -> str:
    """Why the summary's counts are not the live ones (or why they are kept), and its ITL."""
    if note["source"] != "files":
        return str(note["why"])
    itl = {
        "complete": "complete (every successful request's gaps were counted live)",
        "partial": f"partial ({note['itl_ok_requests']} of {note['ok_requests']} successful "
        "requests; requests*.jsonl keeps each request's ITL summary)",
        "none": "unavailable (no successful request was counted live)",
    }[note["itl"]]
    return f"{note['why']}; ITL {itl}"


def _partial_reason(lost: list[dict[str, Any]]) -> str | None:
    if not lost:
        return None
    which = ", ".join(f"worker {w.get('worker')} at t+{w.get('t_s')}s" for w in lost)
    return f"{len(lost)} worker(s) lost ({which}); later load is missing"


def _signame(signum: int | None) -> str:
    try:
        return signal.Signals(int(signum or 0)).name
    except ValueError:
        return f"signal {signum}"


def _fill_system_fingerprint(fingerprint: dict[str, Any], out: Path) -> None:
    """The server names itself only in responses: take the first one the run recorded."""
    entry = fingerprint.get("system_fingerprint")
    if not isinstance(entry, dict) or entry.get("value") not in (None, "unknown"):
        return
    for path in sorted(out.glob("requests*.jsonl")):
        for row in artifacts.iter_jsonl(path):
            if row.get("system_fingerprint"):
                fingerprint["system_fingerprint"] = {
                    "value": row["system_fingerprint"],
                    "source": "response system_fingerprint",
                }
                return


def _trace_block(
    spec: RunSpec,
    out: Path,
    fingerprint: dict[str, Any],
    scrape: dict[str, Any],
    arrivals: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """`summary.trace` (workload.run.replay); None, with a warning, if the trace is unreadable."""
    try:
        return trace_summary(
            spec, read_rows(out), fingerprint=fingerprint, scrape=scrape, arrivals=arrivals
        )
    except AgentloadError as e:
        log.warning("agentload: no trace summary: %s", e)
        return None


def _spec_line(check: dict[str, Any]) -> str:
    """One console line: per-request spec-decode sums next to the server's counter deltas."""
    acc, dr = check["accepted_tokens"], check["draft_tokens"]

    def n(x: Any) -> str:
        return "-" if x is None else f"{x:.0f}"

    line = (
        "spec decode (draft tokens accepted / proposed): the requests' own stats "
        f"{n(acc['client'])} / {n(dr['client'])}, the server's /metrics counters "
        f"{n(acc['server'])} / {n(dr['server'])}"
    )
    d_acc, d_dr = acc["difference"], dr["difference"]
    if d_acc or d_dr:
        line += (
            f" (the server counted {n(d_acc)} / {n(d_dr)} more: requests the run did not "
            "record, e.g. cut off at its end, or other clients)"
            if (d_acc or 0) >= 0 and (d_dr or 0) >= 0
            else f" (server minus requests: {n(d_acc)} / {n(d_dr)}; per-request stats look wrong)"
        )
    return line


def _redacted_target(target: dict[str, Any]) -> dict[str, Any]:
    """The target as run.json keeps it: never a user:password@ from the URL."""
    url = target.get("url") if isinstance(target, dict) else None
    return {**target, "url": redact_url(url)} if isinstance(url, str) else target
