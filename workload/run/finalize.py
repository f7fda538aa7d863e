"""End of a run: evaluate SLOs, write run.json / stats.json / junit.xml / report, pick the exit code.

Exit codes (docs/ci.md): 0 pass, 1 errors above the allowed ratio,
2 bad input or unusable target, 3 an SLO violated.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from workload.measure import artifacts

log = logging.getLogger("agentload")

EXIT_OK = 0
EXIT_ERRORS = 1
EXIT_BAD_INPUT = 2
EXIT_SLO = 3


def profile_slos(profile: Any) -> dict[str, dict[str, float]]:
    """SLOs per class from the profile (only the thresholds that are set)."""
    out: dict[str, dict[str, float]] = {}
    for name, cls in profile.classes.items():
        slo = getattr(cls, "slo", None)
        if slo is None:
            continue
        values = slo.model_dump(exclude_none=True) if hasattr(slo, "model_dump") else dict(slo)
        if values:
            out[name] = values
    return out


def merge_slos(
    base: dict[str, dict[str, float]], overrides: dict[str, dict[str, float]], classes: list[str]
) -> dict[str, dict[str, float]]:
    """--slo flags win; an unqualified flag applies to every class."""
    out = {k: dict(v) for k, v in base.items()}
    for cls, values in overrides.items():
        targets = classes if cls == "*" else [cls]
        for t in targets:
            out.setdefault(t, {}).update(values)
    return out


def exit_code_for(error_ratio: float | None, max_error_ratio: float, slo_results: list[Any]) -> int:
    """The worst applicable outcome: errors above the threshold beat SLO violations."""
    if error_ratio is not None and error_ratio > max_error_ratio:
        return EXIT_ERRORS
    if any(not r.passed for r in slo_results):
        return EXIT_SLO
    return EXIT_OK


def finalize_run(rt: Any) -> int:
    """Write the run's summary artifacts from a finished runtime; return the exit code."""
    from workload.measure import slo
    from workload.observe import metrics
    from workload.report.console import console_table

    out = Path(rt.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    agg = rt.total
    summary = agg.summary()
    slos = rt.slos
    try:
        slo_results = slo.evaluate_slos(agg, slos)
    except ValueError as e:
        print(f"agentload: error: bad SLO: {e}", file=sys.stderr)
        slo_results = []
        code = EXIT_BAD_INPUT
    else:
        max_err = float(rt.opts.max_error_ratio)
        if max_err < 0:
            max_err = float(getattr(rt.profile, "max_error_ratio", 0.05))
        code = exit_code_for(slo.error_ratio(summary), max_err, slo_results)

    samples = []
    mpath = out / "metrics.jsonl"
    if mpath.exists():
        samples = list(artifacts.iter_jsonl(mpath))
    scrape = metrics.scrape_summary(samples) if samples else {"absent": ["/metrics (not scraped)"]}
    spec_check = (
        metrics.spec_decode_crosscheck(summary["overall"]["spec_decode"], scrape)
        if samples
        else None
    )

    _fill_system_fingerprint(rt.fingerprint, out)
    artifacts.write_json(out / "stats.json", agg.to_dict())
    (out / "junit.xml").write_text(
        slo.junit_xml(slo_results, suite_name=f"agentload.{rt.profile.name}")
    )
    run = {
        "schema_version": artifacts.SCHEMA_VERSION,
        "run_id": rt.run_id,
        "started_at": rt.started_iso,
        "ended_at": rt.ended_iso or artifacts.iso_now(),
        "duration_s": round(__import__("time").time() - rt.started_wall, 3),
        "argv": rt.opts.agent_argv,
        "profile_name": rt.profile.name,
        "profile": rt.profile.model_dump(mode="json"),
        "seed": rt.seed,
        "labels": getattr(rt, "labels", {}),
        "target": rt.target,
        "model": rt.model,
        "tokenizer": rt.opts.tokenizer,
        "workers": rt.workers,
        "users": getattr(rt.opts, "num_users", None),
        "fingerprint": rt.fingerprint,
        "summary": summary,
        "server": scrape,
        "spec_decode_crosscheck": spec_check,
        "slos": slos,
        "slo_results": [r.to_json() for r in slo_results],
        "exit_code": code,
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
