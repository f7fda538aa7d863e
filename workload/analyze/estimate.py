"""Point estimates and bootstrap standard errors of every metric in one scope.

A scope is the rows of both runs for overall, one traffic class, or one class's
session step (`Scope`, clustered by session). Changes are relative (B/A - 1, its
standard error on the log scale) for percentiles, shifts, sums, counts and the
acceptance length, and absolute (B - A) for ratios. Counts use a Poisson
standard error. `verdict` turns these into intervals and verdicts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workload.analyze.bootstrap import (
    Scope,
    boot_quantiles_sorted,
    cluster_sums,
    quantile_sorted,
    robust_se,
    wdot_many,
)
from workload.analyze.catalogue import METRICS, OPTIONAL_LATENCIES, QUANTILES, MetricDiff
from workload.analyze.table import Rows


def _ratio_parts(
    kind: str, rows_req: Rows, rows_sess: Rows | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(session codes, numerators, denominators) per row for a ratio metric."""
    none = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    if kind == "error_ratio":
        st = rows_req.col("status")
        keep = st != 2  # cancelled
        return rows_req.col("sid")[keep], (st[keep] != 0).astype(float), np.ones(int(keep.sum()))
    if kind in ("tool_loop_failure_ratio", "session_success_ratio"):
        if rows_sess is None:
            return none
        out = rows_sess.col("outcome")
        keep = (out != 2) & (out != -1)
        hit = out[keep] == (1 if kind == "tool_loop_failure_ratio" else 0)
        return rows_sess.col("sid")[keep], hit.astype(float), np.ones(int(keep.sum()))
    if kind in ("request_goodput_ratio", "session_goodput_ratio"):
        # Each row's goodput verdict, as judged when it was recorded (``slo_met``; rows of
        # runs older than goodput carry none and are left out). Cancelled ones do not count.
        rows = rows_req if kind == "request_goodput_ratio" else rows_sess
        if rows is None:
            return none
        met = rows.col("slo")
        keep = (met != -1) & ~rows.col("cancelled")
        return rows.col("sid")[keep], (met[keep] == 1).astype(float), np.ones(int(keep.sum()))
    if kind == "cached_ratio":
        p, c = rows_req.col("ptok"), rows_req.col("cached")
        keep = (rows_req.col("status") == 0) & (p != 0) & ~np.isnan(c)
        return rows_req.col("sid")[keep], c[keep], p[keep]
    if kind == "spec_acceptance_rate":
        d = rows_req.col("sd_draft")
        keep = d != 0
        return rows_req.col("sid")[keep], rows_req.col("sd_acc")[keep], d[keep]
    if kind == "spec_acceptance_length":
        v = rows_req.col("sd_len")
        keep = ~np.isnan(v)
        return rows_req.col("sid")[keep], v[keep], np.ones(int(keep.sum()))
    return none


def _pysum(x: np.ndarray) -> float:
    """sum() of the values in row order (as the point estimates always were: same rounding)."""
    total: float = sum(x.tolist())
    return total


RESOLUTION_MS = 0.001  # latencies are recorded in whole microseconds
MIN_SAMPLES = 20  # per side, below which a metric is "insufficient data"
MIN_PRIOR_PAIRS = 5  # paired requests a shift's point needs to be judged on the prior alone

# Ratios of independent yes/no outcomes (sessions; requests for errors), judged by an exact
# test on their counts at any sample size (`verdict`): 100 % -> 15 % session success over
# 26 sessions is decisive, a minimum count would call it "insufficient data".
EXACT_RATIOS = ("error_ratio", "tool_loop_failure_ratio", "session_success_ratio")


def _exact_counts(m: MetricDiff, name: str, sc: Scope) -> None:
    """Fill counts, change and a spread marker for an exact-test ratio (no bootstrap)."""
    counts = []
    for side in (0, 1):
        _, num, _ = _ratio_parts(name, sc.reqs[side], sc.sess[side])
        counts.extend([int(_pysum(num)), len(num)])
    xa, na, xb, nb = counts
    if not na or not nb:
        return
    m.method, m.counts = "exact", (xa, na, xb, nb)
    m.change = xb / nb - xa / na
    pooled = (xa + xb) / (na + nb)
    # Nothing can vary when every outcome on both sides is the same (Tarone: not counted).
    m.se = math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))


