from workload.measure.records import RequestRecord
from workload.measure.retry import RetryPolicy, next_delay_s


def rec(**kw):
    return RequestRecord(status="error", error_kind="http_status", **kw)


def test_retry_after_is_honoured_and_capped():
    assert next_delay_s(rec(http_status=429, retry_after_s=2.5), 0) == 2.5
    assert next_delay_s(rec(http_status=503, retry_after_s=1e9), 0) == 60.0
    assert next_delay_s(rec(http_status=503, retry_after_s=-4), 0) == 0.0


def test_backoff_without_header_doubles_per_attempt():
    p = RetryPolicy(base_s=0.5, max_delay_s=3.0)
    assert [next_delay_s(rec(http_status=429), a, p) for a in range(4)] == [0.5, 1.0, 2.0, 3.0]
    assert next_delay_s(rec(http_status=429), 10**9, p) == 3.0


def test_other_errors_resend_at_once_by_default():
    r = RequestRecord(status="error", error_kind="connect")
    assert next_delay_s(r, 0) == 0.0
    assert next_delay_s(r, 0, RetryPolicy(other_s=0.2)) == 0.2
