"""The result of comparing two runs: `Comparison` (what comparison.json holds) and
`GateTails` (how the family's alpha was split over the gated rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workload.analyze.catalogue import (
    VERDICT_INCONCLUSIVE,
    VERDICT_MIXED,
    VERDICT_SAME,
    VERDICT_WORSE,
    MetricDiff,
)
from workload.analyze.rundata import RunData
from workload.analyze.thresholds import BLOCK_TRIM, HEADLINE_TAIL_SHARE, MIN_BLOCKS
from workload.errors import EXIT_INCONCLUSIVE, EXIT_REGRESSION
from workload.errors import EXIT_OK as EXIT_PASS


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
    # which evidence decided the verdict (judge.decided_by): deciding rows, how each was judged
    decided_by: list[str] = field(default_factory=list)
    # where the gated thresholds were validated (the profile's compare.validated_by), or None:
    # the headline then says they were not
    validated_by: str | None = None
    # the measured instance spread the few-block rows were judged against (prior.py): its
    # name and source, or None where no row was
    instance_prior: dict[str, str] | None = None

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
            "decided_by": self.decided_by,
            "thresholds_validated_by": self.validated_by,
            "instance_prior": self.instance_prior,
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
