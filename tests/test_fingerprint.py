"""workload.observe.fingerprint: deployment facts with their sources, and their diff."""

import json
from pathlib import Path

from tests.fake_vllm import FakeVLLM, js, text
from workload.observe.fingerprint import (
    fingerprint,
    fingerprint_diff,
    flatten_fingerprint,
)
from workload.observe.metrics import CACHE_CONFIG, parse_metrics

FIXTURES = Path(__file__).parent / "fixtures"
START = (FIXTURES / "metrics_vllm_start.txt").read_text()
END = (FIXTURES / "metrics_vllm_end.txt").read_text()
V2_LOG = (FIXTURES / "vllm_v2_startup.log").read_text()
V1_LOG = (FIXTURES / "vllm_v1_fallback.log").read_text()
SECRET = "sk-test-secret-123"


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


# ---------------------------------------------------------------- real vLLM 0.32 capture

REAL = FIXTURES / "vllm_real"  # captured by tests/vllm/capture_fixtures.py (see its README)


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


def test_flatten_fingerprint_spreads_dict_values_into_fields():
    fp = {
        "server_version": {"value": "0.32.0", "source": "/version"},
        "cache_config": {"value": {"block_size": "16"}, "source": "/metrics cache_config_info"},
        "_probes": {"/version": "ok"},
    }
    assert flatten_fingerprint(fp) == {
        "server_version": ("0.32.0", "/version"),
        "cache_config.block_size": ("16", "/metrics cache_config_info"),
        "_probes./version": ("ok", None),
    }


def test_fingerprint_diff_rows():
    a = {
        "fingerprint": {"server_version": {"value": "0.32.0", "source": "/version"}},
        "labels": {"runner": "v1"},
        "target": {"model": "m", "max_model_len": 4096},
    }
    b = {
        "fingerprint": {"server_version": {"value": "0.33.0", "source": "server log"}},
        "labels": {"runner": "v1"},
        "target": {"model": "m", "max_model_len": 8192},
    }
    assert fingerprint_diff(a, a) == []
    assert fingerprint_diff(a, b) == [
        {
            "field": "fingerprint.server_version",
            "a": "0.32.0",
            "b": "0.33.0",
            "source_a": "/version",
            "source_b": "server log",
        },
        {
            "field": "target.max_model_len",
            "a": 4096,
            "b": 8192,
            "source_a": "run",
            "source_b": "run",
        },
    ]