def _paired_requests(sc: Scope, lat: str) -> np.ndarray | None:
    """The (session, step) keys of requests with a `lat` value in both runs, or None if unpaired.

    Seeded traffic sends the same requests to both sides, but a slower side gets
    fewer of them done before the run ends, and the later steps it misses carry
    longer contexts: a quantile over all requests would compare different work.
    Latency quantiles are therefore taken over the requests both sides completed
    (the work done shows in throughput and completed counts).
    """
    if not sc.n_common:
        return None
    keys = [r.key()[~np.isnan(r.lat(lat))] for r in sc.reqs]
    return np.intersect1d(keys[0], keys[1])


def _last_by_key(rows: Rows, lat: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted unique keys, the last positive `lat` value of each, its content hash)."""
    v = rows.lat(lat)
    keep = v > 0  # NaN compares False
    k, v = rows.key()[keep][::-1], v[keep][::-1]
    uk, first = np.unique(k, return_index=True)
    content: np.ndarray = rows.col("content")[keep][::-1][first]
    return uk, v[first], content


def content_differs(ca: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """Pairs whose recorded content hashes differ (a side without a hash: not known to)."""
    differs: np.ndarray = (ca != cb) & (ca != 0) & (cb != 0)
    return differs


def _shift_metric(
    scope_name: str, sc: Scope, name: str
) -> tuple[MetricDiff, tuple[np.ndarray, np.ndarray, float] | None]:
    """Paired per-request shift: median over paired requests of log(B/A), cluster bootstrap.

    Only sessions in both runs carry paired requests, and those are the first
    `n_common` clusters of both index spaces, where A's and B's bootstrap
    weights are the same draw, so A's weights resample the pairs jointly.
    a / b are the medians of each side over the same paired requests.
    Returns the row with its point values, and (log ratios sorted, their clusters, median)
    for the bootstrap over A's weights (None: not enough pairs), which `_shift_se` finishes.
    With `sc.match_content` (history: actual) a pair whose content differs is left out: once
    the sessions parted ways the same (session, step) carries different prompts.
    """
    d = METRICS[name]
    lat = name.rsplit("_", 1)[0]
    m = MetricDiff(scope_name, name, d.unit, d.change, None, None, 0, 0)
    m.paired_share, m.higher_is_worse = sc.pair_share, d.higher_is_worse
    if not sc.n_common:
        return m, None
    (ka, xa, ca), (kb, xb, cb) = (_last_by_key(r, lat) for r in sc.reqs)
    keys, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    if sc.match_content:
        same = ~content_differs(ca[ia], cb[ib])
        keys, ia, ib = keys[same], ia[same], ib[same]
    m.n_a = m.n_b = len(keys)
    if not len(keys):
        return m, None
    va, vb = xa[ia], xb[ib]
    m.a = quantile_sorted(np.sort(va), 0.5)
    m.b = quantile_sorted(np.sort(vb), 0.5)
    lr = np.log(vb) - np.log(va)
    order = np.argsort(lr, kind="stable")
    slr = lr[order]
    med = quantile_sorted(slr, 0.5)
    if len(keys) < MIN_SAMPLES:
        # the point only (no interval of its own: insufficient data), which the measured
        # instance spread can still judge with 2-3 blocks (prior.py)
        if len(keys) >= MIN_PRIOR_PAIRS:
            m.change = math.expm1(med)
        return m, None
    m.change = math.expm1(med)
    cl = sc.cl_a[keys // sc.reqs[0].t.step_span]
    return m, (slr, cl[order], med)


def _shift_se(m: MetricDiff, med: float, boot: np.ndarray) -> None:
    """The shift's standard error from its bootstrap medians."""
    m.se = 0.0 if np.nanmax(np.abs(boot - med), initial=0) == 0 else robust_se(boot)


def _min_n(q: float) -> int:
    return max(MIN_SAMPLES, math.ceil(5 / (1 - q)))


def min_samples(metric: str) -> int:
    """Samples per side below which `metric` is "insufficient data" (p95: 100, p99: 500)."""
    q = QUANTILES.get(metric.rsplit("_", 1)[-1])
    return _min_n(q) if q is not None and METRICS[metric].kind == "quantile" else MIN_SAMPLES


