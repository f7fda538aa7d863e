"""workload.observe.server_log: facts from vLLM start-up logs."""

import json
from pathlib import Path

import pytest

from workload.observe.metrics import parse_metrics
from workload.observe.server_log import parse_server_log

FIXTURES = Path(__file__).parent / "fixtures"
V2_LOG = (FIXTURES / "vllm_v2_startup.log").read_text()
V1_LOG = (FIXTURES / "vllm_v1_fallback.log").read_text()


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


# ---------------------------------------------------------------- real vLLM 0.32 capture

REAL = FIXTURES / "vllm_real"  # captured by tests/vllm/capture_fixtures.py (see its README)


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
