"""Fidelity of a calibrated twin on a held-out profile: one agentload profile against a server
and its twin.

    python bench/bench_twin_profile.py --host http://127.0.0.1:PORT --twin twin.yaml
        [--profile quickstart] [--users 1,4,12] [--duration 15] [--seed 1] [--runs N]
        [--set PATH=VALUE ...] [--natural-eos] [--noise] [--keep DIR]

bench_twin.py compares the two under its own closed loop of 300-token prompts; this one
sends them a real `agentload run --profile NAME` instead (the default, quickstart: agent
sessions of 3-8 steps over a shared 1k-token system prompt, tool results added to a growing
context, think and tool pauses between steps: a load the calibration sweep does not
resemble). At each level (`--users`, default light 1, knee 4, overload 12) the server and the
twin (`python -m workload.sim --preset-file twin.yaml` in a child process, instance noise off
unless --noise) get one run each with the same seed, so the same planned traffic; the side
that goes first alternates from level to level. `--tokenizer server`: each side sizes the
prompts with its own tokenizer. Every class's replies are sent `ignore_eos`, so both sides
generate the profile's planned output lengths (a real model stops at its own EOS, the twin at
its preset's natural length); `--natural-eos` leaves the profile as it is. The figures are
each run directory's run.json `summary.overall` (TTFT, ITL, TPOT and E2E p50 and p95, over
ok requests); the table is bench_twin.py's, with "not met" beside each error outside ±15 %,
then the requests (ok / errors), completion tokens per ok request and the exit code of each
side, and each run's host load average before and after. Loopback only; every run is bounded
by `--duration` (and each request by the profile's timeouts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_twin import cells, header, start_twin

from workload.plan.loading import load_profile

METRICS = ("ttft", "itl", "tpot", "e2e")
NAMES = {1: "light", 4: "knee", 12: "overload"}


def level_name(users: int, i: int) -> str:
    """'light (1)' for the default levels, else 'level 2 (8)'."""
    return f"{NAMES.get(users, f'level {i + 1}')} ({users})"


def eos_sets(profile: str, given: list[str]) -> list[str]:
    """`--set` overrides that send every class's requests with ignore_eos."""
    p = load_profile(profile, given)
    return [f"classes.{name}.output.ignore_eos=true" for name in p.classes]


def side(run_json: Path) -> dict[str, Any]:
    """The figures of one run directory's run.json: p50/p95 per metric (0 where no sample: a
    cell that is "not met"), counts, exit code."""
    doc = json.loads(run_json.read_text(encoding="utf-8"))
    o = doc["summary"]["overall"]
    got: dict[str, Any] = {
        m: ((o.get(f"{m}_ms") or {}).get("p50") or 0.0, (o.get(f"{m}_ms") or {}).get("p95") or 0.0)
        for m in METRICS
    }
    ok = int(o.get("ok") or 0)
    got.update(
        requests=int(o.get("requests") or 0),
        ok=ok,
        errors=int(o.get("errors") or 0),
        tokens=(o.get("completion_tokens") or 0) / ok if ok else 0.0,
        exit=doc.get("exit_code"),
        served=(
            (doc.get("target") or {}).get("model"),
            (doc.get("target") or {}).get("max_model_len"),
        ),
    )
    return got


def rows(levels: list[tuple[str, dict[str, Any], dict[str, Any]]], label: str) -> list[str]:
    """The table rows and one counts line per level: (level name, server side, other side)."""
    out = []
    for name, a, b in levels:
        for m in METRICS:
            row = [c for q in (0, 1) for c in cells(a[m][q], b[m][q])]
            out.append(f"| {name} | {m} ms | " + " | ".join(row) + " |")
    for name, a, b in levels:
        out.append(
            f"{name}: requests {a['requests']} / {b['requests']}, errors {a['errors']} / "
            f"{b['errors']}, completion tokens per ok request {a['tokens']:.0f} / "
            f"{b['tokens']:.0f}, exit code {a['exit']} / {b['exit']} (server / {label})"
        )
        if a.get("served") != b.get("served"):
            out.append(
                f"{name}: not the same traffic: model and max_model_len {a.get('served')} / "
                f"{b.get('served')} (agentload plans for what each side serves)"
            )
    return out


