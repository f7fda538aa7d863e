"""`agentload run --trace`: replaying the committed trace slices against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import FIXTURES, agentload
from workload.errors import EXIT_BAD_INPUT
from workload.measure.artifacts import read_records

pytestmark = pytest.mark.slow

MOONCAKE = FIXTURES / "traces" / "mooncake_conversation_head40.jsonl"
AZURE = FIXTURES / "traces" / "azure2023_code_head100.csv"


def replay(out: Path, trace: Path, *extra: str):
    return agentload(
        "run", "--trace", str(trace), "--sim-preset", "fast", "--out", str(out), *extra,
        timeout=90,
    )  # fmt: skip


def test_mooncake_replay_sends_every_request_and_reports_cache_hits(tmp_path: Path) -> None:
    p = replay(tmp_path / "r", MOONCAKE, "--speedup", "100", "--limit", "8")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = read_records(tmp_path / "r", "requests")
    assert sorted(r["trace_index"] for r in rows) == list(range(8))  # each sent once
    trace = [json.loads(line) for line in MOONCAKE.read_text().splitlines()[:8]]
    for r in rows:
        t = trace[r["trace_index"]]
        assert r["prompt_tokens"] == t["input_length"]  # token-exact prompts
        assert r["completion_tokens"] == t["output_length"]  # ignore_eos holds the length
    # Every request starts with hash id 0: after the first, the shared block is a cache hit.
    later = [r for r in rows if r["trace_index"] > 0]
    assert sum(1 for r in later if (r["cached_tokens"] or 0) >= 512) >= len(later) - 2
    t = json.loads((tmp_path / "r" / "run.json").read_text())["summary"]["trace"]
    assert t["sent"] == t["requests"] == 8 and t["format"] == "mooncake"
    assert t["ideal_hit_ratio"]["infinite_tokens"] > 0
    assert t["server"]["cached_ratio"] > 0 and t["server"]["metrics_hit_ratio"] > 0
    assert t["send_lateness"]["p50_s"] is not None
    assert "trace replay: 8 of 8 requests sent" in p.stdout
    assert "prefix-cache hits by tokens: ideal" in p.stdout
    assert (tmp_path / "r" / "report.html").read_text().count("Trace replay") >= 1


def test_azure_replay_and_too_long_requests(tmp_path: Path) -> None:
    p = replay(tmp_path / "a", AZURE, "--speedup", "20", "--limit", "6")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = read_records(tmp_path / "a", "requests")
    assert sorted(r["trace_index"] for r in rows) == list(range(6))
    t = json.loads((tmp_path / "a" / "run.json").read_text())["summary"]["trace"]
    assert t["format"] == "azure" and t["ideal_hit_ratio"] is None
    # The simulator's context is 32768 tokens; request 6 of the Mooncake slice is longer.
    p = replay(tmp_path / "m", MOONCAKE, "--limit", "12", "--sim-set", "max_model_len=16384")
    assert p.returncode == EXIT_BAD_INPUT
    assert "exceed the server's max_model_len 16384" in p.stderr
    assert "--trace-clip" in p.stderr and not (tmp_path / "m" / "run.json").exists()


def test_bad_line_stop_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    lines = MOONCAKE.read_text().splitlines()[:3]
    bad.write_text("\n".join([lines[0], "{not json", lines[1]]) + "\n")
    p = replay(tmp_path / "b", bad, "--on-bad-line", "stop")
    assert p.returncode == EXIT_BAD_INPUT
    assert f"{bad}:2:" in p.stderr and p.stderr.count("\n") == 1


def test_a_run_directory_replays_with_its_prefix_reuse(tmp_path: Path) -> None:
    """Issue 30 item 5: `run --trace runs/A` sent prompts that shared nothing (0 % cached
    against the run's 80-90 %), under a banner naming the profile and seed."""
    p = agentload(
        "run", "--profile", "quickstart", "--duration", "8s", "--sim-preset", "fast",
        "--out", str(tmp_path / "a"), timeout=90,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    a = json.loads((tmp_path / "a" / "run.json").read_text())["summary"]["overall"]
    p = replay(tmp_path / "b", tmp_path / "a", "--speedup", "4")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "prefix reuse kept: prompts re-planned from run.json" in p.stdout
    banner = next(line for line in p.stdout.splitlines() if line.startswith("agentload: run "))
    assert f"replay of {tmp_path / 'a'}" in banner and "profile" not in banner
    b = json.loads((tmp_path / "b" / "run.json").read_text())["summary"]
    assert b["trace"]["ideal_hit_ratio"]["infinite_tokens"] > 0.3
    # 512-token blocks lose the part of a shared prefix that ends mid-block: most is kept.
    assert b["overall"]["cached_ratio"] > 0.6 * a["cached_ratio"] > 0
