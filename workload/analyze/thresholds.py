"""Which metrics gate and at what threshold: defaults, the profile's `compare:` section, flags.

Thresholds are in percent (relative changes) or percentage points (ratios); keys
are metric names, optionally scoped to a class (`CLASS.METRIC`) or to the overall
row (`overall.METRIC`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from workload.analyze.catalogue import METRICS
from workload.errors import CompareError

# Thresholds in percent (relative) or percentage points (ratios); a metric
# without a threshold is reported but does not gate.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "tpot_shift": 10.0,
    "ttft_shift": 10.0,
    "itl_shift": 10.0,
    "e2e_shift": 10.0,
    "tpot_p95": 10.0,
    "ttft_p95": 10.0,
    "itl_p95": 10.0,
    "e2e_p95": 10.0,
    "error_ratio": 1.0,
    # Session ratios: what a canary of about 100 sessions per side can settle (with no
    # failures on either side the one-sided 95 % bound of the difference is about 3 points;
    # docs/canary-verdict-quality.md). Tighter thresholds need more sessions: the verdict
    # says how many when it is inconclusive.
    "tool_loop_failure_ratio": 5.0,
    "session_success_ratio": 5.0,
    "output_throughput": 5.0,
    "cached_ratio": 5.0,
    "completed_sessions": 10.0,
    "spec_acceptance_length": 10.0,
    "spec_acceptance_rate": 5.0,
}

# Profile `compare:` field names (workload.plan.profile.CompareThresholds) -> metric names.
_PROFILE_NAMES = {
    "ttft_p95_pct": "ttft_p95",
    "ttft_content_p95_pct": "ttft_content_p95",
    "itl_p95_pct": "itl_p95",
    "tpot_p95_pct": "tpot_p95",
    "tpot_p90_pct": "tpot_p90",
    "spec_acceptance_length_pct": "spec_acceptance_length",
    "spec_acceptance_rate_pp": "spec_acceptance_rate",
    "e2e_p95_pct": "e2e_p95",
    "throughput_pct": "output_throughput",
    "session_success_pp": "session_success_ratio",
    "tool_loop_failure_pp": "tool_loop_failure_ratio",
    "completed_sessions_pct": "completed_sessions",
    "ttft_shift_pct": "ttft_shift",
    "tpot_shift_pct": "tpot_shift",
    "e2e_shift_pct": "e2e_shift",
    "cached_ratio_pp": "cached_ratio",
}

# Metrics that two instances of the same server, on the same traffic, disagree on by more
# than any within-run interval allows (docs/canary-verdict-quality.md: tail percentiles moved
# by start-up waves and preemption cascades, throughput -23 % / -42 %, completed sessions
# -26 % / -42 %, cached-ratio drops). With paired runs they gate only on a between-instance
# interval: repeated blocks (interleaved canary, >= MIN_BLOCKS per side) give one change per
# block, and the (trimmed) t-interval across blocks holds both sampling noise and instance
# divergence.
# With a single block there is no such estimate: they are shown, and gate only when a flag
# names them. Unpaired runs gate them as before.
BETWEEN_INSTANCE = frozenset(
    {f"{lat}_{q}" for lat in ("ttft", "tpot", "e2e") for q in ("p50", "p95", "p99")}
    | {"tpot_p90", "ttft_content_p95", "output_throughput", "cached_ratio", "completed_sessions"}
)
# Kept for callers of the old name: what does not gate with paired single-block runs.
PAIRED_REPORT_ONLY = BETWEEN_INSTANCE | {"itl_shift"}
# Blocks per side from which the between-instance interval is used (t with >= 3 df).
MIN_BLOCKS = 4
# The across-block interval is Yuen's trimmed-mean t: floor(BLOCK_TRIM * blocks) blocks are
# trimmed from each end (one of 5-9 blocks, none of 4). The per-block changes of two
# instances of one server are heavy-tailed (excess kurtosis 7-13 for E2E p95, throughput and
# completed sessions over 83 A/A trials; docs/canary-verdict-quality.md): one block where an
# instance fell into a slow regime widened the plain t-interval past the threshold. 20 % is
# the customary trim (Wilcox), fixed before the held-out campaigns that measure it.
BLOCK_TRIM = 0.2
# The headline tail: when these gate across blocks (overall row), they share
# HEADLINE_TAIL_SHARE of the family's alpha between them and every other gated row the rest
# (verdict.gate_tails, a weighted Bonferroni fixed before the campaigns that measure it). A
# tail trade-off (the slowest streams slower, the typical request not) shows only here, and
# a block row's t with ~5 df pays far more for a small share of alpha than a normal row does.
HEADLINE_TAIL = frozenset({"tpot_p90", "tpot_p95"})
HEADLINE_TAIL_SHARE = 0.5
# Per-chunk ITL is a shown detail, gated only when named: under speculative decoding one chunk
# carries several tokens, so halved draft acceptance makes chunks smaller and their gaps
# shorter ("better" per-chunk ITL) while every token takes longer (TPOT +25 % on the
# simulator). TPOT, per token from the server's token counts, is the headline instead.
PER_CHUNK = frozenset({"itl_shift", "itl_p50", "itl_p95", "itl_p99"})

# A profile's percentile threshold also sets the paired shift's (the shift is what gates
# when runs pair, so a profile's "10 % TTFT" must reach it).
_SHIFT_OF = {f"{lat}_p95": f"{lat}_shift" for lat in ("ttft", "itl", "tpot", "e2e")}


def _pct(v: Any) -> float:
    if isinstance(v, str):
        v = v.strip().rstrip("%").removesuffix("pp").strip()
    return float(v)


def _metric_name(key: str) -> str:
    """Normalise a threshold key: profile names, `_pct`/`_pp` suffixes, CLASS. prefixes."""
    scope, dot, base = key.rpartition(".")
    base = _PROFILE_NAMES.get(base, base)
    for suffix in ("_pct", "_pp"):
        base = base.removesuffix(suffix)
    base = {"throughput": "output_throughput", "session_success": "session_success_ratio"}.get(
        base, base
    )
    return f"{scope}{dot}{base}"


def profile_compare(run: dict[str, Any]) -> dict[str, Any]:
    """The profile's `compare:` section recorded in run.json (empty when absent)."""
    prof = run.get("profile") if isinstance(run.get("profile"), dict) else {}
    sec = prof.get("compare") if isinstance(prof, dict) else None
    if isinstance(sec, dict) and isinstance(sec.get("thresholds"), dict):
        return {
            **sec["thresholds"],
            **{k: v for k, v in sec.items() if k in ("alpha", "validated_by")},
        }
    return sec if isinstance(sec, dict) else {}


