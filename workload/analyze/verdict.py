"""A/B comparison of two run directories, with uncertainty and a verdict.

Method (docs/canary.md, "Verdict method"):

* Every metric is computed from the raw rows (requests*.jsonl,
  sessions*.jsonl), per scope: overall, per traffic class, per (class, step).
* Uncertainty comes from a cluster bootstrap over sessions. Seeded traffic
  gives both runs the same session ids, so a session present in both runs is
  resampled *jointly* (paired); sessions present in one run only are resampled
  independently within their run (a stratified bootstrap). All requests of a
  resampled session come along, so within-session correlation is respected.
  Counts (completed sessions/requests per minute) use a Poisson interval.
  When sessions pair, latency percentiles are over the (session, step)
  requests both runs completed, so a side that fell behind does not change
  the mix of steps compared (its missing work shows in throughput/counts).
* Latency gates on the **paired per-request shift** (`ttft_shift`, `itl_shift`,
  `e2e_shift`): the median, over the (session, step) requests both runs served,
  of log(B/A) (ITL: the per-request mean), reported as exp(median) − 1, with the
  same session-cluster bootstrap. Two instances of the same server reorder a
  few requests in the tail (start-up waves, preemption cascades), which moves
  p95 by more than 10 % with no change in the server; the paired median does
  not move for that, and a real slowdown of every request moves it fully
  (docs/canary-verdict-quality.md). When the runs pair, the percentile rows
  (p50/p95/p99) are shown with their intervals and verdicts but do not gate
  unless a flag names them (`--threshold ttft_p95=10`); when the runs do not
  pair (different seed or profile) there is no shift, and the percentiles with
  a threshold gate as before. With paired runs, `itl_shift`,
  `output_throughput`, `cached_ratio` and `completed_sessions` are likewise
  shown but gate only when named (PAIRED_REPORT_ONLY: two instances of the same
  server differ on them by more than their within-run intervals).
* Changes: relative (B/A − 1) for percentiles, counts and acceptance length,
  computed on the log scale; absolute (percentage points) for ratios. The
  interval is the normal interval from the bootstrap standard error.
* Verdict per metric with threshold T (same unit as the change, sign chosen
  so that positive = worse): **worse** when the interval lies above 0 *and*
  the point estimate is at least T/2; **better** symmetrically; otherwise
  **no detectable change**. The intervals of gated metrics (those with a
  threshold, overall and per class) are Bonferroni-adjusted over the gated
  metrics that can vary (Tarone: a metric with zero spread in both runs cannot
  be flagged and does not count; neither does a metric with too little data,
  nor a class row identical to the overall row), so the whole family keeps
  `confidence`.
  The T/2 floor keeps tiny systematic differences (two servers are never
  bit-identical) from being called regressions on long runs; with a run long
  enough that the standard error of the change is ≤ T/4.3, a true change of T
  is flagged with ≥ 90 % probability.
* Overall: worse if any gated metric is worse, else better if any is better,
  else no detectable change. Exit code 3 on worse, else 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as _sps

from workload.analyze.bootstrap import Scope
from workload.analyze.catalogue import (
    METRICS,
    STEP_METRICS,
    VERDICT_BETTER,
    VERDICT_NODATA,
    VERDICT_SAME,
    VERDICT_WORSE,
    CompareError,
    MetricDiff,
)
from workload.analyze.estimate import scope_metrics
from workload.analyze.render import render_text as _render_text
from workload.analyze.rundata import RunData, load_run
from workload.analyze.serverinfo import error_kinds, server_summary, spec_histogram
from workload.analyze.thresholds import (
    PAIRED_REPORT_ONLY,
    explicit_gates,
    is_explicit,
    profile_compare,
    resolve_thresholds,
    threshold_for,
)
from workload.errors import EXIT_OK as EXIT_PASS
from workload.errors import EXIT_REGRESSION
from workload.observe.fingerprint import fingerprint_diff


@dataclass
class Comparison:
    """The result of comparing run A (baseline) with run B (candidate)."""

    run_a: RunData
    run_b: RunData
    metrics: list[MetricDiff]
    fingerprint_diff: list[dict[str, Any]]
    error_kinds: dict[str, dict[str, dict[str, int]]]
    server: dict[str, dict[str, Any]]
    spec_histograms: dict[str, dict[str, list[int]]]
    warnings: list[str]
    confidence: float
    n_boot: int
    thresholds: dict[str, float]
    gated_count: int
    verdict: str = VERDICT_SAME
    gating: str = ""  # one sentence: which metrics gate and why

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.verdict == VERDICT_WORSE else EXIT_PASS

    def rows(self, scope: str | None = None, *, gated: bool | None = None) -> list[MetricDiff]:
        return [
            m
            for m in self.metrics
            if (scope is None or m.scope == scope) and (gated is None or m.gated == gated)
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (comparison.json)."""
        return {
            "schema_version": 1,
            "run_a": {"path": str(self.run_a.path), "run_id": self.run_a.run.get("run_id")},
            "run_b": {"path": str(self.run_b.path), "run_id": self.run_b.run.get("run_id")},
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "method": {
                "confidence": self.confidence,
                "n_boot": self.n_boot,
                "gated_metrics": self.gated_count,
                "rule": "worse: interval above 0 and change >= threshold/2; intervals of gated "
                "metrics Bonferroni-adjusted over gated metrics; paired cluster bootstrap over sessions",
                "gating": self.gating,
            },
            "thresholds": self.thresholds,
            "warnings": self.warnings,
            "fingerprint_diff": self.fingerprint_diff,
            "metrics": [m.to_dict() for m in self.metrics],
            "error_kinds": self.error_kinds,
            "server": self.server,
            "spec_histograms": self.spec_histograms,
        }

    def render_text(self) -> str:
        """A console table: verdict, gated metrics, per-class detail, TTFT by step."""
        return _render_text(self)


