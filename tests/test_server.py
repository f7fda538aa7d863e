import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from workload.observe.server import (
    CACHE_CONFIG,
    MetricsScraper,
    fingerprint,
    fingerprint_diff,
    metrics_series,
    parse_metrics,
    parse_server_log,
    scrape_summary,
    spec_decode_crosscheck,
)

FIXTURES = Path(__file__).parent / "fixtures"
START = (FIXTURES / "metrics_vllm_start.txt").read_text()
END = (FIXTURES / "metrics_vllm_end.txt").read_text()
DP2 = (FIXTURES / "metrics_vllm_dp2.txt").read_text()
V2_LOG = (FIXTURES / "vllm_v2_startup.log").read_text()
V1_LOG = (FIXTURES / "vllm_v1_fallback.log").read_text()
SECRET = "sk-test-secret-123"


class FakeVLLM:
    """A tiny HTTP server on 127.0.0.1 answering fixed routes; records request headers."""

    def __init__(self, routes: dict[str, tuple[int, str, str]]):
        self.routes = routes
        self.auth_headers: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                outer.auth_headers.append(self.headers.get("Authorization"))
                status, ctype, body = outer.routes.get(self.path, (404, "text/plain", "nope"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def text(body: str, status: int = 200) -> tuple[int, str, str]:
    return status, "text/plain; version=0.0.4", body


def js(obj) -> tuple[int, str, str]:
    return 200, "application/json", json.dumps(obj)


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


# ---------------------------------------------------------------- server log


def test_parse_v2_log():
    f = parse_server_log(V2_LOG)
    assert f["model_runner"] == "V2" and f["model_runner_evidence"] == "Using V2 Model Runner"
    assert f["fallback_warnings"] == []
    assert f["runner_notices"] == [
        "Model Runner V2 does not yet support the thinking_token_budget request parameter. "
        "Set VLLM_USE_V2_MODEL_RUNNER=0 if this is required."
    ]
    assert f["version"] == "0.33.0"
    assert f["kv_cache_memory_gib"] == 104.53
    assert f["kv_cache_tokens"] == 761_200
    assert f["max_concurrency"] == {"tokens_per_request": 40_960, "factor": 18.58}
    assert f["cuda_graph_memory_gib"] == 0.62 and f["cuda_graph_capture_s"] == 9.0
    assert f["weights_memory_gib"] == 16.02 and f["weights_load_s"] == pytest.approx(6.402117)
    assert f["estimated_cuda_graph_memory_gib"] == 0.71
    assert f["attention_backend"] == "FLASH_ATTN"
    assert f["tensor_parallel_size"] == 1 and f["quantization"] is None
    assert f["architecture"] == "Qwen3ForCausalLM" and f["max_model_len"] == 40_960


def test_parse_v1_fallback_log():
    f = parse_server_log(V1_LOG)
    assert f["model_runner"] == "V1"
    assert f["fallback_warnings"] == [
        "Model Runner V2 does not yet support ngram/ngram_gpu speculative decoding; "
        "using the V1 model runner instead."
    ]  # logged by two processes, kept once
    assert f["version"] == "0.30.0"
    assert f["tensor_parallel_size"] == 2 and f["quantization"] == "fp8"
    assert f["kv_cache_dtype"] == "fp8_e4m3"
    assert f["kv_cache_memory_gib"] == 61.20  # first worker's line
    assert f["kv_cache_tokens"] == 1_002_720
    assert f["max_concurrency"] == {"tokens_per_request": 131_072, "factor": 7.65}
    assert f["attention_backend"] == "FLASHINFER"


@pytest.mark.parametrize(
    "line, runner",
    [
        ("WARNING 06-15 16:52:19 [vllm.py:528] Model Runner V2 requires Triton; "
         "using the V1 model runner instead.", "V1"),
        ("(EngineCore pid=1) WARNING 01-01 00:00:00 [vllm.py:9] Defaulting to V1 model runner "
         "on ROCm for model architectures: Foo", "V1"),
        ("(Worker pid=3) INFO 01-01 00:00:00 [gpu_model_runner.py:4000] Starting to load model x",
         "V1"),
        ("INFO 01-01 00:00:00 [model_runner.py:1671] Graph capturing finished in 2 secs", None),
        ("", None),
    ],
)  # fmt: skip
def test_model_runner_evidence(line, runner):
    assert parse_server_log(line)["model_runner"] == runner


# ---------------------------------------------------------------- fingerprint


def full_routes() -> dict:
    return {
        "/version": js({"version": "0.33.0"}),
        "/v1/models": js(
            {
                "object": "list",
                "data": [
                    {
                        "id": "qwen3-8b",
                        "object": "model",
                        "root": "Qwen/Qwen3-8B",
                        "max_model_len": 40960,
                    }
                ],
            }
        ),
        "/metrics": text(END),
        "/server_info?config_format=json": js(
            {
                "vllm_config": {
                    "parallel_config": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1},
                    "model_config": {"quantization": None, "max_model_len": 40960},
                },
                "vllm_env": {"VLLM_USE_V2_MODEL_RUNNER": True, "VLLM_SERVER_DEV_MODE": True},
                "system_env": {},
            }
        ),
    }


def test_fingerprint_all_sources():
    with FakeVLLM(full_routes()) as srv:
        fp = fingerprint(
            srv.url,
            api_key=SECRET,
            labels={"container": "vllm/vllm-openai:v0.33.0", "runner": "v2"},
            server_log_text=V2_LOG,
            system_fingerprint="fp_abc",
        )
    assert set(srv.auth_headers) == {f"Bearer {SECRET}"}
    assert SECRET not in json.dumps(fp)
    assert fp["server_version"] == {"value": "0.33.0", "source": "/version"}
    assert fp["model_id"] == {"value": "qwen3-8b", "source": "/v1/models"}
    assert fp["model_root"]["value"] == "Qwen/Qwen3-8B"
    assert fp["max_model_len"] == {"value": 40960, "source": "/v1/models"}
    assert fp["system_fingerprint"] == {"value": "fp_abc", "source": "response system_fingerprint"}
    cc = "/metrics cache_config_info"
    assert fp["kv_block_size"] == {"value": 16, "source": cc}
    assert fp["kv_num_gpu_blocks"] == {"value": 47575, "source": cc}
    assert fp["kv_capacity_tokens"] == {"value": 16 * 47575, "source": cc}
    assert fp["prefix_caching"]["value"] == "True"
    assert fp["vllm_use_v2_model_runner"] == {"value": True, "source": "/server_info"}
    assert fp["tensor_parallel_size"] == {"value": 1, "source": "/server_info"}
    assert fp["model_runner"] == {"value": "V2", "source": "server log"}  # log beats label
    assert fp["fallback_warnings"] == {"value": [], "source": "server log"}
    assert fp["kv_cache_memory_gib"] == {"value": 104.53, "source": "server log"}
    assert fp["cuda_graph_memory_gib"]["value"] == 0.62
    assert fp["weights_memory_gib"]["value"] == 16.02
    assert fp["attention_backend"] == {"value": "FLASH_ATTN", "source": "server log"}
    assert fp["label.container"] == {
        "value": "vllm/vllm-openai:v0.33.0",
        "source": "operator label",
    }
    assert fp["_probes"] == {
        "/version": "ok",
        "/v1/models": "ok",
        "/metrics": "ok",
        "/server_info": "ok",
    }
    for key, f in fp.items():
        if not key.startswith("_"):
            assert set(f) == {"value", "source"}, key


def test_fingerprint_unknowns_are_never_guessed():
    no_cache_config = "\n".join(line for line in START.splitlines() if CACHE_CONFIG not in line)
    routes = {"/v1/models": js({"data": [{"id": "m"}]}), "/metrics": text(no_cache_config + "\n")}
    with FakeVLLM(routes) as srv:
        fp = fingerprint(srv.url, labels={"runner": "v1"})
    unknown = {"value": "unknown", "source": None}
    for key in (
        "server_version",
        "max_model_len",
        "model_root",
        "system_fingerprint",
        "kv_block_size",
        "kv_capacity_tokens",
        "vllm_use_v2_model_runner",
        "vllm_env",
        "fallback_warnings",
        "kv_cache_memory_gib",
        "attention_backend",
    ):
        assert fp[key] == unknown, key
    assert fp["model_id"] == {"value": "m", "source": "/v1/models"}
    assert fp["model_runner"] == {"value": "v1", "source": "operator label"}
    assert fp["_probes"]["/server_info"] == "HTTP 404"


def test_fingerprint_log_fills_what_endpoints_lack():
    with FakeVLLM({}) as srv:
        fp = fingerprint(srv.url, server_log_text=V1_LOG)
    assert fp["server_version"] == {"value": "0.30.0", "source": "server log"}
    assert fp["model_runner"] == {"value": "V1", "source": "server log"}
    assert fp["kv_capacity_tokens"] == {"value": 1_002_720, "source": "server log"}
    assert fp["tensor_parallel_size"] == {"value": 2, "source": "server log"}
    assert fp["quantization"] == {"value": "fp8", "source": "server log"}
    assert len(fp["fallback_warnings"]["value"]) == 1


def test_fingerprint_unreachable_server():
    with FakeVLLM({}) as srv:
        url = srv.url
    fp = fingerprint(url, timeout_s=1.0, api_key=SECRET)
    assert fp["server_version"]["value"] == "unknown"
    assert all(v != "ok" for v in fp["_probes"].values())
    assert SECRET not in json.dumps(fp)


def test_fingerprint_diff():
    a = {"server_version": {"value": "0.32.0", "source": "/version"}, "_probes": {}}
    b = {
        "server_version": {"value": "0.33.0", "source": "/version"},
        "label.runner": {"value": "v2", "source": "operator label"},
    }
    assert fingerprint_diff(a, b) == {
        "label.runner": ("unknown", "v2"),
        "server_version": ("0.32.0", "0.33.0"),
    }


# ---------------------------------------------------------------- real vLLM 0.32 captures

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


def test_real_vllm_startup_log():
    f = parse_server_log((REAL / "server_startup.log").read_text())
    cc = parse_metrics((REAL / "metrics.txt").read_text())["cache_config"][0]
    models = json.loads((REAL / "models.json").read_text())
    assert f["model_runner"] == "V1"
    assert f["fallback_warnings"] == [
        "Model Runner V2 requires Triton; using the V1 model runner instead."
    ]
    assert f["version"] == json.loads((REAL / "version.json").read_text())["version"]
    assert f["max_model_len"] == models["data"][0]["max_model_len"]
    assert f["kv_cache_tokens"] == int(cc["kv_cache_size_tokens"])  # "CPU KV cache size: ..."
    # "Explicitly set (X/total) GiB for KV cache" on the CPU build
    assert f["kv_cache_memory_gib"] == pytest.approx(int(cc["kv_cache_memory_bytes"]) / 2**30)
    assert f["max_concurrency"]["factor"] == float(cc["kv_cache_max_concurrency"])


def test_fingerprint_real_vllm():
    version = json.loads((REAL / "version.json").read_text())
    models = json.loads((REAL / "models.json").read_text())
    metrics = (REAL / "metrics.txt").read_text()
    routes = {
        "/version": js(version),
        "/v1/models": js(models),
        "/metrics": text(metrics),
        "/server_info?config_format=json": (404, "application/json", '{"detail":"Not Found"}'),
    }
    with FakeVLLM(routes) as srv:
        fp = fingerprint(srv.url, server_log_text=(REAL / "server_startup.log").read_text())
    cc = parse_metrics(metrics)["cache_config"][0]
    src = "/metrics cache_config_info"
    assert fp["server_version"] == {"value": version["version"], "source": "/version"}
    assert fp["model_id"]["value"] == models["data"][0]["id"]
    assert fp["max_model_len"] == {
        "value": models["data"][0]["max_model_len"],
        "source": "/v1/models",
    }
    assert fp["kv_block_size"] == {"value": int(cc["block_size"]), "source": src}
    assert fp["kv_capacity_tokens"] == {"value": int(cc["kv_cache_size_tokens"]), "source": src}
    assert fp["kv_cache_memory_gib"]["source"] == src
    assert fp["max_concurrency"] == {"value": float(cc["kv_cache_max_concurrency"]), "source": src}
    assert fp["model_runner"] == {"value": "V1", "source": "server log"}
    assert fp["vllm_use_v2_model_runner"] == {"value": "unknown", "source": None}
    assert fp["_probes"]["/server_info"] == "HTTP 404"
