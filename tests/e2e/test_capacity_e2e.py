"""`agentload capacity` against the embedded simulator: halving the KV cache lowers capacity.

Bounded: short steps (2 s warm-up, 6 s window), loads 2..8 users, precision 2 (at most
4 steps per search). The fixture profile is KV-bound (1.5k-token prompts, no think time):
with 1024 KV blocks 4 users keep TTFT p95 near 200 ms and 8 break 400 ms; with 512 blocks
4 users already wait for KV (TTFT p95 ~600 ms).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import FIXTURES, agentload

pytestmark = pytest.mark.slow
PROFILE = str(FIXTURES / "capacity_kv.yaml")


def _capacity(out: Path, blocks: int) -> dict:
    p = agentload(
        "capacity", "--profile", PROFILE, "--slo", "ttft_p95_ms=400",
        "--min", "2", "--max", "8", "--precision", "2",
        "--step-duration", "6s", "--warmup", "2s", "--out", str(out),
        "--sim-set", f"num_gpu_blocks={blocks}", "--sim-set", "max_model_len=4096",
        timeout=300,
    )  # fmt: skip
    assert p.returncode in (0, 3), p.stderr[-2000:]
    result = json.loads((out / "capacity.json").read_text())
    assert (p.returncode == 3) == (result["capacity"] is None)
    assert (out / "capacity.html").exists()
    assert "capacity:" in p.stdout
    return result


def test_halving_kv_lowers_capacity(tmp_path: Path) -> None:
    full = _capacity(tmp_path / "full", 1024)
    half = _capacity(tmp_path / "half", 512)
    assert full["dimension"] == "users" and full["capacity"] is not None
    assert full["capacity"] >= 4
    assert half["capacity"] is None or half["capacity"] < full["capacity"]
    for step in full["steps"]:
        assert set(step) >= {"load", "slo_met", "goodput", "slo_values", "percentiles"}
        assert "kv.ttft_p95_ms" in step["slo_values"]
        assert (Path(step["out"]) / "requests.jsonl").exists()
