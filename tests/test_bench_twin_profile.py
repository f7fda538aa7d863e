"""bench/bench_twin_profile.py's reading of run.json and its table, on written run.json files
(no server, no run, no timing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_twin_profile

    return bench_twin_profile


def write_run(path: Path, p50: float, p95: float, ok: int, tokens: int, exit_code: int) -> Path:
    block = {"count": ok, "p50": p50, "p95": p95}
    overall = {f"{m}_ms": dict(block) for m in ("ttft", "itl", "tpot", "e2e")}
    overall.update(requests=ok + 1, ok=ok, errors=1, completion_tokens=tokens)
    target = {"model": "tiny", "max_model_len": 8192}
    doc = {"summary": {"overall": overall}, "exit_code": exit_code, "target": target}
    path.write_text(json.dumps(doc))
    return path


def test_each_cell_outside_15_percent_says_not_met(bench, tmp_path) -> None:
    server = bench.side(write_run(tmp_path / "a.json", 100.0, 200.0, 10, 900, 0))
    twin = bench.side(write_run(tmp_path / "b.json", 110.0, 240.0, 8, 720, 3))
    assert server["ttft"] == (100.0, 200.0) and server["tokens"] == 90.0
    out = bench.rows([("knee (4)", server, twin)], "twin")
    assert out[0] == "| knee (4) | ttft ms | 100.0 | 110.0 | +10% | 200.0 | 240.0 | +20% not met |"
    assert [r.split(" | ")[1] for r in out[:4]] == ["ttft ms", "itl ms", "tpot ms", "e2e ms"]
    assert out[4] == (
        "knee (4): requests 11 / 9, errors 1 / 1, completion tokens per ok request 90 / 90, "
        "exit code 0 / 3 (server / twin)"
    )
    assert len(out) == 5  # both serve the same model and context: the same planned traffic
    twin["served"] = ("tiny", 65536)
    assert bench.rows([("knee (4)", server, twin)], "twin")[5] == (
        "knee (4): not the same traffic: model and max_model_len ('tiny', 8192) / "
        "('tiny', 65536) (agentload plans for what each side serves)"
    )


def test_a_side_without_samples_is_not_met_rather_than_a_crash(bench, tmp_path) -> None:
    server = bench.side(write_run(tmp_path / "a.json", 100.0, 200.0, 10, 900, 0))
    empty = tmp_path / "b.json"
    empty.write_text(json.dumps({"summary": {"overall": {"ttft_ms": {"count": 0}}}}))
    twin = bench.side(empty)
    assert twin["ok"] == 0 and twin["tokens"] == 0.0
    out = bench.rows([("light (1)", twin, server)], "twin")
    assert all(r.endswith("not met |") for r in out[:4])


def test_levels_are_named_and_every_class_is_sent_ignore_eos(bench) -> None:
    assert [bench.level_name(u, i) for i, u in enumerate((1, 4, 12, 8))] == [
        "light (1)",
        "knee (4)",
        "overload (12)",
        "level 4 (8)",
    ]
    assert bench.eos_sets("quickstart", []) == [
        "classes.agent.output.ignore_eos=true",
        "classes.chat.output.ignore_eos=true",
    ]
