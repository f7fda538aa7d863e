"""Between-instance intervals from repeated blocks (interleaved canary).

Two instances of the same server on the same traffic take different paths (start-up
waves, preemption cascades), which moves tail percentiles, throughput, completed
sessions and the cached ratio by more than a within-run bootstrap over sessions knows:
that bootstrap sees one instance trajectory per side. Repeated blocks give one
trajectory per block and side. Each metric is estimated per block (a change B/A of
that block's paired rows, on the log scale for relative metrics), and the interval is
a t-interval across blocks: mean ± t(blocks − 1) · SD / √blocks. The spread between
blocks holds sampling noise *and* instance divergence, so nothing has to be assumed
away; the price is few degrees of freedom (4 blocks: t has 3).

What it cannot see: divergence that only develops over longer than one block (a KV
cache that fills after 40 s never fills in 20 s blocks), and drift that is the same in
every block (the AB BA order cancels linear drift in the mean, not in the spread).
"""

from __future__ import annotations

import math

import numpy as np

from workload.analyze.bootstrap import Scope
from workload.analyze.catalogue import MetricDiff
from workload.analyze.estimate import scope_metrics
from workload.analyze.rundata import RunData
from workload.analyze.table import Pair, Rows
from workload.analyze.thresholds import BETWEEN_INSTANCE, MIN_BLOCKS


def block_of(session_id: str) -> str:
    """The block name of a merged session id ("block-2:interactive-7" -> "block-2")."""
    return session_id.split(":", 1)[0] if ":" in session_id else ""


def common_blocks(a: RunData, b: RunData) -> list[str]:
    """Blocks present on both sides (empty for single-block runs)."""
    return sorted(set(a.block_durations) & set(b.block_durations))


def block_change(m: MetricDiff) -> float | None:
    """One block's change on the test scale (log ratio | difference), from its point values."""
    if m.a is None or m.b is None:
        return None
    if m.change_kind == "relative":
        return math.log(m.b / m.a) if m.a > 0 and m.b > 0 else None
    return m.b - m.a


def apply_block_intervals(
    metrics: list[MetricDiff],
    a: RunData,
    b: RunData,
    pair: Pair,
    scopes: list[tuple[str, str | None]],
    paired: bool,
    rng: np.random.Generator,
) -> int:
    """Replace the interval of between-instance metrics by the across-block t-interval.

    Returns the number of common blocks (0 or 1: nothing replaced). A metric keeps its
    bootstrap interval when fewer than MIN_BLOCKS blocks give it a value on both sides.
    """
    blocks = common_blocks(a, b)
    if len(blocks) < MIN_BLOCKS:
        return len(blocks)
    names = sorted(BETWEEN_INSTANCE)
    per: dict[tuple[str, str], list[float]] = {}
    blk_codes = {blk: i for i, blk in enumerate(blocks)}
    blk_of_id = np.asarray([blk_codes.get(block_of(str(s)), -1) for s in pair.ids], dtype=np.int64)
    req = [Rows(t) for t in pair.req]
    sess = [Rows(t) for t in pair.sess]
    for blk in blocks:

        def rows(r: Rows, blk: str = blk) -> Rows:
            return r.where(blk_of_id[r.col("sid")] == blk_codes[blk])

        ra, rb, sa, sb = rows(req[0]), rows(req[1]), rows(sess[0]), rows(sess[1])
        dur = (a.block_durations.get(blk), b.block_durations.get(blk))
        for name, cls in scopes:
            sc = Scope(
                pair.of_class(ra, cls), pair.of_class(rb, cls),
                pair.of_class(sa, cls), pair.of_class(sb, cls), paired, pair.n_ids,
            )  # fmt: skip
            for m in scope_metrics(name, sc, names, rng, 100, dur):
                v = block_change(m)
                if v is not None and math.isfinite(v):
                    per.setdefault((m.scope, m.metric), []).append(v)
    for m in metrics:
        vals = per.get((m.scope, m.metric), [])
        if len(vals) < MIN_BLOCKS:
            continue
        arr = np.asarray(vals)
        mean = float(arr.mean())
        m.change = math.expm1(mean) if m.change_kind == "relative" else mean
        m.se = float(arr.std(ddof=1) / math.sqrt(len(arr)))
        m.method, m.blocks = "blocks", len(arr)
        m.block_changes = [round(v, 6) for v in vals]
    return len(blocks)
