"""Smoke test of bench/bench_twin.py: a simulator stands for the server, a preset file for its
twin; the script runs every level and prints one table. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workload.sim.inprocess import SimThread

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_twin.py"


@pytest.mark.slow
def test_the_bench_compares_a_server_and_its_twin_at_every_level(tmp_path) -> None:
    twin = tmp_path / "twin.yaml"
    twin.write_text(yaml.safe_dump({"name": "t", "settings": {"spec_accept_by_pos": "1.0"}}))
    with SimThread("fast") as sim:
        done = subprocess.run(
            [sys.executable, str(BENCH), "--host", sim.url, "--twin", str(twin)]
            + ["--seconds", "0.5"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "run 1/1: twin; twin instance noise off, load average" in out
    for level in ("light (1)", "knee (4)", "overload (12)"):
        assert f"| {level} | ttft ms |" in out and f"{level}: requests" in out
    # both sides were sent prompts of about 300 tokens, whatever their tokenizer
    for line in out.splitlines():
        if "prompt tokens p50" in line:
            server, twin_side = line.split("prompt tokens p50 ")[1].split(" (")[0].split(" / ")
            assert 250 <= int(server) <= 350 and 250 <= int(twin_side) <= 350


def test_the_bench_needs_a_twin_or_recalibrate() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--host", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "give --twin FILE or --recalibrate" in done.stderr
