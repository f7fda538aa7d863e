import pytest

from workload.measure.specdecode import SpecDecodeStats

A = {  # 10 steps, 15 accepted of 30 drafted, k=3 -> L = 2.5, weight 25
    "num_spec_steps": 10,
    "num_accepted_draft_tokens": 15,
    "num_draft_tokens": 30,
    "acceptance_histogram": [2, 3, 3, 2],
}
B = {  # 2 steps, 1 accepted of 4 drafted, k=2 -> L = 1.5, weight 3
    "num_spec_steps": 2,
    "num_accepted_draft_tokens": 1,
    "num_draft_tokens": 4,
    "acceptance_histogram": [1, 1, 0],
}


def test_sums_and_means():
    s = SpecDecodeStats()
    for spec in (A, B, None):
        s.add(spec)
    sd = s.summary()
    assert sd["requests_with_stats"] == 2 and sd["requests_without_stats"] == 1
    assert sd["acceptance_length_request_mean"] == pytest.approx(2.0)
    assert sd["acceptance_length_token_weighted"] == pytest.approx((25 * 2.5 + 3 * 1.5) / 28)
    assert sd["acceptance_length_pooled"] == pytest.approx(1 + 16 / 12)
    assert sd["draft_acceptance_rate"] == pytest.approx(16 / 34)
    assert sd["acceptance_histogram"] == [3, 4, 3, 2]
    assert sd["accepted_per_position"] == [9, 5, 2]


def test_merge_and_roundtrip_equal_one_pass():
    one, a, b = SpecDecodeStats(), SpecDecodeStats(), SpecDecodeStats()
    for spec in (A, B, None):
        one.add(spec)
    a.add(A)
    b.add(B)
    b.add(None)
    merged = SpecDecodeStats.from_dict(b.to_dict())
    merged.merge(SpecDecodeStats.from_dict(a.to_dict()))
    assert merged.to_dict() == one.to_dict()


def test_empty_summary_is_none_not_zero():
    sd = SpecDecodeStats().summary()
    assert sd["acceptance_length_request_mean"] is None
    assert sd["share_without_stats"] is None and sd["accepted_per_position"] == []