def scope_metrics(
    scope_name: str,
    sc: Scope,
    names: list[str],
    rng: np.random.Generator,
    n_boot: int,
    dur: tuple[float | None, float | None],
    weights: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[MetricDiff]:
    """Point estimates and bootstrap standard errors for `names` in one scope.

    `weights`: the scope's bootstrap weights when drawn already (`weights_ahead`), else
    drawn here from `rng`. Rows come out latency quantiles first, then shifts, then the
    other kinds in `names` order.
    """
    Wa, Wb = weights if weights is not None else sc.weights(rng, n_boot)
    # Every row of a weight matrix sums to its number of columns (one draw per cluster):
    # row_totals(W) without the pass over W.
    wmax = (float(Wa.shape[1]), float(Wb.shape[1]))
    # The values of every latency quantile and shift, sorted once, then their bootstrap
    # quantiles in one batch per weight matrix (one product for all their pivots).
    items: _Items = ([], [])
    lat_rows = _quantile_items(sc, names, items)
    shifts = _shift_items(scope_name, sc, names, items)
    if Wb is Wa:  # no one-sided sessions: one batch, one product for both sides
        both_boot = boot_quantiles_sorted(items[0] + items[1], Wa, wmax[0])
        boots = (both_boot[: len(items[0])], both_boot[len(items[0]) :])
    else:
        boots = (
            boot_quantiles_sorted(items[0], Wa, wmax[0]),
            boot_quantiles_sorted(items[1], Wb, wmax[1]),
        )
    out = _quantile_rows(scope_name, sc.pair_share, lat_rows, boots)
    for m, item, med in shifts:
        if item is not None:
            _shift_se(m, med, boots[0][item][0])
        out.append(m)
    return out + _resampled_rows(scope_name, sc, names, (Wa, Wb), wmax, dur)


# (latency, quantile names, qs, per side: (points, n, item number | None))
# One batch of sorted values to resample: (values, their clusters, the quantiles wanted).
_Item = tuple[np.ndarray, np.ndarray, list[float]]
_Items = tuple[list[_Item], list[_Item]]
_LatRow = tuple[str, list[str], list[float], list[tuple[list[float | None], int, int | None]]]


def _quantile_items(sc: Scope, names: list[str], items: _Items) -> list[_LatRow]:
    """Each latency's sorted values per side appended to `items`; its rows' point estimates."""
    idx = (sc.cl_a, sc.cl_b)
    lat_names: dict[str, list[str]] = {}
    for n in names:
        if METRICS[n].kind == "quantile":
            lat_names.setdefault(n.rsplit("_", 1)[0], []).append(n)
    lat_rows: list[_LatRow] = []
    for lat, qnames in lat_names.items():
        qs = [QUANTILES[q.rsplit("_", 1)[1]] for q in qnames]
        both = _paired_requests(sc, lat)
        sides: list[tuple[list[float | None], int, int | None]] = []
        for side in (0, 1):
            rows = sc.reqs[side]
            lv = rows.lat(lat)
            keep = ~np.isnan(lv)
            if both is not None:
                keep &= np.isin(rows.key(), both)
            srows = rows.sorted_by(lat, keep)
            if len(srows) == 0:
                sides.append(([None] * len(qs), 0, None))
                continue
            sv = rows.t.lat[lat][srows]
            cl = idx[side][rows.t.sid[srows]]
            pts: list[float | None] = [quantile_sorted(sv, q) for q in qs]
            sides.append((pts, len(sv), len(items[side])))
            items[side].append((sv, cl, qs))
        if lat in OPTIONAL_LATENCIES and not (sides[0][1] or sides[1][1]):
            continue  # runs without it (older records, no stream): no row rather than no data
        lat_rows.append((lat, qnames, qs, sides))
    return lat_rows


def _shift_items(
    scope_name: str, sc: Scope, names: list[str], items: _Items
) -> list[tuple[MetricDiff, int | None, float]]:
    """Each shift's row, its index in A's `items` (None: not resampled) and its median."""
    shifts: list[tuple[MetricDiff, int | None, float]] = []
    for n in names:
        if METRICS[n].kind == "shift":
            m, boot_in = _shift_metric(scope_name, sc, n)
            if boot_in is None:
                shifts.append((m, None, 0.0))
                continue
            shifts.append((m, len(items[0]), boot_in[2]))
            items[0].append((boot_in[0], boot_in[1], [0.5]))
    return shifts


def _quantile_rows(
    scope_name: str, ps: float, lat_rows: list[_LatRow], boots: tuple[Any, Any]
) -> list[MetricDiff]:
    """The latency quantile rows, their standard errors from the bootstrap quantiles."""
    out: list[MetricDiff] = []
    for _lat, qnames, qs, sides in lat_rows:
        (pa, na, ia), (pb, nb, ib) = sides
        ba = boots[0][ia] if ia is not None else None
        bb = boots[1][ib] if ib is not None else None
        for j, (qn, q) in enumerate(zip(qnames, qs, strict=True)):
            d = METRICS[qn]
            m = MetricDiff(scope_name, qn, d.unit, d.change, pa[j], pb[j], na, nb)
            m.paired_share, m.higher_is_worse = ps, d.higher_is_worse
            if min(na, nb) >= _min_n(q) and m.a and m.b and ba is not None and bb is not None:
                m.change = m.b / m.a - 1.0
                # a replicate's quantile can be 0 (chunks read in one burst): floored at the
                # 1 µs resolution, it counts as the largest change it can be, not as no draw
                lr = np.log(np.maximum(bb[j], RESOLUTION_MS)) - np.log(
                    np.maximum(ba[j], RESOLUTION_MS)
                )
                m.se = robust_se(lr)
            out.append(m)
    return out


def _resampled_rows(
    scope_name: str,
    sc: Scope,
    names: list[str],
    W: tuple[np.ndarray, np.ndarray],
    wmax: tuple[float, float],
    dur: tuple[float | None, float | None],
) -> list[MetricDiff]:
    """Ratio, mean, sum and count rows, in `names` order."""
    # Resampled sums of the ratios, means and throughput: the vectors first, then one
    # product per weight matrix for all of them (one pass over W, not one per vector).
    vecs: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])

    def want(side: int, v: np.ndarray) -> int:
        vecs[side].append(v)
        return len(vecs[side]) - 1

    prep: dict[str, Any] = {}
    for n in names:
        kind = METRICS[n].kind
        if kind in ("ratio", "mean"):
            prep[n] = _ratio_parts_of(n, sc, W, want)
        elif kind == "sum":
            prep[n] = _sum_parts_of(sc, W, want)
    prods = (wdot_many(W[0], vecs[0], wmax[0]), wdot_many(W[1], vecs[1], wmax[1]))
    out: list[MetricDiff] = []
    for n in names:
        kind = METRICS[n].kind
        if kind in ("ratio", "mean"):
            out.append(_ratio_row(scope_name, sc, n, prep[n], prods))
        elif kind == "sum":
            out.append(_sum_row(scope_name, sc, n, prep[n], prods, dur))
        elif kind == "count":
            out.append(_count_row(scope_name, sc, n, dur))
    return out