def agentload_run(url: str, args: argparse.Namespace, users: int, seed: int, out: Path) -> Path:
    """One `agentload run` of the profile against `url` into `out`; its run.json."""
    cmd = [sys.executable, "-m", "workload.cli", "run", "--host", url, "--profile", args.profile]
    cmd += ["--users", str(users), "--duration", f"{args.duration:g}s", "--seed", str(seed)]
    cmd += ["--tokenizer", "server", "--out", str(out), "--overwrite"]
    cmd += ["--max-error-ratio", "1"]
    cmd += [a for kv in args.sets for a in ("--set", kv)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 300)
    run_json = out / "run.json"
    if not run_json.exists():
        sys.exit(
            f"agentload run against {url} wrote no run.json (exit {done.returncode}):\n"
            + done.stderr[-2000:]
        )
    return run_json


def one_run(args: argparse.Namespace, run: int, tmp: Path) -> None:
    """Every level against the server and the twin, sides alternating; prints the table."""
    proc, twin_url = start_twin(args.twin, args.noise, ())
    try:
        before = os.getloadavg()[0]
        levels = []
        for i, users in enumerate(args.users):
            # A seed no earlier level or run used: the server's prefix cache outlives a run
            # (the twin starts empty each run), so a repeated seed is cached on one side only.
            seed = args.seed + 100 * run + i
            sides = {"server": args.host, "twin": twin_url}
            order = ["server", "twin"] if (run + i) % 2 == 0 else ["twin", "server"]
            got = {
                s: side(
                    agentload_run(sides[s], args, users, seed, tmp / f"r{run}-l{i}-u{users}-{s}")
                )
                for s in order
            }
            levels.append((level_name(users, i), got["server"], got["twin"]))
        print(
            f"run {run + 1}/{args.runs}: profile {args.profile}, {args.duration:g} s per level "
            f"and side, seeds {args.seed + 100 * run}+level, twin instance noise "
            f"{'on' if args.noise else 'off'}, load average {before:.1f} -> "
            f"{os.getloadavg()[0]:.1f}"
        )
        header("twin")
        print("\n".join(rows(levels, "twin")))
        sys.stdout.flush()
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    """Parse the options and run the comparison `--runs` times."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", required=True, help="the server's base URL (loopback)")
    p.add_argument("--twin", required=True, help="preset file of the twin")
    p.add_argument("--profile", default="quickstart", help="built-in name or YAML file")
    p.add_argument("--users", default="1,4,12", help="comma-separated users per level")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per level and side")
    p.add_argument(
        "--seed",
        type=int,
        default=int(time.time()) % 1_000_000 * 1000,
        help="traffic seed of run 1's first level (level i of run k: +100(k-1)+i); by default "
        "from the clock, so a second invocation does not meet the first's prompts in the "
        "server's prefix cache",
    )
    p.add_argument("--runs", type=int, default=1, help="repeat the whole comparison N times")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="profile override given to both sides (repeatable)",
    )
    p.add_argument(
        "--natural-eos",
        action="store_true",
        help="do not send ignore_eos: each side stops at its own EOS",
    )
    p.add_argument("--noise", action="store_true", help="instance noise on in the twin")
    p.add_argument("--keep", type=Path, help="write the run directories here (else a temp dir)")
    args = p.parse_args()
    try:
        args.users = [int(u) for u in args.users.split(",") if u]
    except ValueError:
        p.error(f"--users takes comma-separated integers, not {args.users!r}")
    if not args.users or min(args.users) < 1:
        p.error("--users needs at least one level of 1 or more users")
    if not args.natural_eos:
        args.sets = eos_sets(args.profile, args.sets) + args.sets
    with tempfile.TemporaryDirectory(prefix="bench-twin-profile-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for run in range(args.runs):
            one_run(args, run, where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
