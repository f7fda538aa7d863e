"""Under `history: actual` the paired shifts compare requests by content, whatever each side's
model is called: two real runs against simulators serving differently named models."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import quick_run
from workload.analyze.verdict import compare_runs
from workload.measure.artifacts import read_records

pytestmark = pytest.mark.slow


def test_content_hashes_match_across_model_names_and_pair_the_shifts(tmp_path: Path) -> None:
    runs = []
    for model in ("org/model-a", "model-b-fp8"):
        out = tmp_path / model.replace("/", "_")
        p = quick_run(out, "--sim-set", f"model={model}", "--set", "history=actual", users=3)
        assert p.returncode == 0, p.stderr
        runs.append(out)
    a, b = ({(r["session_id"], r["step"]): r for r in read_records(d, "requests")} for d in runs)
    both = sorted(set(a) & set(b))
    assert len(both) >= 6
    assert all(a[k]["content_hash"] == b[k]["content_hash"] for k in both)
    assert not any(a[k]["body_hash"] == b[k]["body_hash"] for k in both)  # the model differs
    cmp = compare_runs(*runs)
    assert cmp.divergence["pairs"] == {"both": len(both), "same_content": len(both)}
    assert any(f"compare the {len(both)} of {len(both)} requests" in w for w in cmp.warnings)