def _ratio_parts_of(
    n: str, sc: Scope, W: tuple[np.ndarray, np.ndarray], want: Any
) -> tuple[list[float | None], list[tuple[int, int] | None], list[int]]:
    """A ratio's or mean's point per side, its numerator's and denominator's vector numbers
    (None: not resampled) and its sample counts."""
    idx = (sc.cl_a, sc.cl_b)
    pt: list[float | None] = []
    at: list[tuple[int, int] | None] = []
    ns = []
    for side in (0, 1):
        sid, num, den = _ratio_parts(n, sc.reqs[side], sc.sess[side])
        ns.append(len(sid))
        sden = _pysum(den)
        if not len(sid) or sden == 0:
            pt.append(None)
            at.append(None)
            continue
        pt.append(float(_pysum(num) / sden))
        if n in EXACT_RATIOS:  # judged on counts (_exact_counts), not resampled
            at.append(None)
            continue
        cla = idx[side][sid]
        k = W[side].shape[1]
        at.append((want(side, cluster_sums(num, cla, k)), want(side, cluster_sums(den, cla, k))))
    return pt, at, ns


def _sum_parts_of(
    sc: Scope, W: tuple[np.ndarray, np.ndarray], want: Any
) -> tuple[list[float], list[int], list[int]]:
    """Output tokens per side: the total, its cluster sums' vector number, the count."""
    idx = (sc.cl_a, sc.cl_b)
    spt: list[float] = []
    sat: list[int] = []
    ns = []
    for side in (0, 1):
        rows = sc.reqs[side]
        ok = rows.col("status") == 0
        toks = rows.col("ctok")[ok]
        cla = idx[side][rows.col("sid")[ok]]
        ns.append(len(toks))
        sums = (
            cluster_sums(toks, cla, W[side].shape[1]) if len(toks) else np.zeros(W[side].shape[1])
        )
        spt.append(float(toks.sum()))
        sat.append(want(side, sums))
    return spt, sat, ns


