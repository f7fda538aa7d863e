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
  (docs/canary-verdict-quality.md). TPOT (per output token) is the headline
  latency; per-chunk ITL (`itl_*`) is a detail gated only when named, because
  under speculative decoding a chunk carries several tokens.
* Between-instance metrics (thresholds.BETWEEN_INSTANCE: percentiles, throughput,
  completed sessions, cached ratio): with paired runs they gate only on a
  trimmed-mean t-interval across >= MIN_BLOCKS interleaved blocks (Yuen's;
  workload.analyze.blocks),
  which holds instance divergence; with one block they are shown, not gated,
  unless a flag names them. Unpaired runs gate them as before.
* Session success, tool-loop failure and error ratios use Fisher's exact test
  on their counts (any n), with a Newcombe/Clopper-Pearson interval.
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
  `confidence`. The split is weighted (gate_tails): the overall TPOT p90/p95
  rows judged across blocks share half of alpha, the other rows the rest.
  The T/2 floor keeps tiny systematic differences (two servers are never
  bit-identical) from being called regressions on long runs; with a run long
  enough that the standard error of the change is ≤ T/4.3, a true change of T
  is flagged with ≥ 90 % probability.
* Overall: mixed if gated metrics moved both ways, worse if any is worse, else
  better if any is better, else no detectable change. Exit code 3 on worse or
  mixed, else 0. Slices (workload.analyze.slices) say where a change happened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as _sps

from workload.analyze.blocks import apply_block_intervals, common_blocks, trimmed_each_end
from workload.analyze.bootstrap import Scope, weights_ahead
from workload.analyze.catalogue import (
    METRICS,
    SLICE_METRICS,
    STEP_METRICS,
    VERDICT_BETTER,
    VERDICT_INCONCLUSIVE,
    VERDICT_MIXED,
    VERDICT_NODATA,
    VERDICT_SAME,
    VERDICT_WORSE,
    CompareError,
    MetricDiff,
)
from workload.analyze.estimate import min_samples, scope_metrics
from workload.analyze.render import render_text as _render_text
from workload.analyze.rundata import RunData, load_pair, load_run
from workload.analyze.serverinfo import class_histogram, error_kinds, server_summary
from workload.analyze.slices import gates_in_slice, slice_filters, spec_lines, where_lines
from workload.analyze.table import Pair, Rows
from workload.analyze.thresholds import (
    BETWEEN_INSTANCE,
    BLOCK_TRIM,
    HEADLINE_TAIL,
    HEADLINE_TAIL_SHARE,
    MIN_BLOCKS,
    PER_CHUNK,
    explicit_gates,
    history_actual_overrides,
    is_explicit,
    profile_compare,
    replays_answers,
    resolve_thresholds,
    threshold_for,
)
from workload.analyze.traffic import (
    VALIDATED_BLOCKS,
    VALIDATED_S,
    divergence_line,
    history_divergence,
    tool_loop_examples,
    traffic_differences,
)
from workload.errors import EXIT_INCONCLUSIVE, EXIT_REGRESSION
from workload.errors import EXIT_OK as EXIT_PASS
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
    blocks: int = 0  # blocks per side behind the between-instance intervals (0/1: none)
    where: list[str] = field(default_factory=list)  # slices that moved, spec-decode hints
    tool_loop: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # first failures
    divergence: dict[str, Any] | None = None  # history: actual, how far the traffic diverged
    # inconclusive: what is unsettled and how much more traffic would settle it
    settle: dict[str, Any] | None = None
    tails: GateTails | None = None  # how alpha was split over the gated rows

    @property
    def weighted_alpha(self) -> bool:
        """Whether the TPOT tail rows got their own share of alpha (gate_tails)."""
        return bool(self.tails and self.tails.headline_rows)

    @property
    def exit_code(self) -> int:
        if self.verdict in (VERDICT_WORSE, VERDICT_MIXED):
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.verdict == VERDICT_INCONCLUSIVE else EXIT_PASS

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
                "metrics Bonferroni-adjusted over gated metrics (weighted: the overall TPOT p90/p95 "
                f"rows across blocks share {HEADLINE_TAIL_SHARE:.0%} of alpha); no detectable change only when "
                "the one-sided (1 - alpha) bound of every gated metric excludes a threshold-sized "
                "regression, else inconclusive; paired cluster bootstrap over "
                f"sessions, trimmed-mean (Yuen, {BLOCK_TRIM:.0%} each end) t-interval across "
                f"blocks for between-instance metrics with >= {MIN_BLOCKS} blocks, Fisher exact test for session/error ratios",
                "gating": self.gating,
                "alpha_split": self.tails.to_dict() if self.tails else None,
            },
            "thresholds": self.thresholds,
            "warnings": self.warnings,
            "blocks": self.blocks,
            "where": self.where,
            "tool_loop_examples": self.tool_loop,
            "traffic_divergence": self.divergence,
            "settle": self.settle,
            "fingerprint_diff": self.fingerprint_diff,
            "metrics": [m.to_dict() for m in self.metrics],
            "error_kinds": self.error_kinds,
            "server": self.server,
            "spec_histograms": self.spec_histograms,
        }

    def render_text(self) -> str:
        """A console table: verdict, gated metrics, per-class detail, TTFT by step."""
        return _render_text(self)


