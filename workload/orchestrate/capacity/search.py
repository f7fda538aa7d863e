"""Capacity search: the largest load at which the SLOs still hold.

Pure algorithm over an injected ``measure(load) -> StepResult`` (the caller runs one load
step, e.g. a short Locust run at that many users or that arrival rate, and judges it
against the SLOs). The search:

1. steps up geometrically from ``min_load`` (x ``factor``, capped at ``max_load``) until a
   step fails or ``max_load`` passes;
2. bisects between the last passing and the first failing load until they are within the
   precision (absolute, or relative to the passing load);
3. stops at once when ``min_load`` fails (capacity None: the deployment cannot carry even
   the lowest load asked for; ``min_failed`` is set, the CLI's exit 3).

A step that is not a pass stops the step-up, whether it failed or was inconclusive (an SLO
of a class that sent requests had no samples): a capacity is only claimed where every SLO
was judged and met; the caller tells the two apart (capacity.json ``inconclusive``).

A step that fails stops the step-up: loads above a failing one are never run. A step
that "clearly" breaks its SLOs may end early inside ``measure`` (``clearly_broken`` helps
decide); the search only reads ``slo_met``. A step with fewer samples than a quantile
SLO needs (``samples_needed``) still counts, but carries ``too_few_samples``; the CLI marks
it instead when the samples do not settle the verdict (``quantile_verdict_settled``).

``CapacityResult.to_dict()``::

    {"dimension": "users", "capacity": 48, "first_failing": 64,
     "steps": [{"load": 8, "slo_met": true, "goodput": 12.5, "slo_values": {...},
                "samples": 412, "too_few_samples": false}, ...],
     "bounds": {"min": 8, "max": 512}, "factor": 2.0,
     "precision": {"absolute": 4, "relative": null}, "stop_reason": "precision"}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from workload.errors import CapacityError
from workload.measure.slo import parse_percentile, parse_slo_key

Dimension = Literal["users", "arrival_rate"]
DIMENSIONS = ("users", "arrival_rate")
EXIT_BELOW_MIN = 3  # capacity search: even min_load failed its SLOs
TAIL_SAMPLES = 10  # samples wanted beyond a quantile for it to mean something
MAX_FACTOR = 100.0
MAX_STEPS = 100
StopReason = Literal["min_failed", "max_passed", "precision", "max_steps", "stopped"]


# ---------------------------------------------------------------- sample sufficiency


def samples_needed(quantile: float, tail: int = TAIL_SAMPLES) -> int:
    """Samples for a quantile estimate to rest on ``tail`` values beyond it: ceil(tail/(1-q)).

    ``quantile`` in (0, 1): p95 -> 0.95 -> 200 samples, p99 -> 1000, p50 -> 20.
    """
    q = float(quantile)
    if not math.isfinite(q) or not 0.0 < q < 1.0:
        raise CapacityError(f"quantile must be in (0, 1), got {quantile!r}")
    # round first: 10 / (1 - 0.95) is 200.00000000000003 in floating point
    return math.ceil(round(tail / (1.0 - q), 6))


SETTLE_ALPHA = 0.05  # a verdict is settled when the sample contradicts its opposite at 95 %


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (no scipy at start-up)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    base = math.lgamma(n + 1)
    return min(1.0, sum(
        math.exp(base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
        for i in range(k + 1)
    ))  # fmt: skip


def quantile_verdict_settled(
    n: int, beyond: int, share: float, alpha: float = SETTLE_ALPHA
) -> bool:
    """Whether ``n`` samples, ``beyond`` of them past an SLO's threshold, settle its verdict.

    A quantile SLO (``ttft_p95_ms <= 800``) holds when at most ``share`` (0.05) of the values
    lie beyond the threshold. The count beyond is Binomial(n, share) when the SLO is met
    exactly, so a pass is settled when so few beyond would happen with probability at most
    ``alpha`` (P(X <= beyond) <= alpha), a fail when so many would (P(X >= beyond) <= alpha);
    in between the sample cannot tell the two apart (exact binomial test, one-sided, no
    assumption about the latency distribution). With none beyond, a p95 needs 59 samples,
    a p99 299, a p50 5.
    """
    if n <= 0 or not 0.0 < share < 1.0:
        return False
    beyond = max(0, min(int(beyond), n))
    return _binom_cdf(beyond, n, share) <= alpha or 1.0 - _binom_cdf(beyond - 1, n, share) <= alpha


def samples_to_settle(quantile: float, alpha: float = SETTLE_ALPHA) -> int:
    """The fewest samples that can settle a pass of a quantile SLO: none beyond the threshold,
    (1 - share)^n <= alpha with share = 1 - quantile (p95: 59, p99: 299, p50: 5)."""
    q = float(quantile)
    if not math.isfinite(q) or not 0.0 < q < 1.0:
        raise CapacityError(f"quantile must be in (0, 1), got {quantile!r}")
    return math.ceil(round(math.log(alpha) / math.log(q), 6))


def slo_quantile(key: str) -> float | None:
    """The quantile an SLO key bounds ('ttft_p95_ms' -> 0.95; 'p100'/max/mean/scalars -> None)."""
    _, stat, _, _ = parse_slo_key(key)
    if stat is None or not stat.startswith("p"):
        return None
    p = parse_percentile(stat) / 100.0
    return p if p < 1.0 else None


def samples_needed_for(slos: Mapping[str, Any]) -> int:
    """The most samples any quantile SLO in ``slos`` needs (0 without quantile SLOs)."""
    qs = [q for q in (slo_quantile(k) for k in slos) if q is not None]
    return max((samples_needed(q) for q in qs), default=0)


def clearly_broken(
    slo_values: Mapping[str, float | None], slos: Mapping[str, float], factor: float = 2.0
) -> bool:
    """Whether any SLO is missed by ``factor`` or more (upper bounds x factor, lower / factor).

    For ending a step early: a load this far past its SLOs will not come back in time.
    """
    if not factor > 1.0:
        raise CapacityError(f"clearly-broken factor must be > 1, got {factor!r}")
    for key, threshold in slos.items():
        value = slo_values.get(key)
        if value is None:
            continue
        _, _, bound, _ = parse_slo_key(key)
        if bound == "<=" and value > threshold * factor:
            return True
        if bound == ">=" and value < threshold / factor:
            return True
    return False


# ---------------------------------------------------------------- results


@dataclass(slots=True)
class StepResult:
    """One measured load step, as the injected ``measure`` reports it."""

    load: float
    slo_met: bool
    goodput: float | None = None
    slo_values: dict[str, float | None] = field(default_factory=dict)
    samples: int = 0
    too_few_samples: bool = False  # set by the search from its quantile

    def to_dict(self) -> dict[str, Any]:
        return {
            "load": self.load,
            "slo_met": self.slo_met,
            "goodput": self.goodput,
            "slo_values": dict(self.slo_values),
            "samples": self.samples,
            "too_few_samples": self.too_few_samples,
        }


@dataclass(slots=True)
class CapacityResult:
    """The outcome: the largest passing load (or None), the first failing one, every step."""

    dimension: Dimension
    capacity: float | None
    first_failing: float | None
    steps: list[StepResult]
    min_load: float
    max_load: float
    factor: float
    precision: float | None
    relative_precision: float | None
    stop_reason: StopReason

    @property
    def min_failed(self) -> bool:
        """Even the lowest load failed (the CLI exits with EXIT_BELOW_MIN)."""
        return self.capacity is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "capacity": self.capacity,
            "first_failing": self.first_failing,
            "steps": [s.to_dict() for s in self.steps],
            "bounds": {"min": self.min_load, "max": self.max_load},
            "factor": self.factor,
            "precision": {"absolute": self.precision, "relative": self.relative_precision},
            "stop_reason": self.stop_reason,
        }


# ---------------------------------------------------------------- the search


def _positive(name: str, v: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise CapacityError(f"{name} must be a finite number > 0, got {v!r}")
    return v


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """Validated search settings (build with ``search_spec``)."""

    dimension: Dimension
    min_load: float
    max_load: float
    factor: float
    precision: float | None
    relative_precision: float | None
    quantile: float | None
    max_steps: int

    def close_enough(self, lo: float, hi: float) -> bool:
        """Whether the pass/fail interval [lo, hi] is within the precision."""
        if self.dimension == "users" and hi - lo <= 1:
            return True  # no integer load lies between them
        if self.precision is not None:
            return hi - lo <= self.precision
        return hi - lo <= (self.relative_precision or 0.0) * lo


def search_spec(
    dimension: str,
    min_load: float,
    max_load: float,
    *,
    factor: float = 2.0,
    precision: float | None = None,
    relative_precision: float | None = None,
    quantile: float | None = 0.95,
    max_steps: int = 30,
) -> SearchSpec:
    """Check the settings; every problem is a one-line CapacityError.

    Precision: give ``precision`` (absolute, in load units) or ``relative_precision`` (a
    fraction of the passing load), not both; by default 1 user, or 5 % of a rate.
    ``users`` loads must be whole numbers. ``quantile`` (or None) sets ``too_few_samples``.
    """
    if dimension not in DIMENSIONS:
        raise CapacityError(f"dimension must be users or arrival_rate, got {dimension!r}")
    _positive("--min", min_load)
    _positive("--max", max_load)
    if min_load > max_load:
        raise CapacityError(f"--min {min_load:g} is above --max {max_load:g}")
    if dimension == "users" and (min_load != int(min_load) or max_load != int(max_load)):
        raise CapacityError("users bounds must be whole numbers")
    _positive("factor", factor)
    if not 1.0 < factor <= MAX_FACTOR:
        raise CapacityError(f"factor must be in (1, {MAX_FACTOR:g}], got {factor!r}")
    if precision is not None and relative_precision is not None:
        raise CapacityError("give an absolute or a relative precision, not both")
    if precision is not None:
        _positive("precision", precision)
    elif relative_precision is not None:
        _positive("relative precision", relative_precision)
        if relative_precision >= 1:
            raise CapacityError(f"relative precision must be below 1, got {relative_precision!r}")
    elif dimension == "users":
        precision = 1
    else:
        relative_precision = 0.05
    if quantile is not None:
        samples_needed(quantile)  # validates
    if (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, int)
        or not 1 <= max_steps <= MAX_STEPS
    ):
        raise CapacityError(f"max_steps must be an integer in 1..{MAX_STEPS}, got {max_steps!r}")
    if dimension == "users":
        min_load, max_load = int(min_load), int(max_load)
    return SearchSpec(
        dimension=dimension,  # type: ignore[arg-type]
        min_load=min_load,
        max_load=max_load,
        factor=float(factor),
        precision=precision,
        relative_precision=relative_precision,
        quantile=quantile,
        max_steps=max_steps,
    )


def stopped_result(spec: SearchSpec, steps: list[StepResult]) -> CapacityResult:
    """The search ended by a stop signal after `steps` (the last one stopped half-way): no
    capacity is claimed; the steps run so far are the record."""
    return CapacityResult(
        dimension=spec.dimension, capacity=None, first_failing=None, steps=list(steps),
        min_load=spec.min_load, max_load=spec.max_load, factor=spec.factor,
        precision=spec.precision, relative_precision=spec.relative_precision,
        stop_reason="stopped",
    )  # fmt: skip


def _tidy_mid(lo: float, hi: float) -> float:
    """The midpoint, rounded to 6 significant digits when that keeps it strictly inside."""
    mid = (lo + hi) / 2.0
    tidy = float(f"{mid:.6g}")
    return tidy if lo < tidy < hi else mid


def capacity_search(spec: SearchSpec, measure: Callable[[float], StepResult]) -> CapacityResult:
    """Run the step-up then bisection with ``measure``; see the module docstring."""
    steps: list[StepResult] = []
    need = samples_needed(spec.quantile) if spec.quantile is not None else 0
    users = spec.dimension == "users"

    def run(load: float) -> bool:
        r = measure(load)
        r.load = load  # the load asked for is the one reported
        r.too_few_samples = r.samples < need
        steps.append(r)
        return bool(r.slo_met)

    def done(capacity: float | None, failing: float | None, why: StopReason) -> CapacityResult:
        return CapacityResult(
            dimension=spec.dimension,
            capacity=capacity,
            first_failing=failing,
            steps=steps,
            min_load=spec.min_load,
            max_load=spec.max_load,
            factor=spec.factor,
            precision=spec.precision,
            relative_precision=spec.relative_precision,
            stop_reason=why,
        )

    load = spec.min_load
    if not run(load):
        return done(None, load, "min_failed")
    passed: float = load
    failed: float | None = None
    while failed is None:
        if passed >= spec.max_load:
            return done(passed, None, "max_passed")
        if len(steps) >= spec.max_steps:
            return done(passed, None, "max_steps")
        nxt = passed * spec.factor
        load = min(spec.max_load, math.ceil(nxt) if users else nxt)
        if run(load):
            passed = load
        else:
            failed = load
    while not spec.close_enough(passed, failed):
        if len(steps) >= spec.max_steps:
            return done(passed, failed, "max_steps")
        mid = (passed + failed) // 2 if users else _tidy_mid(passed, failed)
        if not passed < mid < failed:
            break  # no representable load left between them
        if run(mid):
            passed = mid
        else:
            failed = mid
    return done(passed, failed, "precision")
