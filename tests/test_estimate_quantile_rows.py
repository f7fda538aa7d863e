"""A latency quantile row's standard error when some bootstrap replicates put the quantile at 0.

Chunks read in one burst have 0 ms between them, so a replicate's ITL quantile can be 0 while
both sides' own quantiles are not: the log ratio of that replicate is infinite. It must count
(as a change as large as the 1 µs resolution allows), not vanish from the spread, and the
comparison must not print numpy's "divide by zero" warning on the console.
"""

from __future__ import annotations

import warnings

import numpy as np

from workload.analyze.estimate import _quantile_rows


def _rows(b_boot: np.ndarray) -> float:
    rng = np.random.default_rng(3)
    a_boot = rng.normal(2.0, 0.05, size=(1, 400)).clip(1.5)  # ms, quantile per replicate
    b = b_boot.reshape(1, -1)
    lat_rows = [("itl", ["itl_p50"], [0.5], [([2.0], 400, 0), ([2.1], 400, 0)])]
    (row,) = _quantile_rows("overall", 1.0, lat_rows, ([a_boot], [b]))
    return row.se


def test_replicates_at_zero_widen_the_error_and_print_nothing():
    rng = np.random.default_rng(4)
    b = rng.normal(2.1, 0.05, size=400).clip(1.5)
    clean = _rows(b)
    b_zero = b.copy()
    b_zero[::4] = 0.0  # a quarter of the replicates: every chunk of the draw in one burst
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning would raise here
        zero = _rows(b_zero)
    assert np.isfinite(clean) and np.isfinite(zero)
    assert zero > 10 * clean  # the zeros are in the spread, not dropped from it
