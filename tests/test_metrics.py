"""workload.observe.metrics: /metrics parsing, scraping, summaries, the metrics.jsonl reader."""

import json
from pathlib import Path

import pytest

from tests.fake_vllm import FakeVLLM, text
from workload.observe.metrics import (
    CACHE_CONFIG,
    MetricsScraper,
    metrics_series,
    parse_metrics,
    read_samples,
    scrape_summary,
    series_from_samples,
    spec_decode_crosscheck,
)

FIXTURES = Path(__file__).parent / "fixtures"
START = (FIXTURES / "metrics_vllm_start.txt").read_text()
END = (FIXTURES / "metrics_vllm_end.txt").read_text()
DP2 = (FIXTURES / "metrics_vllm_dp2.txt").read_text()
SECRET = "sk-test-secret-123"


def sample(body: str, t: float) -> dict:
    return {"t": t, "values": parse_metrics(body)}


def strip_spec(body: str) -> str:
    return "\n".join(line for line in body.splitlines() if "spec_decode" not in line) + "\n"


# ---------------------------------------------------------------- parse_metrics


def test_parse_metrics_realistic_fixture():
    m = parse_metrics(END)
    assert m["gauges"] == {
        "vllm:num_requests_running": 14.0,
        "vllm:num_requests_waiting": 3.0,
        "vllm:kv_cache_usage_perc": 0.4213,
    }
    assert m["counters"]["vllm:prefix_cache_hits_total"] == 1_030_000
    assert m["counters"]["vllm:spec_decode_num_accepted_tokens_total"] == 150_000
    assert m["labelled"]["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == {
        "0": 65000.0,
        "1": 50000.0,
        "2": 35000.0,
    }
    assert m["labelled"]["vllm:request_success_total"]["length"] == 112
    ttft = m["histograms"]["vllm:time_to_first_token_seconds"]
    assert ttft["count"] == 700 and ttft["buckets"]["+Inf"] == 700
    assert m["cache_config"][0]["num_gpu_blocks"] == "47575"
    assert m["engines"] == ["0"]
    assert not any(k.startswith("python_") or k.startswith("process_") for k in m["gauges"])


def test_parse_metrics_sums_engines_but_averages_kv_usage():
    m = parse_metrics(DP2)
    assert m["engines"] == ["0", "1"]
    assert m["gauges"]["vllm:num_requests_running"] == 28.0
    assert m["gauges"]["vllm:kv_cache_usage_perc"] == pytest.approx(0.4213)
    assert m["counters"]["vllm:num_preemptions_total"] == 14.0
    assert len(m["cache_config"]) == 2


def test_parse_metrics_maps_legacy_names():
    body = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
        "# TYPE vllm:gpu_prefix_cache_queries counter\n"
        'vllm:gpu_prefix_cache_queries_total{model_name="m"} 10\n'
    )
    m = parse_metrics(body)
    assert m["gauges"] == {"vllm:kv_cache_usage_perc": 0.5}
    assert m["counters"] == {"vllm:prefix_cache_queries_total": 10.0}


# ---------------------------------------------------------------- scrape_summary


def test_scrape_summary_deltas_and_gauges():
    samples = [sample(START, 100.0), {"t": 105.0, "error": "timeout"}, sample(END, 160.0)]
    s = scrape_summary(samples)
    assert (s["samples"], s["failed_samples"], s["span_s"]) == (3, 1, 60.0)
    assert s["prefix_cache_hit_ratio"] == pytest.approx(990_000 / 1_200_000)
    assert s["preemptions"] == 5
    assert s["request_success"] == {"stop": 495.0, "length": 102.0, "abort": 3.0}
    sd = s["spec_decode"]
    assert (sd["num_drafts"], sd["draft_tokens"], sd["accepted_tokens"]) == (70000, 210000, 132000)
    assert sd["accepted_per_position"] == [57000, 44000, 31000]
    assert sd["draft_acceptance_rate"] == pytest.approx(132000 / 210000)
    assert sd["acceptance_length"] == pytest.approx(1 + 132000 / 70000)
    kv = s["gauges"]["vllm:kv_cache_usage_perc"]
    assert kv == {"min": 0.0, "mean": pytest.approx(0.21065), "max": 0.4213}
    assert s["histograms"]["vllm:time_to_first_token_seconds"]["count"] == 600
    assert s["absent"] == []


def test_scrape_summary_reports_absent_not_zero():
    samples = [sample(strip_spec(START), 0.0), sample(strip_spec(END), 10.0)]
    s = scrape_summary(samples)
    assert "vllm:spec_decode_num_drafts_total" in s["absent"]
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in s["absent"]
    assert CACHE_CONFIG not in s["absent"]
    assert s["spec_decode"]["accepted_tokens"] is None
    assert s["spec_decode"]["accepted_per_position"] is None
    assert s["counters"]["vllm:spec_decode_num_drafts_total"] is None


def test_scrape_summary_without_any_good_sample():
    s = scrape_summary([{"t": 1.0, "error": "ConnectionRefusedError"}])
    assert s["error"] == "ConnectionRefusedError"
    assert "vllm:num_requests_running" in s["absent"]
    assert s["gauges"]["vllm:num_requests_running"] is None


