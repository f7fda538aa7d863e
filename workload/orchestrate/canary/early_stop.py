"""`agentload canary --early-stop`: interim looks after each paired block, and when they stop.

From EARLY_FIRST_LOOK paired blocks on (the t-interval's 2 df) each look judges the blocks
so far at an interim alpha; a regression may stop the canary at any look, a pass only from
MIN_BLOCKS on, where the tails and work done gate as in the full design. The interim looks
together spend EARLY_ALPHA_SHARE of alpha (Haybittle-Peto style: only strong evidence stops
a canary early); the last look keeps the rest. By the union bound "worse" and "no
detectable change" each stay wrong in at most alpha of canaries over all looks together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workload.analyze.catalogue import VERDICT_INCONCLUSIVE, VERDICT_MIXED, VERDICT_WORSE
from workload.analyze.comparison import Comparison
from workload.analyze.thresholds import MIN_BLOCKS
from workload.analyze.verdict import SHORT_DESIGN_WARNING, compare_runs, default_confidence
from workload.measure.artifacts import read_json

EARLY_FIRST_LOOK = 3
EARLY_ALPHA_SHARE = 0.1
SIDES = ("baseline", "candidate")


class EarlyStop:
    """--early-stop: after each paired block from EARLY_FIRST_LOOK on (not the last), judge
    the blocks so far at an interim alpha; a verdict other than inconclusive stops the
    canary there. The interim looks share EARLY_ALPHA_SHARE of alpha; the last look (or the
    full design, when nothing stopped it) is judged at the rest."""

    def __init__(
        self,
        out_dir: Path,
        blocks: int,
        thresholds: dict[str, Any] | None,
        confidence: float | None,
        n_boot: int,
    ) -> None:
        self.out_dir, self.blocks, self.thresholds = out_dir, blocks, thresholds
        self.confidence, self.n_boot = confidence, n_boot
        self.n_looks = blocks - EARLY_FIRST_LOOK  # interim looks at 3 .. blocks-1 blocks
        self.alpha: float | None = None  # the canary's alpha (set at the first look)
        self.looks: list[dict[str, Any]] = []
        self.stopped: Comparison | None = None  # the Comparison that stopped the canary

    def _done(self) -> int:
        """Paired blocks finished on both sides (each block a complete run)."""
        n = 0
        while all((self.out_dir / side / f"block-{n}" / "run.json").is_file() for side in SIDES):
            n += 1
        return n

    def _base_alpha(self) -> float:
        if self.alpha is None:
            if self.confidence is not None:
                self.alpha = 1.0 - self.confidence
            else:  # the profile's compare.alpha, as compare_runs reads it (run.json only)
                a, b = (read_json(self.out_dir / side / "block-0" / "run.json") for side in SIDES)
                self.alpha = 1.0 - default_confidence(a, b)
        return self.alpha

    def interim_alpha(self) -> float:
        return self._base_alpha() * EARLY_ALPHA_SHARE / self.n_looks

    def final_confidence(self) -> float:
        return 1.0 - self._base_alpha() * (1.0 - EARLY_ALPHA_SHARE)

    def look(self) -> bool:
        n = self._done()
        if n < EARLY_FIRST_LOOK or n >= self.blocks or any(lk["blocks"] == n for lk in self.looks):
            return False
        alpha = self.interim_alpha()
        cmp = compare_runs(
            self.out_dir / "baseline",
            self.out_dir / "candidate",
            self.thresholds,
            confidence=1.0 - alpha,
            n_boot=self.n_boot,
            instance_prior=None,  # a look at 3 blocks of a longer design: no prior (prior.py)
        )
        self.looks.append({"blocks": n, "alpha": round(alpha, 6), "verdict": cmp.verdict})
        # A regression found stops at any look. A pass (or "better") only once the tails and
        # work done gate too (MIN_BLOCKS), so an early pass rules out what a full one would.
        settled = cmp.verdict in (VERDICT_WORSE, VERDICT_MIXED) or (
            n >= MIN_BLOCKS and cmp.verdict != VERDICT_INCONCLUSIVE
        )
        print(
            f"agentload canary: interim look after {n} of {self.blocks} blocks "
            f"(alpha {alpha:.4g}): {cmp.verdict}"
            + ("; stopping early" if settled else "; going on"),
            flush=True,
        )
        if settled:
            # Fewer blocks than the validated design, by decision: say that instead.
            cmp.warnings = [w for w in cmp.warnings if not w.startswith(SHORT_DESIGN_WARNING)]
            cmp.warnings.append(
                f"stopped early after {n} of {self.blocks} blocks per side: settled at the "
                f"interim level alpha {alpha:.4g} (--early-stop; the interim looks spend "
                f"{EARLY_ALPHA_SHARE:.0%} of alpha {self._base_alpha():g})"
            )
            self.stopped = cmp
        return settled

    def record(self) -> dict[str, Any]:
        return {
            "looks": self.looks,
            "stopped_after_blocks": self.looks[-1]["blocks"] if self.stopped else None,
            "alpha": self.alpha,
            "alpha_final": None if self.stopped or self.alpha is None
            else round(self.alpha * (1.0 - EARLY_ALPHA_SHARE), 6),
        }  # fmt: skip
