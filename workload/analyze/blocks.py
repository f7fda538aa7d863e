"""Between-instance intervals from repeated blocks (interleaved canary).

Two instances of the same server on the same traffic take different paths (start-up
waves, preemption cascades), which moves tail percentiles, throughput, completed
sessions and the cached ratio by more than a within-run bootstrap over sessions knows:
that bootstrap sees one instance trajectory per side. Repeated blocks give one
trajectory per block and side. Each metric is estimated per block (a change B/A of
that block's paired rows, on the log scale for relative metrics), and the interval is
a t-interval across blocks (below: trimmed). The spread between
blocks holds sampling noise *and* instance divergence, so nothing has to be assumed
away; the price is few degrees of freedom (4 blocks: t has 3).

The interval is Yuen's trimmed-mean t (thresholds.BLOCK_TRIM): g = floor(0.2 · blocks)
blocks are trimmed from each end, the centre is the mean of the h = blocks − 2g left, the
standard error comes from the winsorized variance, √((blocks − 1) · s_w² / (h (h − 1))),
and t has h − 1 degrees of freedom. Between-instance changes are heavy-tailed: now and
then one instance falls into a slow regime for most of a block (a preemption cascade),
and with the plain mean that single block moved the centre and widened the interval past
the threshold. Trimmed, one such block of 8 moves neither much; a change present in
every block (a regression) moves the trimmed mean fully. With fewer than 5 blocks
nothing is trimmed (the plain t-interval).

What it cannot see: divergence that only develops over longer than one block (a KV
cache that fills after 40 s never fills in 20 s blocks), and drift that is the same in
every block (the AB BA order cancels linear drift in the mean, not in the spread).
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np

from workload.analyze.bootstrap import Scope
from workload.analyze.catalogue import MetricDiff
from workload.analyze.estimate import scope_metrics
from workload.analyze.rundata import RunData
from workload.analyze.table import Pair, Rows
from workload.analyze.thresholds import BETWEEN_INSTANCE, BLOCK_TRIM, MIN_BLOCKS

# The paired shifts: judged by the session bootstrap, with the across-block spread as a floor.
SHIFTS = frozenset({"ttft_shift", "tpot_shift", "itl_shift", "e2e_shift"})


def block_of(session_id: str) -> str:
    """The block name of a merged session id ("block-2:interactive-7" -> "block-2")."""
    return session_id.split(":", 1)[0] if ":" in session_id else ""


def common_blocks(a: RunData, b: RunData) -> list[str]:
    """Blocks present on both sides (empty for single-block runs)."""
    return sorted(set(a.block_durations) & set(b.block_durations))


def block_change(m: MetricDiff) -> float | None:
    """One block's change on the test scale (log ratio | difference), from its point values
    (a paired shift: its own change; its a and b are the sides' medians)."""
    if m.metric in SHIFTS:
        return math.log1p(m.change) if m.change is not None and m.change > -1 else None
    if m.a is None or m.b is None:
        return None
    if m.change_kind == "relative":
        return math.log(m.b / m.a) if m.a > 0 and m.b > 0 else None
    return m.b - m.a


def _shift_floor(m: MetricDiff, vals: list[float]) -> None:
    """A paired shift keeps its bootstrap interval unless its blocks disagree by more.

    The session bootstrap treats sessions as independent, but every session of a block met
    the same two instances at the same moment: when one instance was slower for a whole
    block (host load that comes and goes; a real vLLM-CPU A/A pair gave an E2E shift of
    +53 % [+35, +72], docs/canary-verdict-quality.md), the blocks' shifts part and the
    bootstrap does not see it. The across-block trimmed-t standard error is then the floor:
    the change stays the pooled shift; se and df are the blocks' when theirs is wider.
    """
    if m.se is None or not math.isfinite(m.se):
        return
    _, se, df = trimmed_interval(vals)
    if se > m.se:
        m.se, m.df, m.method, m.blocks = se, df, "blocks", len(vals)
        m.block_changes = [round(v, 6) for v in vals]


def trimmed_each_end(n: int, trim: float = BLOCK_TRIM) -> int:
    """Blocks the across-block interval leaves out at each end, of n (g = floor(trim · n))."""
    return math.floor(trim * n)


# one list of per-block changes (what the verdict passes) gives plain floats
@overload
def trimmed_interval(vals: list[float], trim: float = ...) -> tuple[float, float, int]: ...
@overload
def trimmed_interval(
    vals: np.ndarray, trim: float = ...
) -> tuple[np.ndarray | float, np.ndarray | float, int]: ...
def trimmed_interval(
    vals: np.ndarray | list[float], trim: float = BLOCK_TRIM
) -> tuple[np.ndarray | float, np.ndarray | float, int]:
    """Yuen's trimmed mean, its standard error and the t degrees of freedom, over the last axis.

    `vals` holds n per-block changes (or a batch of them, shape (..., n), for the verdict
    bench's resampling). g = floor(trim · n) values are trimmed from each end; n < 5 at
    trim 0.2 trims none: the mean, SD / √n and n − 1 df.
    """
    x = np.sort(np.asarray(vals, dtype=float), axis=-1)
    n = x.shape[-1]
    g = trimmed_each_end(n, trim)
    h = n - 2 * g
    if h < 2:
        raise ValueError(f"trimming {g} of {n} values from each end leaves fewer than 2")
    centre = x[..., g : n - g].mean(axis=-1)
    wins = np.clip(x, x[..., g : g + 1], x[..., n - 1 - g : n - g])
    se = np.sqrt((n - 1) * wins.var(axis=-1, ddof=1) / (h * (h - 1)))
    if x.ndim == 1:
        return float(centre), float(se), h - 1
    return centre, se, h - 1


def apply_block_intervals(
    metrics: list[MetricDiff],
    a: RunData,
    b: RunData,
    pair: Pair,
    scopes: list[tuple[str, str | None]],
    paired: bool,
    rng: np.random.Generator,
) -> int:
    """Replace the interval of between-instance metrics by the across-block trimmed t-interval.

    Returns the number of common blocks (0 or 1: nothing replaced). A metric keeps its
    bootstrap interval when fewer than MIN_BLOCKS blocks give it a value on both sides.
    """
    blocks = common_blocks(a, b)
    if len(blocks) < MIN_BLOCKS:
        return len(blocks)
    names = sorted(BETWEEN_INSTANCE | SHIFTS)
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
        if m.metric in SHIFTS:
            _shift_floor(m, vals)
            continue
        centre, se, df = trimmed_interval(vals)
        m.change = math.expm1(centre) if m.change_kind == "relative" else centre
        m.se, m.df = se, df
        m.method, m.blocks = "blocks", len(vals)
        m.block_changes = [round(v, 6) for v in vals]
    return len(blocks)