def thresholds_validated(run_a: dict[str, Any], run_b: dict[str, Any]) -> str | None:
    """Where the profile's gated thresholds were measured (`compare.validated_by`, B's then
    A's), or None: then nobody measured that the design resolves them on this profile."""
    for run in (run_b, run_a):
        v = profile_compare(run).get("validated_by")
        if isinstance(v, str) and v.strip():
            return v.strip()
    return None


def _put(out: dict[str, float], name: str, v: Any) -> None:
    """Set threshold `name` to v (percent / points), or turn its gate off (None)."""
    if v is None:
        out.pop(name, None)
    else:
        out[name] = _pct(v)


def replays_answers(run: dict[str, Any]) -> bool:
    """Whether the run's profile ran with `history: actual` (sessions replay the server's answers)."""
    prof = run.get("profile")
    return isinstance(prof, dict) and prof.get("history") == "actual"


def history_actual_overrides(run: dict[str, Any]) -> dict[str, Any]:
    """The profile's `compare.history_actual` thresholds (empty when absent)."""
    sec = profile_compare(run).get("history_actual")
    return sec if isinstance(sec, dict) else {}


def resolve_thresholds(
    run_a: dict[str, Any], run_b: dict[str, Any], flags: Mapping[str, float | None] | None
) -> dict[str, float]:
    """Defaults, then the profile's `compare` section (A's, then B's on top), then flags.

    When either run replays its server's answers (`history: actual`), the section's
    `history_actual` thresholds replace those metrics' (A's, then B's) before the flags:
    each key only its own metric.
    """
    out = dict(DEFAULT_THRESHOLDS)
    for run in (run_a, run_b):
        for k, v in profile_compare(run).items():
            if k in ("alpha", "history_actual", "validated_by"):
                continue
            if v is None:  # the profile turned this gate off
                out.pop(_metric_name(str(k)), None)
                continue
            try:
                name, val = _metric_name(str(k)), _pct(v)
            except (TypeError, ValueError):
                continue
            if name.split(".")[-1] not in METRICS:
                continue  # a field of a newer agentload's profile: not a metric this one knows
            out[name] = val
            scope, dot, base = name.rpartition(".")
            shift = _SHIFT_OF.get(base)
            if shift and not any(
                _metric_name(str(x)) == f"{scope}{dot}{shift}" for x in profile_compare(run)
            ):
                out[f"{scope}{dot}{shift}"] = val
    if replays_answers(run_a) or replays_answers(run_b):
        for run in (run_a, run_b):
            for k, v in history_actual_overrides(run).items():
                name = _metric_name(str(k))
                if name.split(".")[-1] not in METRICS:
                    continue  # a newer agentload's field
                with contextlib.suppress(TypeError, ValueError):
                    _put(out, name, v)
    for k, v in (flags or {}).items():
        _put(out, _metric_name(k), v)
    for k in list(out):
        if k.split(".")[-1] not in METRICS:
            raise CompareError(
                f"unknown threshold metric {k!r}; known: {', '.join(sorted(METRICS))}"
            )
    return out


def explicit_gates(flags: Mapping[str, float | None] | None) -> set[str]:
    """Threshold keys a flag set (normalised): those percentiles gate even when runs pair."""
    return {_metric_name(k) for k, v in (flags or {}).items() if v is not None}


def is_explicit(explicit: set[str], scope: str, metric: str) -> bool:
    """Whether a flag named this metric for this scope (overall, or the class of a class row)."""
    if scope == "overall":
        return metric in explicit or f"overall.{metric}" in explicit
    cls = scope.split(":", 1)[1] if scope.startswith("class:") else None
    return metric in explicit or (cls is not None and f"{cls}.{metric}" in explicit)


def threshold_for(thresholds: dict[str, float], scope: str, metric: str) -> float | None:
    """The threshold of `metric` in `scope`: the scoped key first, then the plain one."""
    cls = scope.split(":", 1)[1] if scope.startswith("class:") else None
    if scope == "overall" and f"overall.{metric}" in thresholds:
        return thresholds[f"overall.{metric}"]
    if cls is not None and f"{cls}.{metric}" in thresholds:
        return thresholds[f"{cls}.{metric}"]
    return thresholds.get(metric)


def parse_threshold_flags(items: list[str]) -> dict[str, float | None]:
    """`metric=10` (percent / pp) or `metric=off` -> thresholds dict."""
    out: dict[str, float | None] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip():
            raise CompareError(f"--threshold {it!r}: expected METRIC=PERCENT (e.g. ttft_p95=10)")
        if v.strip().lower() in ("off", "none", ""):
            out[k.strip()] = None
            continue
        try:
            out[k.strip()] = _pct(v)
        except ValueError:
            raise CompareError(f"--threshold {it!r}: {v!r} is not a number") from None
    return out