def test_counter_reset_is_not_negative():
    s = scrape_summary([sample(END, 0.0), sample(START, 10.0)])
    assert s["preemptions"] == 2  # restarted server: the post-restart count


def test_metrics_series():
    series = metrics_series([sample(START, 1.0), {"t": 2.0, "error": "x"}, sample(END, 3.0)])
    assert series["t"] == [1.0, 3.0] and series["running"] == [0.0, 14.0]


def test_spec_decode_crosscheck():
    scrape = scrape_summary([sample(START, 0.0), sample(END, 10.0)])
    client = {
        "accepted_tokens": 130_000,
        "draft_tokens": 208_000,
        "spec_steps": 69_000,
        "draft_acceptance_rate": 130_000 / 208_000,
        "acceptance_length_pooled": 1 + 130_000 / 69_000,
        "accepted_per_position": [56_000, 44_000, 30_000],
    }
    x = spec_decode_crosscheck(client, scrape)
    assert x["accepted_tokens"] == {
        "client": 130_000,
        "server": 132_000,
        "difference": 2_000,
        "relative": pytest.approx(2_000 / 130_000),
    }
    assert x["spec_steps"]["difference"] == 1_000
    assert x["accepted_per_position"]["difference"] == [1000, 0, 1000]
    assert not x["server_absent"]
    none = spec_decode_crosscheck(client, scrape_summary([sample(strip_spec(END), 0.0)]))
    assert none["server_absent"] and none["accepted_tokens"]["difference"] is None


# ---------------------------------------------------------------- scraper


def test_scraper_start_stop_sends_key_and_never_records_it():
    got = []
    with FakeVLLM({"/metrics": text(END)}) as srv:
        scraper = MetricsScraper(srv.url, interval_s=3600, sink=got.append, api_key=SECRET)
        scraper.start()
        samples = scraper.stop()
    # first sample at start, last at stop: deltas span the run without waiting an interval
    assert len(samples) == 2 and got == samples
    assert all(s["values"]["gauges"]["vllm:num_requests_running"] == 14.0 for s in samples)
    assert srv.auth_headers == [f"Bearer {SECRET}"] * 2
    assert SECRET not in json.dumps(samples)


def test_scrape_failures_are_samples():
    with FakeVLLM({"/metrics": text("oops", status=500)}) as srv:
        s = MetricsScraper(srv.url, api_key=SECRET).scrape_once()
        assert s["error"] == "HTTP 500" and "values" not in s
        url = srv.url
    down = MetricsScraper(url, timeout_s=1.0).scrape_once()  # server gone
    assert "error" in down and SECRET not in down["error"]


def test_sink_failure_does_not_stop_scraping():
    def bad_sink(_sample):
        raise RuntimeError("disk full")

    with FakeVLLM({"/metrics": text(END)}) as srv:
        scraper = MetricsScraper(srv.url, interval_s=3600, sink=bad_sink)
        scraper.start()
        assert len(scraper.stop()) == 2


# ---------------------------------------------------------------- real vLLM 0.32 capture

REAL = FIXTURES / "vllm_real"  # captured by tests/vllm/capture_fixtures.py (see its README)


def test_real_vllm_metrics_parse_without_absences():
    # Re-captures change the numbers; assert what holds for any capture.
    m = parse_metrics((REAL / "metrics.txt").read_text())
    c = m["counters"]
    assert 0 < c["vllm:prefix_cache_hits_total"] <= c["vllm:prefix_cache_queries_total"]
    assert c["vllm:prefix_cache_queries_total"] == c["vllm:prompt_tokens_total"]
    per_pos = m["labelled"]["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    assert sum(per_pos.values()) == c["vllm:spec_decode_num_accepted_tokens_total"]
    cc = m["cache_config"][0]
    assert int(cc["kv_cache_size_tokens"]) == int(cc["block_size"]) * int(cc["num_gpu_blocks"])
    assert scrape_summary([{"t": 0.0, "values": m}])["absent"] == []


# ---------------------------------------------------------------- metrics.jsonl reader


def test_read_samples_skips_torn_and_blank_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"t": 1.0, "error": "x"}\n\n{"t": 2.0, "values": {}}\n[1]\n{"t": 3.0, "val')
    assert read_samples(path) == [{"t": 1.0, "error": "x"}, {"t": 2.0, "values": {}}]
    assert read_samples(tmp_path / "absent.jsonl") == []


def test_series_from_samples_sums_labels_and_skips_failed_scrapes():
    rows = [
        sample(END, 2.0),
        {"t": 1.5, "error": "ConnectionRefusedError"},
        sample(START, 1.0),
        {"ts": 3.0, "metrics": {"foreign_gauge": 4, "flag": True}},
        {"no_time": 1},
    ]
    series = series_from_samples(rows)
    running = series["vllm:num_requests_running"]
    assert [t for t, _ in running] == [1.0, 2.0]  # sorted by time, the failed scrape left out
    per_pos = series["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    end = parse_metrics(END)["labelled"]["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    assert per_pos[-1] == (2.0, sum(end.values()))  # label sets summed
    assert series["foreign_gauge"] == [(3.0, 4.0)]
    assert "flag" not in series and "vllm:time_to_first_token_seconds" not in series
