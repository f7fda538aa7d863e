"""Every built-in profile runs for a few seconds against the embedded simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workload.plan.loading import list_profiles

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", [n for n, _ in list_profiles()])
def test_builtin_profile_runs(name: str, tmp_path: Path) -> None:
    out = tmp_path / name
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workload.cli",
            "run",
            "--profile",
            name,
            "--users",
            "4",
            "--duration",
            "6s",
            "--sim-preset",
            "fast",
            "--out",
            str(out),
            "--scrape-interval",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # 3 is allowed: a few seconds are too short to finish long sessions, and an SLO with
    # no samples fails the gate on purpose (it could not be verified).
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    run = json.loads((out / "run.json").read_text())
    overall = run["summary"]["overall"]
    assert overall["requests"] > 0
    assert overall["errors"] == 0, overall["errors_by_kind"]
    assert run["profile_name"] == name
    assert run["fingerprint"]["server_version"]["value"] != "unknown"
    for r in run["slo_results"]:
        assert r["passed"] or "no samples" in r["message"], r["message"]
    # Per-request spec-decode sums never exceed what the server counted over the run.
    check = run["spec_decode_crosscheck"]["draft_tokens"]
    assert check["client"] > 0 and check["server"] >= check["client"]
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == overall["requests"]
