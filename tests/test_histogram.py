import json

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from workload.measure.histogram import LatencyHistogram, _hdr_index


def test_vectorised_index_matches_hdrh():
    h = HdrHistogram(1, 3_600_000_000, 3)
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [np.arange(0, 5000), rng.integers(0, 3_600_000_000, 5000), 2 ** np.arange(0, 31)]
    ).astype(np.int64)
    expected = [h.get_counts_array_index(int(v)) for v in values]
    assert _hdr_index(h, values).tolist() == expected


def test_bulk_recording_and_percentiles_equal_hdrh_one_by_one():
    rng = np.random.default_rng(4)
    values_us = np.concatenate([rng.integers(0, 3000, 500), rng.lognormal(9, 2, 5000).astype(int)])
    values_us = values_us.clip(0, 3_600_000_000)
    ref = HdrHistogram(1, 3_600_000_000, 3)
    for v in values_us:
        ref.record_value(int(v))
    h = LatencyHistogram()
    h.record_many_ms((values_us / 1000).tolist())
    h.record_ms(1.0)
    ref.record_value(1000)
    h._flush()
    assert h._hdr.equals(ref)
    assert h._hdr.get_total_count() == ref.get_total_count()
    assert h._hdr.get_max_value() == ref.get_max_value()
    pcts = [0.1, 1, 25, 50, 90, 99, 99.9, 100]
    ours = h.percentiles_ms(pcts)
    theirs = ref.get_percentile_to_value_dict(pcts)
    for p in pcts:  # identical up to our cap at the exact extremes
        capped = min(max(theirs[p], int(values_us.min())), int(max(values_us.max(), 1000)))
        assert ours[p] == capped / 1000.0, p


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_match_numpy_within_hdr_precision(seed):
    rng = np.random.default_rng(seed)
    values_ms = np.concatenate([rng.lognormal(4, 1.5, 20_000), rng.uniform(0.05, 2, 2_000)])
    h = LatencyHistogram()
    h.record_many_ms(values_ms.tolist())
    us = np.sort(np.rint(values_ms * 1000))
    for p in (1, 50, 90, 95, 99, 99.9):
        got = h.percentile_ms(p) * 1000
        k = max(1, int(p / 100 * len(us) + 0.5))  # HDR's rank rule
        exact = us[k - 1]
        assert abs(got - exact) <= max(1.0, exact * 1e-3), (p, got, exact)
        # and against numpy's nearest-rank percentile, allowing one rank of rounding
        ref = np.percentile(us, p, method="inverted_cdf")
        assert us[max(0, k - 2)] * (1 - 1e-3) - 1 <= got <= max(ref, exact) * (1 + 1e-3) + 1
    s = h.summary()
    assert s["count"] == len(us)
    assert s["mean"] == pytest.approx(us.mean() / 1000, rel=1e-12)
    assert s["max"] == us[-1] / 1000 and s["min"] == us[0] / 1000


def test_sub_millisecond_precision():
    h = LatencyHistogram()
    h.record_many_ms([0.25, 0.5, 0.75, 1.0])
    assert h.percentile_ms(50) == pytest.approx(0.5, abs=0.001)
    assert h.summary()["p99"] == pytest.approx(1.0, abs=0.001)


def test_clamps_values_beyond_range_and_ignores_nan():
    h = LatencyHistogram(max_us=10_000_000)
    h.record_many_ms([5.0, 20_000.0, float("nan"), -3.0])
    s = h.summary()
    assert s["count"] == 3 and s["clamped"] == 1 and s["max"] == 10_000.0 and s["min"] == 0.0


def test_empty_histogram_summary():
    s = LatencyHistogram().summary()
    assert s == {"count": 0, "mean": None, "min": None, "max": None} | {
        k: None for k in ("p50", "p90", "p95", "p99")
    }


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0, 3_600_000, allow_nan=False), max_size=200),
    st.lists(st.floats(0, 3_600_000, allow_nan=False), max_size=200),
)
def test_histogram_merge_equals_single(a, b):
    ha, hb, hab = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    ha.record_many_ms(a)
    hb.record_many_ms(b)
    hab.record_many_ms(a + b)
    ha.merge(LatencyHistogram.from_dict(json.loads(json.dumps(hb.to_dict()))))
    assert ha.bucket_counts() == hab.bucket_counts()
    assert ha.summary() == hab.summary()


def test_sparse_and_dense_counts_encode_like_hdrh():
    # Few distinct values stay sparse (a few KiB, not a 184 KiB array); many go dense.
    # Either way the encoding, counts and percentiles are hdrh's own.
    rng = np.random.default_rng(7)
    wide = np.exp(rng.uniform(0, np.log(3e9), 100_000)).astype(np.int64)
    for values_us in (rng.integers(1000, 1100, 300), wide):
        ref = HdrHistogram(1, 3_600_000_000, 3)
        for v in values_us:
            ref.record_value(int(v))
        h = LatencyHistogram()
        h.record_many_ms((values_us / 1000).tolist())
        assert h.to_dict()["hdr"] == ref.encode().decode("ascii")
        assert h._hdr.equals(ref)
        assert (h.counts_copy() == np.ctypeslib.as_array(ref.counts)).all()
        back = LatencyHistogram.from_dict(json.loads(json.dumps(h.to_dict())))
        assert back.summary() == h.summary() and back.bucket_counts() == h.bucket_counts()
    assert h._dense is not None  # the wide one went dense
    small = LatencyHistogram()
    small.record_many_ms([1.0, 2.0, 3.0])
    small.summary()
    assert small._dense is None and small._idx.size == 3


def test_vectorised_bucket_value_matches_hdrh():
    from workload.measure.histogram import _hdr_value

    h = HdrHistogram(1, 3_600_000_000, 3)
    idx = np.arange(0, h.counts_len, 7, dtype=np.int64)
    expected = [h.get_value_from_index(int(i)) for i in idx]
    assert _hdr_value(h, idx).tolist() == expected


def test_cumulative_counts_at_bounds_count_values_at_or_below_each_bound():
    h = LatencyHistogram()
    values_ms = [0.5, 1.0, 4.0, 4.0, 9.99, 250.0, 1200.0]
    for v in values_ms:
        h.record_ms(v)
    bounds_us = [100, 1000, 5000, 10_000, 1_000_000, 10_000_000]
    assert h.counts_at_most_us(bounds_us) == [0, 2, 4, 5, 6, 7]
    assert LatencyHistogram().counts_at_most_us([1, 2]) == [0, 0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.001, 100_000.0), min_size=1, max_size=200))
def test_cumulative_counts_are_within_one_hdr_bucket_of_exact(values_ms):
    h = LatencyHistogram()
    h.record_many_ms(values_ms)
    bounds_us = [1_000, 10_000, 100_000, 1_000_000, 10_000_000]
    got = h.counts_at_most_us(bounds_us)
    for b, n in zip(bounds_us, got, strict=True):
        exact = sum(1 for v in values_ms if round(v * 1000) <= b)
        loose = sum(1 for v in values_ms if round(v * 1000) <= b * 1.001 + 1)
        assert exact <= n <= loose
    assert got == sorted(got) and got[-1] <= len(values_ms)
