"""The cluster bootstrap engine: sessions are the clusters, paired sessions resample jointly.

Seeded traffic gives both runs the same session ids, so a session present in both
runs is resampled jointly (paired); sessions present in one run only are resampled
independently within their run (a stratified bootstrap). All requests of a
resampled session come along, so within-session correlation is respected.
"""

from __future__ import annotations

import math

import numpy as np


class Scope:
    """The rows of one scope of both runs, indexed by session cluster."""

    def __init__(
        self,
        reqs_a: list[dict],
        reqs_b: list[dict],
        sess_a: list[dict],
        sess_b: list[dict],
        paired: bool,
    ) -> None:
        ids_a = {r.get("session_id", "") for r in reqs_a} | {
            s.get("session_id", "") for s in sess_a
        }
        ids_b = {r.get("session_id", "") for r in reqs_b} | {
            s.get("session_id", "") for s in sess_b
        }
        common = sorted(ids_a & ids_b) if paired else []
        only_a = sorted(ids_a - set(common))
        only_b = sorted(ids_b - set(common))
        self.n_common, self.n_only_a, self.n_only_b = len(common), len(only_a), len(only_b)
        # Cluster index spaces: A = common + only_a, B = common + only_b.
        self.idx_a = {sid: i for i, sid in enumerate(common + only_a)}
        self.idx_b = {sid: i for i, sid in enumerate(common + only_b)}
        self.reqs = (reqs_a, reqs_b)
        self.sess = (sess_a, sess_b)

    @property
    def pair_share(self) -> float:
        tot = self.n_common + max(self.n_only_a, self.n_only_b)
        return self.n_common / tot if tot else 0.0

    def weights(self, rng: np.random.Generator, n_boot: int) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap multiplicities per cluster, shape (n_boot, clusters), for A and B."""

        def draw(n: int) -> np.ndarray:
            if n == 0:
                return np.zeros((n_boot, 0), dtype=np.int32)
            idx = rng.integers(0, n, size=(n_boot, n)) + (np.arange(n_boot) * n)[:, None]
            return (
                np.bincount(idx.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.int32)
            )

        c = draw(self.n_common)
        return np.hstack([c, draw(self.n_only_a)]), np.hstack([c, draw(self.n_only_b)])


def quantile_sorted(values: np.ndarray, q: float) -> float:
    """Inverted-CDF quantile: the smallest value whose CDF reaches q (matches the bootstrap)."""
    n = len(values)
    k = max(0, math.ceil(q * n) - 1)
    return float(values[min(k, n - 1)])


def boot_quantiles(
    vals: np.ndarray, clusters: np.ndarray, W: np.ndarray, qs: list[float]
) -> np.ndarray:
    """Weighted inverted-CDF quantiles per bootstrap row: shape (len(qs), n_boot)."""
    order = np.argsort(vals, kind="stable")
    v = vals[order]
    out = np.empty((len(qs), W.shape[0]))
    chunk = max(1, 4_000_000 // max(1, len(v)))
    for s in range(0, W.shape[0], chunk):
        w = W[s : s + chunk][:, clusters[order]]
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