def _ratio_row(scope_name: str, sc: Scope, n: str, prep: Any, prods: tuple[Any, Any]) -> MetricDiff:
    """A ratio or mean: relative or absolute change, its SE from the resampled ratios."""
    d = METRICS[n]
    pt, at, ns = prep
    bs: list[Any] = []
    for side in (0, 1):
        pos = at[side]
        if pos is None:
            bs.append(None)
            continue
        i_num, i_den = pos
        with np.errstate(invalid="ignore", divide="ignore"):
            bs.append(prods[side][i_num] / prods[side][i_den])
    m = MetricDiff(scope_name, n, d.unit, d.change, pt[0], pt[1], ns[0], ns[1])
    m.paired_share, m.higher_is_worse = sc.pair_share, d.higher_is_worse
    if n in EXACT_RATIOS:
        _exact_counts(m, n, sc)
    elif min(ns) >= MIN_SAMPLES and pt[0] is not None and pt[1] is not None:
        if d.change == "relative":
            if pt[0] > 0 and pt[1] > 0:
                m.change = pt[1] / pt[0] - 1.0
                m.se = robust_se(np.log(bs[1]) - np.log(bs[0]))
        else:
            m.change = pt[1] - pt[0]
            diff = bs[1] - bs[0]
            # Zero spread in both runs: nothing can vary, so the metric cannot be flagged.
            m.se = 0.0 if np.nanmax(np.abs(diff - m.change), initial=0) == 0 else robust_se(diff)
    return m


def _sum_row(
    scope_name: str,
    sc: Scope,
    n: str,
    prep: Any,
    prods: tuple[Any, Any],
    dur: tuple[float | None, float | None],
) -> MetricDiff:
    """Throughput: tokens per second of each run (tokens when a duration is missing)."""
    d = METRICS[n]
    da, db = dur
    per = (da or 1.0, db or 1.0)
    tot, sat, ns = prep
    spt = [tot[side] / per[side] for side in (0, 1)]
    sbs = [prods[side][sat[side]] / per[side] for side in (0, 1)]
    m = MetricDiff(
        scope_name, n, d.unit if da and db else "tokens", d.change, spt[0], spt[1], ns[0], ns[1]
    )
    m.paired_share, m.higher_is_worse = sc.pair_share, d.higher_is_worse
    if min(ns) >= MIN_SAMPLES and spt[0] > 0 and spt[1] > 0:
        m.change = spt[1] / spt[0] - 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            m.se = robust_se(np.log(sbs[1]) - np.log(sbs[0]))
    return m


def _count_row(
    scope_name: str, sc: Scope, n: str, dur: tuple[float | None, float | None]
) -> MetricDiff:
    """A count per minute (a count when a duration is missing), its SE from Poisson."""
    d = METRICS[n]
    counts = []
    for side in (0, 1):
        if n == "completed_sessions":
            ss = sc.sess[side]
            c = int((ss.col("outcome") == 0).sum()) if ss is not None else 0
        else:
            c = int((sc.reqs[side].col("status") == 0).sum())
        counts.append(c)
    da, db = dur
    scale = (60.0 / da, 60.0 / db) if da and db else (1.0, 1.0)
    m = MetricDiff(
        scope_name, n, d.unit if da and db else "count", d.change,
        counts[0] * scale[0], counts[1] * scale[1], counts[0], counts[1],
    )  # fmt: skip
    m.paired_share, m.higher_is_worse = sc.pair_share, d.higher_is_worse
    # Like every other metric: below MIN_SAMPLES per side it is reported, not judged
    # (a 10 % change in 10 sessions is far inside Poisson noise, and a metric that
    # cannot be flagged must not widen every other interval through Bonferroni).
    if min(counts) >= MIN_SAMPLES:
        ca, cb = counts[0] + 0.5, counts[1] + 0.5
        m.change = (cb * scale[1]) / (ca * scale[0]) - 1.0
        m.se = math.sqrt(1 / ca + 1 / cb)
    return m
