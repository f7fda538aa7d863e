from tests.stats_builders import req
from workload.measure.series import time_series


def test_time_series_buckets_by_end_time():
    rows = [
        req(t_start=100.0, e2e_ms=1000.0, ttft_ms=10.0, completion_tokens=50).to_json(),
        req(t_start=100.0, e2e_ms=6000.0, ttft_ms=30.0, completion_tokens=100).to_json(),
        req(t_start=101.0, e2e_ms=1000.0, user_class="bg", status="error").to_json(),
    ]
    ts = time_series(rows, bucket_s=5.0)
    assert ts["t0"] == 100.0
    assert ts["overall"]["requests"] == [2, 1]
    assert ts["overall"]["errors"] == [1, 0]
    assert ts["by_class"]["chat"]["ttft_p50_ms"] == [10.0, 30.0]
    assert ts["by_class"]["chat"]["output_tokens_per_s"] == [10.0, 20.0]
    assert ts["by_class"]["bg"]["ttft_p95_ms"] == [None, None]
    assert time_series([])["t0"] is None
