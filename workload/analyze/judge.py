"""How one compared metric is judged: its interval, its verdict, the equivalence test that
turns an unsettled "no detectable change" into "inconclusive", and the split of alpha over
the gated rows (see the method in workload.analyze.verdict)."""

from __future__ import annotations

import math
from typing import Any

from scipy import stats as _sps

from workload.analyze.catalogue import (
    VERDICT_BETTER,
    VERDICT_INCONCLUSIVE,
    VERDICT_MIXED,
    VERDICT_NODATA,
    VERDICT_SAME,
    VERDICT_WORSE,
    MetricDiff,
)
from workload.analyze.comparison import GateTails
from workload.analyze.rundata import RunData
from workload.analyze.thresholds import HEADLINE_TAIL, HEADLINE_TAIL_SHARE


def _exact_interval(counts: tuple[int, int, int, int], tail: float) -> tuple[float, float]:
    """Newcombe's interval for pB - pA from Clopper-Pearson (exact) intervals per side."""
    xa, na, xb, nb = counts
    level = 1 - 2 * tail
    la, ua = _sps.binomtest(xa, na).proportion_ci(level, method="exact")
    lb, ub = _sps.binomtest(xb, nb).proportion_ci(level, method="exact")
    pa, pb = xa / na, xb / nb
    d = pb - pa
    return d - math.hypot(pb - lb, ua - pa), d + math.hypot(ub - pb, pa - la)


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
    """The one-sided quantile for `tail`: Student's t with the block interval's (or the measured
    prior's) df, else normal."""
    if m.method in ("blocks", "prior") and m.df >= 1:
        return float(_sps.t.ppf(1 - tail, m.df))
    return float(_sps.norm.ppf(1 - tail))


def judge(m: MetricDiff, tail: float) -> None:
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


# Past this many times the traffic, "run longer" is not advice: the design cannot settle it.
SETTLE_MAX = 25.0


def equivalence(m: MetricDiff, alpha: float, gate_tail: float) -> None:
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
    if m.method == "exact" and m.counts:
        # Too few sessions (or requests) to rule out the threshold even with no events on
        # either side: judged only for getting worse (the verdict lists it), at any scope --
        # a handful of sessions per block cannot settle 5 points, whatever the servers do.
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
    if m.method == "prior":
        # judged against the measured instance spread: one way only (prior.py)
        m.underpowered = m.eq_bound
        return
    if ub < t:
        return
    m.verdict = VERDICT_INCONCLUSIVE
    ways = []
    if pt < t and h_eq > 0:
        ways.append((h_eq / (t - pt)) ** 2)
    if pt >= t / 2 and pt > 0 and h_gate > 0:
        ways.append((h_gate / pt) ** 2)
    m.settle_factor = max(1.0, min(ways)) if ways else None


def settle(metrics: list[MetricDiff], a: RunData, blocks: int) -> dict[str, Any] | None:
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


def drop_duplicate_gates(metrics: list[MetricDiff]) -> None:
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


def overall_verdict(gated: list[MetricDiff]) -> str:
    """Mixed if gated rows moved both ways, worse if any is worse, inconclusive if any is
    (whatever improved), better if any is better, else no detectable change."""
    any_worse = any(m.verdict == VERDICT_WORSE for m in gated)
    any_better = any(m.verdict == VERDICT_BETTER for m in gated)
    if any_worse and any_better:
        return VERDICT_MIXED
    if any_worse:
        return VERDICT_WORSE
    if any(m.verdict == VERDICT_INCONCLUSIVE for m in gated):
        return VERDICT_INCONCLUSIVE  # "no regression" was not shown, whatever improved
    return VERDICT_BETTER if any_better else VERDICT_SAME


_EVIDENCE = {
    "bootstrap": "session bootstrap",
    "blocks": "t-interval across the canary's own blocks",
    "prior": "against the measured instance spread (too few blocks to estimate it)",
    "exact": "exact test on counts",
    "poisson": "Poisson interval on counts",
}


def decided_by(gated: list[MetricDiff], verdict: str, blocks: int) -> list[str]:
    """Which evidence decided the verdict: the deciding rows and how each was judged."""

    def what(ms: list[MetricDiff]) -> str:
        groups: dict[str, list[str]] = {}
        for m in ms:
            name = m.metric if m.scope == "overall" else f"{m.scope.split(':', 1)[-1]} {m.metric}"
            groups.setdefault(_EVIDENCE.get(m.method, m.method), []).append(name)
        return "; ".join(f"{', '.join(v)} ({k})" for k, v in groups.items())

    if verdict in (VERDICT_WORSE, VERDICT_MIXED, VERDICT_BETTER):
        out = []
        for v in (VERDICT_WORSE, VERDICT_BETTER):
            rows = [m for m in gated if m.verdict == v]
            if rows and (verdict in (v, VERDICT_MIXED)):
                out.append(f"{v}: {what(rows)}")
        return out
    if verdict == VERDICT_INCONCLUSIVE:
        return ["unsettled: " + what([m for m in gated if m.verdict == VERDICT_INCONCLUSIVE])]
    ruled = [m for m in gated if m.underpowered is None and m.verdict == VERDICT_SAME]
    one_way = [m for m in gated if m.underpowered is not None]
    out = ["ruled out: " + what(ruled)] if ruled else []
    if one_way:
        out.append("judged only for getting worse: " + what(one_way))
    return out
