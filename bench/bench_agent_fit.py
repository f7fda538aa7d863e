"""How closely a profile fitted to an agent-session trace reproduces the trace's sessions.

    python bench/bench_agent_fit.py                  # the normalized TraceLab sample
    python bench/bench_agent_fit.py FILE [--sessions N]

Fits a profile with agent shapes (``agentload trace fit``), plans N top-level sessions
from it (scripted replies, no server: the sizes and waits the planner sends) and prints
each session statistic of the trace beside the generated sessions', met when within 10 %.
The recorded prefix is what the provider's cache served: the fit sets each class's
``context.cache_loss_tokens`` from it, and the line per class says how much it missed.
The sample is read from $AGENTLOAD_TRACES_DIR/tracelab/round_trace.jsonl when set, else
from the copy in tests/fixtures/traces.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from workload.cli.trace import fit_lines
from workload.plan.traces import (
    agent_stats,
    compare_stats,
    fit_agent_profile,
    profile_stats,
    read_agent_trace,
)

REPO = Path(__file__).resolve().parents[1]


def sample() -> Path:
    shared = os.environ.get("AGENTLOAD_TRACES_DIR")
    if shared and (Path(shared) / "tracelab" / "round_trace.jsonl").is_file():
        return Path(shared) / "tracelab" / "round_trace.jsonl"
    return REPO / "tests" / "fixtures" / "traces" / "tracelab_round_trace.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=None, help="agent-session trace or agent log")
    ap.add_argument("--sessions", type=int, default=400, help="top-level sessions generated")
    args = ap.parse_args()
    path = Path(args.file) if args.file else sample()
    trace = read_agent_trace(path)
    t0 = time.perf_counter()
    prof = fit_agent_profile(trace)
    t1 = time.perf_counter()
    rows = compare_stats(agent_stats(trace), profile_stats(prof, args.sessions))
    t2 = time.perf_counter()
    print(f"trace {path}: {len(trace.roots)} sessions, {trace.rounds} rounds")
    print(f"fitted classes: {', '.join(prof['classes'])}; fit {t1 - t0:.2f} s, "
          f"{args.sessions} sessions planned in {t2 - t1:.2f} s")  # fmt: skip
    for name, cls in prof["classes"].items():
        loss = (cls.get("context") or {}).get("cache_loss_tokens")
        if isinstance(loss, dict) and loss.get("values"):
            mean = sum(v * w for v, w in zip(loss["values"], loss["weights"], strict=True))
            mean /= sum(loss["weights"])
            print(f"{name}: provider cache misses fitted, {mean:,.0f} tokens a round on average")
    print("\n".join(fit_lines(rows)))


if __name__ == "__main__":
    main()
