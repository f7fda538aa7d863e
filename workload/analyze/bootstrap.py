"""The cluster bootstrap engine: sessions are the clusters, paired sessions resample jointly.

Seeded traffic gives both runs the same session ids, so a session present in both
runs is resampled jointly (paired); sessions present in one run only are resampled
independently within their run (a stratified bootstrap). All requests of a
resampled session come along, so within-session correlation is respected.
"""

from __future__ import annotations

import math

import numpy as np

from workload.analyze.table import Rows

DRAW_CHUNK = 8_000_000  # elements of a (rows, clusters) block built at once
SMALL_N = 2_000  # values below which boot_quantiles sums over all of them


class Scope:
    """The rows of one scope of both runs, indexed by session cluster.

    Rows are index arrays into the runs' columns (workload.analyze.table); `cl_a` / `cl_b`
    map a session code to its cluster index (-1: not in this scope's side).
    """

    def __init__(
        self,
        reqs_a: Rows,
        reqs_b: Rows,
        sess_a: Rows | None,
        sess_b: Rows | None,
        paired: bool,
        n_ids: int,
    ) -> None:
        def ids(r: Rows, s: Rows | None) -> np.ndarray:
            return np.unique(
                np.concatenate([r.col("sid"), s.col("sid") if s is not None else []]).astype(
                    np.int64
                )
            )

        ids_a, ids_b = ids(reqs_a, sess_a), ids(reqs_b, sess_b)
        common = np.intersect1d(ids_a, ids_b, assume_unique=True) if paired else ids_a[:0]
        only_a = np.setdiff1d(ids_a, common, assume_unique=True)
        only_b = np.setdiff1d(ids_b, common, assume_unique=True)
        self.n_common, self.n_only_a, self.n_only_b = len(common), len(only_a), len(only_b)
        # Cluster index spaces: A = common + only_a, B = common + only_b (ids in sorted order).
        self.cl_a = np.full(n_ids, -1, dtype=np.int64)
        self.cl_b = np.full(n_ids, -1, dtype=np.int64)
        for cl, only in ((self.cl_a, only_a), (self.cl_b, only_b)):
            cl[common] = np.arange(len(common))
            cl[only] = len(common) + np.arange(len(only))
        self.reqs = (reqs_a, reqs_b)
        self.sess = (sess_a, sess_b)

    @property
    def pair_share(self) -> float:
        tot = self.n_common + max(self.n_only_a, self.n_only_b)
        return self.n_common / tot if tot else 0.0

    def weights(self, rng: np.random.Generator, n_boot: int) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap multiplicities per cluster, shape (n_boot, clusters), for A and B.

        Drawn in the order common, only A, only B, each straight into its columns of the
        result (no stacking copies); when neither run has sessions of its own, A and B
        get the same array.
        """

        def draw(n: int, out: np.ndarray) -> None:
            # float32 holds the small integer multiplicities exactly, and products with
            # per-cluster counts sum exactly in it below 2**24 (see _wsum).
            # Rows in chunks (same random stream as one (n_boot, n) draw, a fraction of the memory)
            step = max(1, DRAW_CHUNK // max(1, n))
            # uint32 draws are the int64 ones (both take numpy's 32-bit bounded path below
            # 2**32), in half the memory, and bincount reads them about twice as fast.
            dt = np.uint32 if n <= 2**32 else np.int64
            for s in range(0, n_boot, step):
                k = min(step, n_boot - s)
                idx = rng.integers(0, n, size=(k, n), dtype=dt)
                for i in range(k):  # one row at a time: its counts stay in cache
                    out[s + i] = np.bincount(idx[i], minlength=n)

        nc, na, nb = self.n_common, self.n_only_a, self.n_only_b
        wa = np.empty((n_boot, nc + na), dtype=np.float32)
        draw(nc, wa[:, :nc])
        if not na and not nb:
            return wa, wa
        wb = np.empty((n_boot, nc + nb), dtype=np.float32)
        wb[:, :nc] = wa[:, :nc]
        draw(na, wa[:, nc:])
        draw(nb, wb[:, nc:])
        return wa, wb


def row_totals(W: np.ndarray) -> float:
    """The largest total weight of a bootstrap row (bounds the sums in `_wsum`, `wdot`)."""
    return float(W.sum(axis=1, dtype=np.float64).max(initial=0))


def wdot(W: np.ndarray, v: np.ndarray, wmax: float | None = None) -> np.ndarray:
    """W @ v for float32 weights W and float64 v, without a float64 copy of all of W.

    numpy computes W @ v on a float64 copy of W. When every value of v is an integer and
    no sum can reach 2**53, every partial sum is exact, so any order of summation gives
    those same numbers: W is cast a block of rows at a time. Otherwise, W @ v as is.
    """
    if W.dtype != np.float32 or v.dtype != np.float64 or W.ndim != 2 or not W.size:
        return W @ v
    big = float(np.abs(v).max(initial=0))
    if wmax is None:
        wmax = row_totals(W)
    if not (wmax * big < 2**52 and np.array_equal(v, np.round(v))):
        return W @ v
    out = np.empty(W.shape[0])
    step = max(1, 2_000_000 // W.shape[1])
    for s in range(0, W.shape[0], step):
        out[s : s + step] = W[s : s + step].astype(np.float64) @ v
    return out


def quantile_sorted(values: np.ndarray, q: float) -> float:
    """Inverted-CDF quantile: the smallest value whose CDF reaches q (matches the bootstrap)."""
    n = len(values)
    k = max(0, math.ceil(q * n) - 1)
    return float(values[min(k, n - 1)])


def boot_quantiles(
    vals: np.ndarray,
    clusters: np.ndarray,
    W: np.ndarray,
    qs: list[float],
    wmax: float | None = None,
) -> np.ndarray:
    """Weighted inverted-CDF quantiles per bootstrap row: shape (len(qs), n_boot).

    Row b weighs value i by W[b, clusters[i]]; its q-quantile is the smallest sorted value
    whose cumulative weight reaches ceil(q * total). Rather than a cumulative sum over every
    value in every row (n_boot x n), the cumulative weight at a few pivots comes from one
    product with per-cluster counts (exact in float64: integers), and the cumulative sum runs
    only over a window around the point quantile that holds every row's answer (widened
    until it does). The result is the same as the full sum, to the index. `wmax`:
    `row_totals(W)`, when the caller has it.
    """
    order = np.argsort(vals, kind="stable")
    v = vals[order]
    cs = np.asarray(clusters)[order]
    n, n_boot, k_cl = len(v), W.shape[0], W.shape[1]
    out = np.empty((len(qs), n_boot))
    if n == 0:
        out.fill(np.nan)
        return out
    sizes = np.bincount(cs, minlength=k_cl).astype(np.float64)
    plan = []  # (q, point position, half-width, counts per cluster up to the point)
    for q in qs:
        p0 = min(max(0, math.ceil(q * n) - 1), n - 1)
        cnt0 = np.bincount(cs[: p0 + 1], minlength=k_cl).astype(np.float64)
        # A row's cumulative weight at p0 less its target varies by about this many values
        # (multinomial weights: variance ~1 per cluster); 5 of them hold nearly every row.
        half = 32 + int(5 * math.sqrt(float(((cnt0 - q * sizes) ** 2).sum())))
        plan.append((q, p0, half))
    if n <= SMALL_N or sum(2 * h for _, _, h in plan) >= n // 2:
        return _boot_quantiles_full(v, cs, W, qs)

    def cum_at(positions: list[int]) -> np.ndarray:
        """Cumulative weight of sorted values [0, p] per row, for each p: (n_boot, len)."""
        cnt = np.zeros((k_cl, len(positions)))
        for j, p in enumerate(positions):
            if p >= 0:
                cnt[:, j] = np.bincount(cs[: p + 1], minlength=k_cl)
        return _wsum(W, cnt, wmax)

    if wmax is None:
        wmax = row_totals(W)
    # A row's cumulative weight never exceeds wmax x the largest cluster's count of values.
    # Below 2**24, float32 sums it exactly: the window's cumulative sum runs in float32 then
    # (half the memory of int64), compared with targets that float32 also holds exactly.
    exact32 = wmax * float(sizes.max(initial=0)) < 2**24
    cdt = np.float32 if W.dtype == np.float32 and exact32 else np.int64
    # One pass over W for the total and every quantile's window edges.
    edges = [(max(0, p0 - half), min(n - 1, p0 + half)) for _, p0, half in plan]
    cum = cum_at([n - 1] + [x for lo, hi in edges for x in (lo - 1, hi)])
    tot = cum[:, 0]
    empty = tot == 0
    for j, (q, p0, half) in enumerate(plan):
        target = np.maximum(np.ceil(q * tot - 1e-9), 1)
        (lo, hi), below, upto = edges[j], cum[:, 1 + 2 * j], cum[:, 2 + 2 * j]
        while True:
            ok = empty | (((lo == 0) | (below < target)) & ((hi == n - 1) | (upto >= target)))
            if ok.all():
                break
            half *= 4  # a row outside the window: widen it
            lo, hi = max(0, p0 - half), min(n - 1, p0 + half)
            below, upto = cum_at([lo - 1, hi]).T
        cw = np.cumsum(W[:, cs[lo : hi + 1]], axis=1, dtype=cdt)
        k = lo + (cw >= (target - below).astype(cdt)[:, None]).argmax(axis=1)
        res = v[k].astype(float)
        res[empty] = np.nan
        out[j] = res
    return out


def _wsum(W: np.ndarray, cnt: np.ndarray, wmax: float) -> np.ndarray:
    """W @ cnt for integer weights and counts, exactly, as int64.

    Every partial sum is an integer no larger than `wmax` (a row's largest total weight)
    x the largest count, so
    float32 sums it exactly while that stays below 2**24; beyond, float64.
    """
    big = wmax * float(cnt.max(initial=0))
    dt = np.float32 if big < 2**24 else np.float64
    return np.rint(W @ cnt.astype(dt)).astype(np.int64)


def _boot_quantiles_full(
    v: np.ndarray, cs: np.ndarray, W: np.ndarray, qs: list[float]
) -> np.ndarray:
    """boot_quantiles by a cumulative sum over all (sorted) values: small inputs, and the
    reference the windowed search is tested against."""
    out = np.empty((len(qs), W.shape[0]))
    chunk = max(1, 4_000_000 // max(1, len(v)))
    for s in range(0, W.shape[0], chunk):
        w = W[s : s + chunk][:, cs]
        cw = np.cumsum(w, axis=1, dtype=np.int64)
        tot = cw[:, -1]
        for j, q in enumerate(qs):
            target = np.ceil(q * tot - 1e-9)
            k = (cw >= np.maximum(target, 1)[:, None]).argmax(axis=1)
            res = v[k].astype(float)
            res[tot == 0] = np.nan
            out[j, s : s + chunk] = res
    return out


def cluster_sums(values: np.ndarray, clusters: np.ndarray, n_clusters: int) -> np.ndarray:
    """Sum of `values` per cluster index."""
    return np.bincount(clusters, weights=values, minlength=n_clusters)


def robust_se(x: np.ndarray) -> float:
    """Standard error of bootstrap draws, never below the IQR-based one (nan under 10 draws)."""
    x = x[np.isfinite(x)]
    if len(x) < 10:
        return float("nan")
    q25, q75 = np.percentile(x, [25, 75])
    return float(max(np.std(x, ddof=1), (q75 - q25) / 1.349))
