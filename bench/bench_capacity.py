"""How repeatable is `agentload capacity`? Three searches on the same simulator; figures only.

Runs `agentload capacity` ``--repeat`` times (default 3) with the same profile, SLOs, seed and
simulator settings (each search starts its own embedded simulator, kept warm across its
steps), then prints each search's capacity, first failing load and steps, and the spread.
Defaults use the KV-bound test profile (tests/fixtures/capacity_kv.yaml) with a TTFT p95 SLO.

Usage: python bench/bench_capacity.py [--repeat 3] [--blocks 1024] [--slo ttft_p95_ms=400]
       [--min 2] [--max 16] [--step-duration 10s] [--warmup 3s] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "tests" / "fixtures" / "capacity_kv.yaml"


def one_search(out: Path, a: argparse.Namespace) -> tuple[dict, float]:
    """Run one search; its capacity.json and wall time."""
    cmd = [
        sys.executable, "-m", "workload.cli", "capacity", "--profile", a.profile,
        "--slo", a.slo, "--min", str(a.min), "--max", str(a.max),
        "--step-duration", a.step_duration, "--warmup", a.warmup, "--out", str(out),
        "--sim-set", f"num_gpu_blocks={a.blocks}", "--sim-set", "max_model_len=4096",
    ]  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=1800)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 3):
        sys.exit(f"capacity search failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads((out / "capacity.json").read_text()), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", default=str(PROFILE))
    ap.add_argument("--slo", default="ttft_p95_ms=400")
    ap.add_argument("--blocks", type=int, default=1024)
    ap.add_argument("--min", type=int, default=2)
    ap.add_argument("--max", type=int, default=16)
    ap.add_argument("--step-duration", default="10s")
    ap.add_argument("--warmup", default="3s")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    root = Path(a.out or tempfile.mkdtemp(prefix="bench-capacity-"))
    caps = []
    print(f"profile {a.profile}  SLO {a.slo}  num_gpu_blocks {a.blocks}  "
          f"loads {a.min}..{a.max}  steps {a.warmup} + {a.step_duration}")  # fmt: skip
    for i in range(1, a.repeat + 1):
        result, wall = one_search(root / f"search-{i}", a)
        caps.append(result["capacity"])
        loads = " ".join(f"{s['load']:g}{'+' if s['slo_met'] else '-'}" for s in result["steps"])
        print(f"search {i}: capacity {result['capacity']}  first failing "
              f"{result['first_failing']}  steps [{loads}]  {wall:.0f} s")  # fmt: skip
    found = [c for c in caps if c is not None]
    if len(found) >= 2:
        print(f"capacity: min {min(found):g}  max {max(found):g}  "
              f"mean {statistics.mean(found):.2f}  stdev {statistics.stdev(found):.2f}  "
              f"identical {len(set(found)) == 1}")  # fmt: skip
    print(f"artifacts in {root}")


if __name__ == "__main__":
    main()