def _judge(m: MetricDiff, z: float) -> None:
    """Fill ci and verdict from change/se/threshold (see module docstring)."""
    if m.change is None or m.se is None or not math.isfinite(m.se):
        m.verdict = VERDICT_NODATA
        return
    half = z * m.se
    if m.change_kind == "relative":
        lc = math.log1p(m.change)
        lo, hi = math.expm1(lc - half), math.expm1(lc + half)
    else:
        lo, hi = m.change - half, m.change + half
    m.ci = (lo, hi)
    if m.threshold is None:
        m.verdict = (
            VERDICT_SAME
            if lo <= 0 <= hi
            else (VERDICT_WORSE if (lo > 0) == m.higher_is_worse else VERDICT_BETTER)
        )
        return
    sign = 1.0 if m.higher_is_worse else -1.0
    worse_lo, worse_hi = sorted((sign * lo, sign * hi))
    worse_pt = sign * m.change
    half = m.threshold / 2.0
    if worse_lo > 0 and worse_pt >= half:
        m.verdict = VERDICT_WORSE
    elif worse_hi < 0 and worse_pt <= -half:
        m.verdict = VERDICT_BETTER
    else:
        m.verdict = VERDICT_SAME


def _drop_duplicate_gates(metrics: list[MetricDiff]) -> None:
    """Un-gate a class row that is the overall row again (that class holds all the data).

    When one class carries every sample of a metric (e.g. only the streamed class
    has TTFT), its row and the overall row are the same test on the same data;
    gating both would only spend Bonferroni budget twice. Same samples means same
    counts and same point values on both sides; a class-scoped threshold that
    differs from the overall one keeps the class row gated.
    """
    overall = {m.metric: m for m in metrics if m.scope == "overall" and m.gated}
    for m in metrics:
        o = overall.get(m.metric)
        if (
            o is not None
            and m.gated
            and m.scope.startswith("class:")
            and (m.n_a, m.n_b, m.a, m.b, m.threshold) == (o.n_a, o.n_b, o.a, o.b, o.threshold)
        ):
            m.gated, m.same_as = False, "overall"


def _traffic_key(run: dict) -> tuple[Any, Any]:
    prof = run["profile"] if isinstance(run.get("profile"), dict) else {}
    return run.get("seed", prof.get("seed")), run.get("profile_name", prof.get("name"))


