"""End of a run: evaluate SLOs, write run.json / stats.json / junit.xml / report, pick the exit code.

Exit codes (README "CI usage"): 0 pass, 1 errors above the allowed ratio,
2 bad input or unusable target, 3 an SLO violated.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload.errors import EXIT_BAD_INPUT, EXIT_ERRORS, EXIT_OK, EXIT_SLO
from workload.measure import artifacts

log = logging.getLogger("agentload")


@dataclass
class Measured:
    """What a finished run measured and found, next to its RunSpec."""

    total: Any  # workload.measure.stats.Aggregate over the whole run
    slos: dict[str, dict[str, float]]  # the SLOs the aggregate counted goodput with
    started_iso: str
    started_wall: float
    ended_iso: str | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    users: int | None = None  # the user count at the end (the start form may change it)
    generator_health: dict[str, Any] | None = None  # workload.locust.health summary


def exit_code_for(error_ratio: float | None, max_error_ratio: float, slo_results: list[Any]) -> int:
    """The worst applicable outcome: errors above the threshold beat SLO violations."""
    if error_ratio is not None and error_ratio > max_error_ratio:
        return EXIT_ERRORS
    if any(not r.passed for r in slo_results):
        return EXIT_SLO
    return EXIT_OK


def finalize_run(spec: Any, m: Measured) -> int:
    """Write the run's summary artifacts (spec: a workload.run.spec.RunSpec); return the exit code."""
    from workload.measure import slo
    from workload.observe import metrics
    from workload.report.console import console_table

    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    agg = m.total
    summary = agg.summary()
    slos = m.slos
    try:
        slo_results = slo.evaluate_slos(agg, slos)
    except ValueError as e:
        print(f"agentload: error: bad SLO: {e}", file=sys.stderr)
        slo_results = []
        code = EXIT_BAD_INPUT
    else:
        code = exit_code_for(slo.error_ratio(summary), spec.max_error_ratio, slo_results)

    samples = metrics.read_samples(out / "metrics.jsonl")
    scrape = metrics.scrape_summary(samples) if samples else {"absent": ["/metrics (not scraped)"]}
    spec_check = (
        metrics.spec_decode_crosscheck(summary["overall"]["spec_decode"], scrape)
        if samples
        else None
    )

    _fill_system_fingerprint(m.fingerprint, out)
    artifacts.write_json(out / "stats.json", agg.to_dict())
    (out / "junit.xml").write_text(
        slo.junit_xml(slo_results, suite_name=f"agentload.{spec.profile.name}")
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
        "target": m.target,
        "model": spec.model,
        "tokenizer": spec.tokenizer,
        "workers": spec.workers,
        "users": m.users,
        "fingerprint": m.fingerprint,
        "summary": summary,
        "server": scrape,
        "spec_decode_crosscheck": spec_check,
        "slos": slos,
        "slo_results": [r.to_json() for r in slo_results],
        "exit_code": code,
        "generator_health": m.generator_health,
    }
    artifacts.write_json(out / "run.json", run)
    try:
        from workload.report.run_report import write_run_report

        write_run_report(out)
    except Exception as e:  # noqa: BLE001 - the report must never lose the measurements
        log.warning("agentload: report.html not written: %s", e)
    print(console_table(summary), flush=True)
    if spec_check and spec_check["draft_tokens"]["server"]:
        print(_spec_line(spec_check), flush=True)
    for r in slo_results:
        print(("  PASS " if r.passed else "  FAIL ") + r.message, flush=True)
    print(f"agentload: artifacts in {out}  (exit {code})", flush=True)
    return code


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


def _spec_line(check: dict[str, Any]) -> str:
    """One console line: per-request spec-decode sums next to the server's counter deltas."""
    acc, dr = check["accepted_tokens"], check["draft_tokens"]

    def n(x: Any) -> str:
        return "-" if x is None else f"{x:.0f}"

    return (
        f"spec decode: requests report {n(acc['client'])} accepted / {n(dr['client'])} drafted; "
        f"server /metrics delta {n(acc['server'])} / {n(dr['server'])} "
        f"(difference {n(acc['difference'])} / {n(dr['difference'])})"
    )
