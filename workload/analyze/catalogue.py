"""The metric catalogue of a comparison: what each metric is, how it is judged, the verdicts.

`METRICS` names every metric `compare` computes; `MetricDiff` is one metric in one
scope (overall, a traffic class, a class's session step), A against B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

VERDICT_WORSE = "worse"
VERDICT_BETTER = "better"
VERDICT_SAME = "no detectable change"
VERDICT_NODATA = "insufficient data"
# Some gated metrics worse, others better: exits like "worse" (any gated regression fails).
VERDICT_MIXED = "mixed"
# A gated metric whose interval still admits a change of its threshold's size (no
# equivalence): the comparison could not have seen such a regression. Exits 4.
VERDICT_INCONCLUSIVE = "inconclusive"

LATENCIES = ("ttft", "itl", "tpot", "e2e")
QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
# The percentiles every latency gets; p90 only for TPOT (below).
LATENCY_QUANTILES = ("p50", "p95", "p99")
# Latencies a run may not have (no row then): time to the first visible content
OPTIONAL_LATENCIES = ("ttft_content",)


@dataclass(frozen=True)
class MetricDef:
    """How one metric is computed and judged."""

    name: str
    kind: str  # quantile | shift | ratio | mean | count
    change: str  # relative | absolute
    higher_is_worse: bool
    unit: str


def _metric_defs() -> dict[str, MetricDef]:
    defs = {}
    for lat in LATENCIES:
        for qn in LATENCY_QUANTILES:
            n = f"{lat}_{qn}"
            defs[n] = MetricDef(n, "quantile", "relative", True, "ms")
    # TPOT p90: a broad tail rise (the slowest quarter of streams slower) at about two thirds
    # of p95's between-instance spread, so a canary's blocks resolve it more finely
    # (docs/canary-verdict-quality.md, "Tail trade-off").
    defs["tpot_p90"] = MetricDef("tpot_p90", "quantile", "relative", True, "ms")
    # Time to the first visible content (reasoning excluded; ttft counts it): what a user of
    # a reasoning model waits for. Shown; gated when a threshold names it.
    defs["ttft_content_p95"] = MetricDef("ttft_content_p95", "quantile", "relative", True, "ms")
    for lat in ("ttft", "itl", "tpot", "e2e"):
        n = f"{lat}_shift"
        defs[n] = MetricDef(n, "shift", "relative", True, "ms")
    for n, worse in (
        ("error_ratio", True),
        ("tool_loop_failure_ratio", True),
        ("session_success_ratio", False),
        ("cached_ratio", False),
        ("spec_acceptance_rate", False),
        # goodput: rows judged against the run's SLOs when recorded (``slo_met``)
        ("request_goodput_ratio", False),
        ("session_goodput_ratio", False),
    ):
        defs[n] = MetricDef(n, "ratio", "absolute", worse, "ratio")
    defs["spec_acceptance_length"] = MetricDef(
        "spec_acceptance_length", "mean", "relative", False, "tokens"
    )
    defs["output_throughput"] = MetricDef("output_throughput", "sum", "relative", False, "tok/s")
    defs["completed_sessions"] = MetricDef("completed_sessions", "count", "relative", False, "/min")
    defs["completed_requests"] = MetricDef("completed_requests", "count", "relative", False, "/min")
    return defs


METRICS = _metric_defs()
STEP_METRICS = (
    "ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95", "itl_p50", "itl_p95", "e2e_p50", "e2e_p95",
)  # fmt: skip
# Rows of a slice (a class's tool-calling / free-text, streamed / not, step-range requests):
# used to say *where* a gated metric moved; shown, not gated, except the request-kind
# slices' tpot_shift and spec_acceptance_length (workload.analyze.slices.SLICE_GATED).
SLICE_METRICS = (
    "ttft_p95", "tpot_p95", "e2e_p95", "ttft_shift", "tpot_shift", "e2e_shift",
    "spec_acceptance_length", "spec_acceptance_rate",
)  # fmt: skip
# Display order: per-token latency first (the headline), per-chunk ITL last (a detail).
HEADLINE_ORDER = (
    "tpot_shift", "tpot_p90", "tpot_p95", "ttft_shift", "ttft_p95", "ttft_content_p95",
    "e2e_shift", "e2e_p95", "session_success_ratio", "tool_loop_failure_ratio", "error_ratio", "output_throughput",
    "completed_sessions", "cached_ratio", "spec_acceptance_length", "spec_acceptance_rate",
)  # fmt: skip


@dataclass
class MetricDiff:
    """One metric in one scope, A vs B, with its interval and verdict."""

    scope: str  # "overall" | "class:NAME" | "step:NAME:K"
    metric: str
    unit: str
    change_kind: str  # relative | absolute
    a: float | None
    b: float | None
    n_a: int
    n_b: int
    change: float | None = None  # fraction (relative) or ratio difference (absolute)
    ci: tuple[float, float] | None = None
    threshold: float | None = None  # same unit as change
    verdict: str = VERDICT_NODATA
    gated: bool = False
    paired_share: float = 0.0
    se: float | None = None  # standard error on the test scale (log ratio | difference)
    higher_is_worse: bool = True
    same_as: str | None = None  # scope whose gated row is this same test (then not gated)
    note: str | None = None  # why a row with a threshold does not gate
    # How the interval was built: "bootstrap" (sessions), "blocks" (trimmed-mean t-interval
    # across the per-block changes of repeated blocks: between-instance), "exact" (Fisher / Clopper-Pearson
    # on counts), "poisson" (count rates).
    method: str = "bootstrap"
    blocks: int = 0  # blocks behind a "blocks" interval
    df: int = 0  # degrees of freedom of a "blocks" interval's t (trimmed: blocks - 2g - 1)
    # "blocks": each block's change on the test scale (log ratio | difference), in block order:
    # which block moved a metric, and the spread the interval came from
    block_changes: list[float] | None = None
    counts: tuple[int, int, int, int] | None = None  # exact: (hits A, n A, hits B, n B)
    p_value: float | None = None  # exact: Fisher's two-sided p
    # Equivalence (gated rows with a threshold): the worse-side bound of the one-sided
    # (1 - alpha) interval, in the change's unit (sign as the change), and, when that bound
    # still reaches the threshold, about how many times this traffic would settle it.
    eq_bound: float | None = None
    settle_factor: float | None = None
    # A class's exact-ratio row too small to rule out its threshold whatever it observes
    # (no events on either side): the smallest change its size can rule out. Such a row
    # still flags "worse"; it is not held to equivalence, and the verdict lists it.
    underpowered: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["ci"] = list(self.ci) if self.ci else None
        if d["block_changes"] is None:
            del d["block_changes"]  # only "blocks" rows have them
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()
        }