def _exact_interval(counts: tuple[int, int, int, int], tail: float) -> tuple[float, float]:
    """Newcombe's interval for pB - pA from Clopper-Pearson (exact) intervals per side."""
    xa, na, xb, nb = counts
    level = 1 - 2 * tail
    la, ua = _sps.binomtest(xa, na).proportion_ci(level, method="exact")
    lb, ub = _sps.binomtest(xb, nb).proportion_ci(level, method="exact")
    pa, pb = xa / na, xb / nb
    d = pb - pa
    return d - math.hypot(pb - lb, ua - pa), d + math.hypot(ub - pb, pa - la)


@dataclass
class GateTails:
    """The one-sided error share of each gated row: Bonferroni, weighted (see gate_tails)."""

    k: int  # gated rows that can vary: the Bonferroni divisor
    headline: float
    other: float
    headline_rows: frozenset[tuple[str, str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {
            "headline_rows": sorted(f"{s} {m}" for s, m in self.headline_rows),
            "headline_tail": self.headline,
            "other_tail": self.other,
        }

    def of(self, m: MetricDiff) -> float:
        """A gated row's share; a shown row (a class's copy of a gated overall row) is
        judged at the share of the overall row it mirrors."""
        scope = m.scope if m.gated else "overall"
        head = (scope, m.metric) in self.headline_rows and m.method == "blocks"
        return self.headline if head else self.other


def _can_vary(m: MetricDiff) -> bool:
    return m.se is not None and math.isfinite(m.se) and m.se > 0


def gate_tails(metrics: list[MetricDiff], alpha: float) -> GateTails:
    """Split the family's alpha over the gated rows (a weighted Bonferroni, fixed in advance).

    Only gated rows that can vary count (Tarone). The overall TPOT tail rows judged across
    blocks (thresholds.HEADLINE_TAIL) share HEADLINE_TAIL_SHARE of alpha between them, the
    other k rows the rest; the tails still sum to alpha / 2, so the family keeps its level.
    Why: a block row's t has about 5 degrees of freedom, and at an equal share of ~19 rows
    (one-sided 0.13 %) its quantile is 5.5, against 3.0 for the normal rows: the tail rows
    paid most for the family and a broad +40 % tail rise was called worse in ~60 % of 8-block
    canaries. At half of alpha their quantile is 3.8, the others' 3.2
    (docs/canary-verdict-quality.md, Tail trade-off).
    """
    rows = [m for m in metrics if m.gated and _can_vary(m)]
    head = frozenset(
        (m.scope, m.metric)
        for m in rows
        if m.scope == "overall" and m.metric in HEADLINE_TAIL and m.method == "blocks"
    )
    k = max(1, len(rows))
    if not head or len(head) == k:
        return GateTails(k, alpha / (2 * k), alpha / (2 * k))
    return GateTails(
        k,
        alpha / 2 * HEADLINE_TAIL_SHARE / len(head),
        alpha / 2 * (1 - HEADLINE_TAIL_SHARE) / (k - len(head)),
        head,
    )


def _quantile(m: MetricDiff, tail: float) -> float:
    """The one-sided quantile for `tail`: Student's t with the block interval's df, else normal."""
    if m.method == "blocks" and m.df >= 1:
        return float(_sps.t.ppf(1 - tail, m.df))
    return float(_sps.norm.ppf(1 - tail))


def _judge(m: MetricDiff, tail: float) -> None:
    """Fill ci and verdict from change/se/threshold (see module docstring).

    `tail` is the one-sided error share (alpha / 2, Bonferroni-divided for gated rows).
    Bootstrap rows use the normal quantile, block rows Student's t with the trimmed df,
    exact rows Fisher's test (significance) and Newcombe/Clopper-Pearson (interval).
    """
    if m.change is None or m.se is None or not math.isfinite(m.se):
        m.verdict = VERDICT_NODATA
        return
    if m.method == "exact" and m.counts:
        lo, hi = _exact_interval(m.counts, tail)
        xa, na, xb, nb = m.counts
        m.p_value = float(_sps.fisher_exact([[xb, nb - xb], [xa, na - xa]])[1])
        significant = m.p_value < 2 * tail and m.change != 0
        if not significant:  # the interval must then include 0 (Fisher decides, not Newcombe)
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        elif m.change > 0:
            lo = max(lo, 1e-12)
        else:
            hi = min(hi, -1e-12)
        m.ci = (lo, hi)
    else:
        half = _quantile(m, tail) * m.se
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
    half_t = m.threshold / 2.0
    if worse_lo > 0 and worse_pt >= half_t:
        m.verdict = VERDICT_WORSE
    elif worse_hi < 0 and worse_pt <= -half_t:
        m.verdict = VERDICT_BETTER
    else:
        m.verdict = VERDICT_SAME


# The start of the warning for a comparison shorter than the validated design.
SHORT_DESIGN_WARNING = "this comparison ("

# Past this many times the traffic, "run longer" is not advice: the design cannot settle it.
SETTLE_MAX = 25.0


def _equivalence(m: MetricDiff, alpha: float, gate_tail: float) -> None:
    """A gated "no detectable change" row becomes "inconclusive" unless it excludes a regression.

    Equivalence, one-sided: the worse-side bound of the (1 - alpha) interval must stay
    below the threshold (an intersection-union test: "every gated metric is within its
    threshold" holds at level alpha without a multiplicity correction, while "some metric
    is worse" keeps the Bonferroni-adjusted intervals). When it does not, `settle_factor`
    is about how many times this traffic (sessions, or blocks for block intervals) would
    settle the row either way: narrow the bound below the threshold at the current point
    estimate, or, for a point estimate past half the threshold, make the worsening
    significant. Standard errors shrink like 1/sqrt(traffic); with blocks, the t quantile
    also falls, so the factor is on the safe side.
    """
    if m.threshold is None or m.verdict != VERDICT_SAME or m.change is None or m.se is None:
        return
    if m.scope.startswith("slice:"):
        # A request-kind slice (tool-calling steps) gates to say *where* a regression is;
        # ruling one out is the job of the class and overall rows that hold it. Small slices
        # would otherwise make every canary inconclusive (a few structured-output steps).
        return
    sign = 1.0 if m.higher_is_worse else -1.0
    if m.method == "exact" and m.counts and m.scope.startswith("class:"):
        _, na, _, nb = m.counts
        floor = _exact_interval((0, na, 0, nb), alpha)[1]  # no events on either side
        if floor >= m.threshold:
            m.underpowered = floor
            return
    if m.method == "exact" and m.counts:
        lo, hi = _exact_interval(m.counts, alpha)
        pt, t = sign * m.change, m.threshold
        ub = max(sign * lo, sign * hi)
        gate_ub = max(sign * m.ci[0], sign * m.ci[1]) if m.ci else ub
        h_eq, h_gate = max(ub - pt, 0.0), max(gate_ub - pt, 0.0)
        m.eq_bound = sign * ub
    else:
        q_eq = _quantile(m, alpha)
        if m.change_kind == "relative":
            if m.change <= -1 or (not m.higher_is_worse and m.threshold >= 1):
                return
            pt = sign * math.log1p(m.change)
            t = math.log1p(m.threshold) if m.higher_is_worse else -math.log1p(-m.threshold)
            ub = pt + q_eq * m.se
            m.eq_bound = math.expm1(sign * ub)
        else:
            pt, t = sign * m.change, m.threshold
            ub = pt + q_eq * m.se
            m.eq_bound = sign * ub
        h_eq, h_gate = q_eq * m.se, _quantile(m, gate_tail) * m.se
    if ub < t:
        return
    m.verdict = VERDICT_INCONCLUSIVE
    ways = []
    if pt < t and h_eq > 0:
        ways.append((h_eq / (t - pt)) ** 2)
    if pt >= t / 2 and pt > 0 and h_gate > 0:
        ways.append((h_gate / pt) ** 2)
    m.settle_factor = max(1.0, min(ways)) if ways else None


def _settle(metrics: list[MetricDiff], a: RunData, blocks: int) -> dict[str, Any] | None:
    """What an inconclusive comparison lacks: the unsettled rows and the traffic that settles them."""
    open_rows = [m for m in metrics if m.gated and m.verdict == VERDICT_INCONCLUSIVE]
    if not open_rows:
        return None
    factors = [m.settle_factor for m in open_rows if m.settle_factor]
    f = max(factors) if factors else None
    sessions = a.sess_cols.n  # not len(a.sessions): that re-reads every row as a dict
    dur = a.duration_s
    out: dict[str, Any] = {
        "metrics": [f"{m.scope} {m.metric}" for m in open_rows],
        "factor": f,
        "blocks": blocks,
        "sessions_per_side": sessions,
        "duration_s": dur,
    }
    if f is None:
        out["line"] = "run more traffic"
    elif f > SETTLE_MAX:
        out["line"] = (
            f"more than {SETTLE_MAX:g}x this traffic, so this design cannot settle it: raise "
            "the threshold, or turn the metric off if it does not matter for this rollout "
            "(--threshold METRIC=off)"
        )
    else:
        more = (
            f"about {f:.1f}x this traffic (≈ {math.ceil(f * max(sessions, 1)):,} sessions per side"
        )
        if blocks >= 2 and dur:
            n = math.ceil(f * blocks)
            per = dur / blocks
            more += f"; --blocks {n}, ≈ {n * per / 60:.0f} min per side)"
        elif dur:
            more += f"; ≈ {f * dur / 60:.1f} min per side)"
        else:
            more += ")"
        out["line"] = f"run {more}"
        out["blocks_needed"] = math.ceil(f * blocks) if blocks >= 2 else None
    return out


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


def default_confidence(run_a: dict, run_b: dict) -> float:
    """1 - the recorded profile's `compare.alpha` (B's, else A's), else 0.95."""
    alpha = profile_compare(run_b).get("alpha", profile_compare(run_a).get("alpha", 0.05))
    return 1.0 - float(alpha) if isinstance(alpha, (int, float)) else 0.95


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
    if isinstance(run_a, RunData) or isinstance(run_b, RunData):
        a = run_a if isinstance(run_a, RunData) else load_run(run_a)
        b = run_b if isinstance(run_b, RunData) else load_run(run_b)
    else:
        a, b = load_pair(run_a, run_b)
    if confidence is None:
        confidence = default_confidence(a.run, b.run)
    if not 0.5 < confidence < 1:
        raise CompareError(f"confidence must be in (0.5, 1), got {confidence}")
    th = resolve_thresholds(a.run, b.run, thresholds)
    explicit = explicit_gates(thresholds)
    warnings: list[str] = []
    paired = True
    differs = traffic_differences(a.run, b.run)
    if differs:
        paired = False
        warnings.append(f"traffic differs ({'; '.join(differs)}); sessions not paired")
    if not a.req_cols.n or not b.req_cols.n:
        warnings.append("a run has no request rows")
    classes = sorted(set(a.classes) | set(b.classes))
    dur = (a.duration_s, b.duration_s)
    if not (dur[0] and dur[1]):
        warnings.append("run duration unknown; counts compared as totals")
    short = min((d for d in dur if d), default=None)
    nb = len(common_blocks(a, b))
    per_block = short / nb if short is not None and nb >= 2 else short
    if per_block is not None and (per_block < 0.9 * VALIDATED_S or 2 <= nb < VALIDATED_BLOCKS):
        design = f"{nb} blocks x {per_block:.0f} s" if nb >= 2 else f"one run of {per_block:.0f} s"
        warnings.append(
            f"{SHORT_DESIGN_WARNING}{design}) is shorter than the design the verdict was validated "
            f"at ({VALIDATED_BLOCKS} blocks x {VALIDATED_S:.0f} s of mixed on the simulator, "
            "docs/canary-verdict-quality.md): fewer blocks widen the block intervals, shorter "
            "blocks make the start-up wave a larger share"
        )

    rng = np.random.default_rng(seed)
    metrics: list[MetricDiff] = []
    top_names = list(METRICS)
    scopes: list[tuple[str, str | None]] = [("overall", None)] + [
        (f"class:{c}", c) for c in classes
    ]
    pair = Pair((a.req_cols, b.req_cols), (a.sess_cols, b.sess_cols))
    replays = replays_answers(a.run) or replays_answers(b.run)
    req = (Rows(pair.req[0]), Rows(pair.req[1]))
    sess = (Rows(pair.sess[0]), Rows(pair.sess[1]))
    # Every scope first (overall, classes, then per class its steps and slices), in the
    # order their weights are drawn, so the draws can run ahead in a second thread.
    jobs: list[tuple[str, Scope, list[str]]] = []
    for name, cls in scopes:
        ra, rb = (pair.of_class(r, cls) for r in req)
        sa, sb = (pair.of_class(s, cls) for s in sess)
        jobs.append((name, Scope(ra, rb, sa, sb, paired, pair.n_ids, replays), top_names))
    if steps:
        for cls in classes:
            ra, rb = (pair.of_class(r, cls) for r in req)
            sta, stb = ra.col("step"), rb.col("step")
            for k in np.unique(np.concatenate([sta, stb])).tolist():
                sc = Scope(
                    ra.where(sta == k), rb.where(stb == k), None, None, paired, pair.n_ids, replays
                )
                jobs.append((f"step:{cls}:{k}", sc, list(STEP_METRICS)))
            for label, keep_a, keep_b in slice_filters(ra, rb):
                sc = Scope(
                    ra.where(keep_a), rb.where(keep_b), None, None, paired, pair.n_ids, replays
                )
                jobs.append((f"slice:{cls}:{label}", sc, list(SLICE_METRICS)))
    drawn = weights_ahead([sc for _, sc, _ in jobs], rng, n_boot)
    for (name, sc, names), w in zip(jobs, drawn, strict=True):
        metrics += scope_metrics(name, sc, names, rng, n_boot, dur, w)
    n_blocks = apply_block_intervals(metrics, a, b, pair, scopes, paired, rng)

    for m in metrics:
        local = m.scope.startswith(("step:", "slice:"))
        t = threshold_for(th, "class:" + m.scope.split(":")[1] if local else m.scope, m.metric)
        if t is not None:
            m.threshold = t / 100.0  # step/slice rows use it for the T/2 floor
            m.gated = not local or (
                m.scope.startswith("slice:") and gates_in_slice(m.scope, m.metric)
            )
    for m in metrics:
        if m.gated and METRICS[m.metric].kind == "shift" and not m.paired_share:
            m.gated, m.note = False, "runs do not pair: the percentiles gate"
    for m in metrics:
        if not m.gated or is_explicit(explicit, m.scope, m.metric):
            continue
        if m.metric in PER_CHUNK:
            # Under spec decode a chunk carries several tokens: per-chunk gaps shrink when
            # acceptance falls. TPOT (per token) gates instead.
            m.gated, m.note = False, "per-chunk detail; TPOT gates (name it to gate)"
        elif m.paired_share and m.metric in BETWEEN_INSTANCE and m.method != "blocks":
            # Paired single-block runs: no between-instance estimate for these.
            why = (
                f"needs >= {MIN_BLOCKS} blocks per side, --blocks"
                if n_blocks < MIN_BLOCKS
                else f"fewer than {MIN_BLOCKS} blocks with data on both sides"
            )
            m.gated, m.note = (
                False,
                f"not gated: no between-instance estimate ({why}; name it to gate)",
            )
        elif m.paired_share and m.metric in BETWEEN_INSTANCE and m.scope.startswith("class:"):
            # A class's tails and work done, judged across blocks, rest on that class's share
            # of the traffic: a small class (mixed's two background users) cannot rule out
            # any useful change in 8 blocks. The overall row gates; the class row is shown
            # (and named in "where" when it moved).
            m.gated, m.note = False, "class row shown; the overall row gates (name it to gate)"
    _drop_duplicate_gates(metrics)
    alpha = 1.0 - confidence
    tails = gate_tails(metrics, alpha)
    k = tails.k
    for m in metrics:
        _judge(m, tails.of(m) if m.gated or m.same_as or m.note else alpha / 2)
        if m.gated:
            _equivalence(m, alpha, tails.of(m))
        if m.gated and m.scope == "overall" and m.verdict == VERDICT_NODATA and max(m.n_a, m.n_b):
            # Measured, but too few to judge (a short canary's latency shift): it could not
            # have seen a regression. A metric with no samples on either side does not apply.
            m.verdict = VERDICT_INCONCLUSIVE
            m.settle_factor = min_samples(m.metric) / max(1, min(m.n_a, m.n_b))
    gated = [m for m in metrics if m.gated]
    any_worse = any(m.verdict == VERDICT_WORSE for m in gated)
    any_better = any(m.verdict == VERDICT_BETTER for m in gated)
    if any_worse and any_better:
        verdict = VERDICT_MIXED
    elif any_worse:
        verdict = VERDICT_WORSE
    elif any(m.verdict == VERDICT_INCONCLUSIVE for m in gated):
        verdict = VERDICT_INCONCLUSIVE  # "no regression" was not shown, whatever improved
    elif any_better:
        verdict = VERDICT_BETTER
    else:
        verdict = VERDICT_SAME
    weak = [m for m in gated if m.underpowered is not None]
    if weak:
        warnings.append(
            "too few to rule out their threshold, so judged only for getting worse: "
            + ", ".join(
                f"{m.scope} {m.metric} ({min(m.n_a, m.n_b):,} per side rule out only "
                f"{100 * m.underpowered:.0f} pp)"
                for m in weak
            )
        )
    nodata = [  # rows with no sample on either side do not apply (a non-streamed class's TTFT)
        f"{m.scope} {m.metric}"
        for m in gated
        if m.verdict == VERDICT_NODATA and max(m.n_a, m.n_b) > 0
    ]
    if nodata:
        warnings.append("not enough data to judge: " + ", ".join(nodata))
    divergence = None
    if replays:
        divergence = history_divergence(pair)
        warnings.append(divergence_line(divergence))
        over = history_actual_overrides(a.run) | history_actual_overrides(b.run)
        if over:
            warnings.append(
                "history: actual, so the profile's compare.history_actual thresholds apply ("
                + ", ".join(f"{k}: {'off' if v is None else v}" for k, v in sorted(over.items()))
                + "): the sessions follow the server's answers, and their tails move more "
                "between two instances"
            )
    where = where_lines(metrics) + spec_lines(metrics)
    loops = {"a": tool_loop_examples(a.req_cols.loop_rows()), "b": tool_loop_examples(b.req_cols.loop_rows())}  # fmt: skip

    ek = {"a": error_kinds(a, scopes), "b": error_kinds(b, scopes)}
    server = {"a": server_summary(a.metrics), "b": server_summary(b.metrics)}
    if not a.metrics or not b.metrics:
        warnings.append(
            "server /metrics samples absent in "
            + ("A and B" if not (a.metrics or b.metrics) else ("A" if not a.metrics else "B"))
        )
    spec = {
        "a": {c: class_histogram(a.req_cols, c) for c in classes},
        "b": {c: class_histogram(b.req_cols, c) for c in classes},
    }
    return Comparison(
        a, b, metrics, fingerprint_diff(a.run, b.run), ek, server, spec, warnings,
        confidence, n_boot, th, k, verdict, _gating_sentence(metrics, n_blocks, tails),
        n_blocks, where, loops, divergence, _settle(metrics, a, n_blocks), tails,
    )  # fmt: skip


def _trim_words(blocks: int) -> str:
    """How the block interval treats the extremes, for the gating sentence."""
    g = trimmed_each_end(blocks)
    if g == 0:
        return "the plain mean: too few blocks to trim"
    return (
        f"trimmed mean: the {'most extreme block' if g == 1 else f'{g} most extreme blocks'} "
        "at each end left out, so one instance's bad block does not decide"
    )


def _gating_sentence(
    metrics: list[MetricDiff], blocks: int = 0, tails: GateTails | None = None
) -> str:
    """One or two sentences for the verdict box: which metrics gate, and why."""
    gated = [m for m in metrics if m.gated]
    shifts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "shift"})
    pcts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "quantile"})
    by_blocks = sorted({m.metric for m in gated if m.method == "blocks"})
    held = sorted({m.metric for m in metrics if m.note and "between-instance" in m.note})
    out = []
    if shifts:
        out.append(
            f"Latency gates on the paired shift ({', '.join(shifts)}: median over the requests "
            "both runs served of B/A; TPOT, per output token, is the headline, per-chunk ITL a "
            "detail because spec-decode chunks carry several tokens)"
        )
    elif pcts:
        out.append(
            f"The runs do not pair (different traffic), so latency gates on the percentiles "
            f"({', '.join(pcts)})"
        )
    else:
        out.append("No latency metric gates")
    named = [x for x in pcts if x not in by_blocks]
    if shifts and named:
        out.append(f"{', '.join(named)} gate because a threshold flag names them")
    if by_blocks:
        out.append(
            f"{', '.join(by_blocks)} gate on a t-interval across {blocks} blocks per side "
            f"({_trim_words(blocks)}), which holds the divergence between two instances of a "
            "server"
            + (
                f"; {' and '.join(sorted(m for _, m in tails.headline_rows))}, the headline tail, "
                f"share {HEADLINE_TAIL_SHARE:.0%} of the family's error budget and the other "
                "gated rows the rest"
                if tails and tails.headline_rows
                else ""
            )
        )
    elif held:
        out.append(
            f"{', '.join(held)} (tails and work done) are shown but not gated: with "
            f"{'one block' if blocks <= 1 else f'{blocks} blocks'} per side"
            f"{' (too few with data)' if blocks >= MIN_BLOCKS else ''} there is no "
            "between-instance estimate, and two instances of the same server differ on them by "
            f"more than a within-run interval knows (run >= {MIN_BLOCKS} blocks, --blocks, or name "
            "one, e.g. --threshold tpot_p95=10)"
        )
    return "; ".join(out) + "."
