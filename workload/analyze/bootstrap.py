"""The cluster bootstrap engine: sessions are the clusters, paired sessions resample jointly.

Seeded traffic gives both runs the same session ids, so a session present in both
runs is resampled jointly (paired); sessions present in one run only are resampled
independently within their run (a stratified bootstrap). All requests of a
resampled session come along, so within-session correlation is respected.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Iterator

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
        match_content: bool = False,
    ) -> None:
        # history: actual: a paired shift compares only requests whose content matched
        self.match_content = match_content

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


def weights_ahead(
    scopes: list[Scope], rng: np.random.Generator, n_boot: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """`Scope.weights` of each scope in turn, the next scope's drawn meanwhile in a thread.

    The draws are a third of a large comparison's CPU time, and numpy lets go of the GIL
    while it draws and counts, so drawing scope k + 1 while the caller works on scope k
    puts a second core to use. One thread draws every scope in order from `rng`: the same
    random stream, so the same numbers, as drawing them in turn. It runs at most one scope
    ahead (two scopes' weights in memory, not more), and is done with `rng` when the last
    scope has been handed over.
    """
    got: queue.Queue[tuple[np.ndarray, np.ndarray] | BaseException] = queue.Queue()
    ahead = threading.Semaphore(1)  # scopes the thread may draw before the caller takes one
    stop = threading.Event()

    def draw() -> None:
        try:
            for sc in scopes:
                ahead.acquire()
                if stop.is_set():
                    return
                got.put(sc.weights(rng, n_boot))
        except BaseException as e:  # noqa: BLE001 - handed to the caller, raised there
            got.put(e)

    worker = threading.Thread(target=draw, name="bootstrap-draws", daemon=True)
    worker.start()
    try:
        for _ in scopes:
            w = got.get()
            if isinstance(w, BaseException):
                raise w
            ahead.release()  # the next scope's draw runs while the caller works on this one
            yield w
    finally:
        stop.set()
        ahead.release()
        worker.join()


def row_totals(W: np.ndarray) -> float:
    """The largest total weight of a bootstrap row (bounds the sums in `_wsum`, `wdot`)."""
    return float(W.sum(axis=1, dtype=np.float64).max(initial=0))


def wdot(W: np.ndarray, v: np.ndarray, wmax: float | None = None) -> np.ndarray:
    """W @ v for float32 weights W and float64 v, without a float64 copy of all of W."""
    return wdot_many(W, [v], wmax)[0]


def wdot_many(W: np.ndarray, vs: list[np.ndarray], wmax: float | None = None) -> list[np.ndarray]:
    """[W @ v for v in vs] for float32 weights W, without a float64 copy of all of W.

    numpy computes W @ v on a float64 copy of W. When every value of v is an integer and
    no sum can reach 2**53, every partial sum is exact, so any order of summation gives
    those same numbers: W is cast a block of rows at a time, and all such v go through
    one product per block (one pass over W for all of them). Any other v: W @ v as is.
    """
    if W.dtype != np.float32 or W.ndim != 2 or not W.size or not vs:
        return [W @ v for v in vs]
    if wmax is None:
        wmax = row_totals(W)
    exact = [
        v.dtype == np.float64
        and wmax * float(np.abs(v).max(initial=0)) < 2**52
        and np.array_equal(v, np.round(v))
        for v in vs
    ]
    out = [None if ok else W @ v for v, ok in zip(vs, exact, strict=True)]
    ints = [i for i, ok in enumerate(exact) if ok]
    if ints:
        V = np.stack([vs[i] for i in ints], axis=1)
        res = np.empty((W.shape[0], len(ints)))
        step = max(1, 2_000_000 // W.shape[1])
        for s in range(0, W.shape[0], step):
            res[s : s + step] = W[s : s + step].astype(np.float64) @ V
        for j, i in enumerate(ints):
            out[i] = res[:, j]
    return out  # type: ignore[return-value]  # every None was filled in the loop above


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
    whose cumulative weight reaches ceil(q * total). See `boot_quantiles_sorted`.
    """
    order = np.argsort(vals, kind="stable")
    return boot_quantiles_sorted([(vals[order], np.asarray(clusters)[order], qs)], W, wmax)[0]


def boot_quantiles_sorted(
    items: list[tuple[np.ndarray, np.ndarray, list[float]]],
    W: np.ndarray,
    wmax: float | None = None,
) -> list[np.ndarray]:
    """`boot_quantiles` of several value sets weighed by the same W, each given sorted.

    `items`: (values sorted, their clusters in that order, quantiles); one result of shape
    (len(qs), n_boot) per item. Rather than a cumulative sum over every value in every row
    (n_boot x n), the cumulative weight at a few pivots comes from a product with per-cluster
    counts (exact: integers), one product for the pivots of every item (one pass over W,
    not one per latency), and the cumulative sum runs only over a window around the point
    quantile that holds every row's answer (widened until it does). The result is the same
    as the full sum, to the index. `wmax`: `row_totals(W)`, when the caller has it.
    Long because it is the verdict's hot loop: the pivot, window and widening steps share
    their arrays, and one function keeps them in one place.
    """
    n_boot, k_cl = W.shape
    outs: list[np.ndarray] = []
    todo = []  # (item index, plan, window edges, first pivot column)
    cols: list[np.ndarray] = []  # pivot counts of every item, for the one product
    ncol = 0
    for i, (v, cs, qs) in enumerate(items):
        n = len(v)
        out = np.empty((len(qs), n_boot))
        outs.append(out)
        if n == 0:
            out.fill(np.nan)
            continue
        p0s = [min(max(0, math.ceil(q * n) - 1), n - 1) for q in qs]
        cnt = _counts_upto(cs, [*p0s, n - 1], k_cl)
        sizes = cnt[:, -1]
        plan = []  # (q, point position, half-width)
        for j, q in enumerate(qs):
            # A row's cumulative weight at p0 less its target varies by about this many
            # values (multinomial weights: variance ~1 per cluster); 5 of them hold nearly
            # every row.
            half = 32 + int(5 * math.sqrt(float(((cnt[:, j] - q * sizes) ** 2).sum())))
            plan.append((q, p0s[j], half))
        if n <= SMALL_N or sum(2 * h for _, _, h in plan) >= n // 2:
            outs[i] = _boot_quantiles_full(v, cs, W, qs)
            continue
        edges = [(max(0, p0 - half), min(n - 1, p0 + half)) for _, p0, half in plan]
        # The total and the cumulative weight below each window; the weight up to its top
        # is that plus the window's sum.
        pivots = _counts_upto(cs, [n - 1] + [lo - 1 for lo, _ in edges], k_cl)
        todo.append((i, plan, edges, ncol, float(sizes.max(initial=0))))
        cols.append(pivots)
        ncol += pivots.shape[1]
    if not todo:
        return outs
    if wmax is None:
        wmax = row_totals(W)
    cum_all = _wsum_columns(W, np.hstack(cols) if len(cols) > 1 else cols[0], wmax)
    for i, plan, edges, c0, size_max in todo:
        v, cs, _ = items[i]
        n = len(v)
        # A row's cumulative weight never exceeds wmax x the largest cluster's count of
        # values. Below 2**24, float32 sums it exactly: the window's cumulative sum runs in
        # float32 then (half the memory of int64), compared with targets float32 holds exactly.
        exact32 = wmax * size_max < 2**24
        cdt = np.float32 if W.dtype == np.float32 and exact32 else np.int64
        tot = cum_all[:, c0]
        empty = tot == 0
        for j, (q, p0, half) in enumerate(plan):
            target = np.maximum(np.ceil(q * tot - 1e-9), 1)
            (lo, hi), below = edges[j], cum_all[:, c0 + 1 + j]
            while True:
                # take() lays the window out row-major, so the cumulative sum runs along
                # contiguous memory (W[:, idx] comes out column-major: several times slower).
                cw = np.cumsum(np.take(W, cs[lo : hi + 1], axis=1), axis=1, dtype=cdt)
                upto = below + cw[:, -1]  # integers, exact
                ok = empty | (((lo == 0) | (below < target)) & ((hi == n - 1) | (upto >= target)))
                if ok.all():
                    break
                half *= 4  # a row outside the window: widen it
                lo, hi = max(0, p0 - half), min(n - 1, p0 + half)
                below = _wsum(W, _counts_upto(cs, [lo - 1], k_cl), wmax)[:, 0]
            k = lo + (cw >= (target - below).astype(cdt)[:, None]).argmax(axis=1)
            res = v[k].astype(float)
            res[empty] = np.nan
            outs[i][j] = res
    return outs


def _wsum_columns(W: np.ndarray, cnt: np.ndarray, wmax: float) -> np.ndarray:
    """`_wsum` with each distinct column of `cnt` multiplied once (latencies missing on the
    same rows share their totals)."""
    sums = cnt.sum(axis=0)
    first: list[int] = []  # columns kept
    where: list[int] = []  # per column, its kept column
    for j in range(cnt.shape[1]):
        same = (u for u, c in enumerate(first) if sums[c] == sums[j])
        hit = next((u for u in same if np.array_equal(cnt[:, first[u]], cnt[:, j])), None)
        if hit is None:
            first.append(j)
            hit = len(first) - 1
        where.append(hit)
    if len(first) == cnt.shape[1]:
        return _wsum(W, cnt, wmax)
    return _wsum(W, cnt[:, first], wmax)[:, where]


def _counts_upto(cs: np.ndarray, positions: list[int], k_cl: int) -> np.ndarray:
    """How many of the values cs[: p + 1] fall in each cluster, per p: (k_cl, len(positions)).

    One pass over cs in position order (a count per segment, added up), not one per
    position; p = -1 gives a column of zeros. float64, like the counts it replaces.
    """
    out = np.zeros((k_cl, len(positions)))
    run = np.zeros(k_cl)
    at = 0  # run counts cs[:at]
    for j in sorted(range(len(positions)), key=positions.__getitem__):
        p = positions[j]
        if p + 1 > at:
            run += np.bincount(cs[at : p + 1], minlength=k_cl)
            at = p + 1
        out[:, j] = run
    return out


def _wsum(W: np.ndarray, cnt: np.ndarray, wmax: float) -> np.ndarray:
    """W @ cnt for integer weights and counts, exactly, as int64.

    Every partial sum is an integer no larger than `wmax` (a row's largest total weight)
    x the largest count, so
    float32 sums it exactly while that stays below 2**24; beyond, float64.
    """
    big = wmax * float(cnt.max(initial=0))
    dt = np.float32 if big < 2**24 else np.float64
    out: np.ndarray = np.rint(W @ cnt.astype(dt)).astype(np.int64)
    return out


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