def compare_runs(
    run_a: Path | str | RunData,
    run_b: Path | str | RunData,
    thresholds: dict | None = None,
    *,
    confidence: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    steps: bool = True,
) -> Comparison:
    """Compare baseline A with candidate B; see the module docstring for the method.

    `confidence` defaults to 1 - the profile's `compare.alpha`, else 0.95.
    """
    if n_boot < 100:
        raise CompareError(f"n_boot must be at least 100, got {n_boot}")
    a = run_a if isinstance(run_a, RunData) else load_run(run_a)
    b = run_b if isinstance(run_b, RunData) else load_run(run_b)
    if confidence is None:
        alpha = profile_compare(b.run).get("alpha", profile_compare(a.run).get("alpha", 0.05))
        confidence = 1.0 - float(alpha) if isinstance(alpha, (int, float)) else 0.95
    if not 0.5 < confidence < 1:
        raise CompareError(f"confidence must be in (0.5, 1), got {confidence}")
    th = resolve_thresholds(a.run, b.run, thresholds)
    explicit = explicit_gates(thresholds)
    warnings: list[str] = []
    paired = True
    ka, kb = _traffic_key(a.run), _traffic_key(b.run)
    if ka != kb and a.run and b.run:
        paired = False
        warnings.append(f"traffic differs (seed/profile A={ka} B={kb}); sessions not paired")
    if not a.requests or not b.requests:
        warnings.append("a run has no request rows")
    classes = sorted(set(a.classes) | set(b.classes))
    dur = (a.duration_s, b.duration_s)
    if not (dur[0] and dur[1]):
        warnings.append("run duration unknown; counts compared as totals")

    rng = np.random.default_rng(seed)
    metrics: list[MetricDiff] = []
    top_names = list(METRICS)
    scopes: list[tuple[str, str | None]] = [("overall", None)] + [
        (f"class:{c}", c) for c in classes
    ]
    for name, cls in scopes:

        def pick(rows: list[dict], c: str | None = cls) -> list[dict]:
            return rows if c is None else [r for r in rows if r.get("user_class") == c]

        sc = Scope(pick(a.requests), pick(b.requests), pick(a.sessions), pick(b.sessions), paired)
        metrics += scope_metrics(name, sc, top_names, rng, n_boot, dur)
    if steps:
        for cls in classes:
            ra = [r for r in a.requests if r.get("user_class") == cls]
            rb = [r for r in b.requests if r.get("user_class") == cls]
            for k in sorted({int(r.get("step") or 0) for r in ra + rb}):
                sa = [r for r in ra if int(r.get("step") or 0) == k]
                sb = [r for r in rb if int(r.get("step") or 0) == k]
                sc = Scope(sa, sb, [], [], paired)
                metrics += scope_metrics(
                    f"step:{cls}:{k}", sc, list(STEP_METRICS), rng, n_boot, dur
                )

    for m in metrics:
        step = m.scope.startswith("step:")
        t = threshold_for(th, "class:" + m.scope.split(":")[1] if step else m.scope, m.metric)
        if t is not None:
            m.threshold = t / 100.0  # per-step rows use it for the T/2 floor but do not gate
            m.gated = not step
    by_key = {(m.scope, m.metric): m for m in metrics}
    for m in metrics:
        if m.gated and METRICS[m.metric].kind == "shift" and not m.paired_share:
            m.gated, m.note = False, "runs do not pair: the percentiles gate"
    # Paired data: percentiles, and the metrics that two instances of the same server
    # disagree on, are shown but gate only when a flag names them (report-only set first,
    # so a percentile's note knows whether its shift gates).
    demote = [
        m
        for m in metrics
        if m.gated and m.paired_share and not is_explicit(explicit, m.scope, m.metric)
    ]
    for m in demote:
        if m.metric in PAIRED_REPORT_ONLY:
            m.gated, m.note = False, "not gated by default; name it to gate"
    for m in demote:
        if METRICS[m.metric].kind == "quantile":
            shift = by_key.get((m.scope, m.metric.split("_")[0] + "_shift"))
            if shift is not None and shift.paired_share:
                why = f"{shift.metric} gates" if shift.gated else "name it to gate"
                m.gated, m.note = False, f"not gated; {why}"
    _drop_duplicate_gates(metrics)
    alpha = 1.0 - confidence
    # Tarone: only gated metrics that can vary count towards the Bonferroni divisor.
    k = sum(1 for m in metrics if m.gated and m.se is not None and math.isfinite(m.se) and m.se > 0)
    k = max(1, k)
    z_gated = float(_sps.norm.ppf(1 - alpha / (2 * k)))
    z_plain = float(_sps.norm.ppf(1 - alpha / 2))
    for m in metrics:
        _judge(m, z_gated if m.gated or m.same_as or m.note else z_plain)
    gated = [m for m in metrics if m.gated]
    if any(m.verdict == VERDICT_WORSE for m in gated):
        verdict = VERDICT_WORSE
    elif any(m.verdict == VERDICT_BETTER for m in gated):
        verdict = VERDICT_BETTER
    else:
        verdict = VERDICT_SAME
    nodata = [f"{m.scope} {m.metric}" for m in gated if m.verdict == VERDICT_NODATA]
    if nodata:
        warnings.append("not enough data to judge: " + ", ".join(nodata))

    ek = {"a": error_kinds(a, scopes), "b": error_kinds(b, scopes)}
    server = {"a": server_summary(a.metrics), "b": server_summary(b.metrics)}
    if not a.metrics or not b.metrics:
        warnings.append(
            "server /metrics samples absent in "
            + ("A and B" if not (a.metrics or b.metrics) else ("A" if not a.metrics else "B"))
        )
    spec = {
        "a": {c: spec_histogram(a.requests, c) for c in classes},
        "b": {c: spec_histogram(b.requests, c) for c in classes},
    }
    return Comparison(
        a, b, metrics, fingerprint_diff(a.run, b.run), ek, server, spec, warnings,
        confidence, n_boot, th, k, verdict, _gating_sentence(metrics),
    )  # fmt: skip


def _gating_sentence(metrics: list[MetricDiff]) -> str:
    """One sentence for the verdict box: which latency metrics gate, and why."""
    gated = [m for m in metrics if m.gated]
    shifts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "shift"})
    pcts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "quantile"})
    shown = sorted({m.metric for m in metrics if m.note and m.note.startswith("not gated")})
    if shifts:
        s = (
            f"Latency gates on the paired shift ({', '.join(shifts)}: median over the requests "
            "both runs served of B/A), which a slowdown of every request moves but a few "
            "requests changing places in the tail does not"
        )
        if shown:
            s += (
                f"; {', '.join(shown)} are shown but do not gate, because two instances of the "
                "same server differ on them by more than their intervals (name one to gate it, "
                "e.g. --threshold ttft_p95=10)"
            )
        if pcts:
            s += f"; {', '.join(pcts)} gate because a threshold flag names them"
        return s + "."
    if pcts:
        return (
            f"The runs do not pair (different seed or profile), so latency gates on the "
            f"percentiles ({', '.join(pcts)})."
        )
    return "No latency metric gates."
