"""compare/canary warn when a block's load generator was short of CPU (generator_health)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.builders import ClassSpec, write_run
from workload.analyze.render import render_text
from workload.analyze.rundata import load_run
from workload.analyze.verdict import compare_runs


def _side(root: Path, n_blocks: int, noise0: int, crossed: tuple[int, ...] = ()) -> Path:
    for i in range(n_blocks):
        block = write_run(
            root / f"block-{i}", classes={"chat": ClassSpec(sessions=20, steps=3)},
            traffic_seed=100 + i, noise_seed=noise0 + i, duration_s=20.0,
        )  # fmt: skip
        run_json = block / "run.json"
        run = json.loads(run_json.read_text())
        run["generator_health"] = {
            "cpu_max": 0.4, "cpu_mean": 0.3, "loop_lag_ms_max": 180.0 + i if i in crossed else 5.0,
            "loop_lag_threshold_ms": 50.0, "cpu_threshold": 0.7, "crossed": i in crossed,
            "samples": 10, "interval_s": 2.0, "source": "process",
        }  # fmt: skip
        run_json.write_text(json.dumps(run))
    return root


def _warning(cmp) -> list[str]:
    return [w for w in cmp.warnings if "load generator was short of CPU" in w]


def test_health_is_read_per_block(tmp_path):
    run = load_run(_side(tmp_path / "a", 3, 10, crossed=(1,)))
    assert [bool(h["crossed"]) for h in run.health.values()] == [False, True, False]


def test_a_starved_block_is_named_with_its_side_and_lag(tmp_path):
    a = _side(tmp_path / "a", 4, 10, crossed=(1, 3))
    b = _side(tmp_path / "b", 4, 20)
    cmp = compare_runs(a, b)
    (w,) = _warning(cmp)
    assert "A in 2 of 4 blocks (1, 3)" in w and "B" not in w.split(":")[0]
    assert "183 ms" in w and "taskset" in w
    assert any("short of CPU" in line for line in render_text(cmp).splitlines())


def test_no_warning_when_no_block_crossed(tmp_path):
    cmp = compare_runs(_side(tmp_path / "a", 4, 10), _side(tmp_path / "b", 4, 20))
    assert _warning(cmp) == []


def test_a_single_run_without_blocks_is_named_by_its_side(tmp_path):
    a = write_run(tmp_path / "a", classes={"chat": ClassSpec(sessions=20, steps=3)})
    b = write_run(tmp_path / "b", classes={"chat": ClassSpec(sessions=20, steps=3)})
    run = json.loads((b / "run.json").read_text())
    run["generator_health"] = {"crossed": True, "loop_lag_ms_max": 75.0}
    (b / "run.json").write_text(json.dumps(run))
    (w,) = _warning(compare_runs(a, b))
    assert w.startswith("the load generator was short of CPU for B, event-loop lag up to 75 ms")
