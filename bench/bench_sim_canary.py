"""Verdict quality on the simulator with instance noise: plain `agentload canary` runs.

Each trial is one `agentload canary --baseline-cmd SIM --candidate-cmd SIM'` -- the canary
starts both simulators itself, so each side is a fresh instance with its own noise draw
(instance noise is on by default for `python -m workload.sim`). A/A trials run the same
command on both sides; `tail` trials give the candidate `--scenario larger-batch-budget`
(twice the token budget and sequences: a tail trade-off from mechanism, not injected).

    python bench/bench_sim_canary.py --out /tmp/sim-aa --kinds aa --trials 6 --parallel 2 \
        --preset default --preset-file bench/results/twin-vllm-cpu.yaml \
        --profile chat --users 8 --blocks 3 --block-s 15
    python bench/bench_sim_canary.py --out /tmp/sim-tail --kinds aa,tail --trials 4 \
        --parallel 2 --preset default --preset-file bench/results/twin-vllm-cpu.yaml \
        --file-set max_num_seqs=4 --profile chat --users 8 --blocks 4 --block-s 15
    python bench/verdict_tables.py --collect /tmp/sim-tail --campaign sim-tail

`--file-set KEY=VALUE` puts a setting into a copy of the preset file (written under --out),
so the candidate's scenario scales it: `max_num_seqs=4` is a deployment whose sequence cap
binds under 8 chat users, where `larger-batch-budget` (8 sequences) trades TPOT for TTFT.
`--set KEY=VALUE` goes to both simulators' command lines (it would override a scenario's
change of the same key: use it for noise settings). Default design: the canary's own
(`mixed`, 8 blocks x 60 s, side by side). `--parallel 2` runs two trials at once (kinds
alternate, so an A/A and a tail trial share the host).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from _stop_at import next_utc

REPO = Path(__file__).resolve().parents[1]

KINDS = {"aa": [], "tail": ["--scenario", "larger-batch-budget"]}


def sim_cmd(args: argparse.Namespace, extra: list[str]) -> str:
    argv = [sys.executable, "-m", "workload.sim", "--port", "{port}", "--preset", args.preset]
    if args.preset_file:
        argv += ["--preset-file", str(Path(args.preset_file).resolve())]
    for kv in args.set:
        argv += ["--set", kv]
    return shlex.join(argv + extra).replace("'{port}'", "{port}")


def derived_preset(args: argparse.Namespace) -> None:
    """--file-set: the preset file's settings with these on top, written under --out, so a
    scenario scales them (a --set would override the scenario)."""
    if not args.file_set:
        return
    src = yaml.safe_load(Path(args.preset_file).read_text()) if args.preset_file else {}
    settings = dict(src.get("settings") or {})
    for kv in args.file_set:
        key, _, value = kv.partition("=")
        settings[key] = yaml.safe_load(value)
    name = f"{src.get('name', args.preset)}+" + ",".join(args.file_set)
    out = args.out / "preset.yaml"
    out.write_text(yaml.safe_dump({**src, "name": name, "settings": settings}, sort_keys=False))
    args.design_preset_file = args.preset_file
    args.preset_file = str(out)


def run_trial(out: Path, i: int, kind: str, args: argparse.Namespace) -> dict:
    tdir = out / f"trial-{i:03d}-{kind}"
    tdir.mkdir(parents=True, exist_ok=True)
    seed = args.seed + 1000 * i
    argv = [
        sys.executable, "-m", "workload.cli", "canary",
        "--baseline-cmd", sim_cmd(args, []), "--candidate-cmd", sim_cmd(args, KINDS[kind]),
        "--profile", args.profile, "--seed", str(seed), "--out", str(tdir / "canary"), "--no-html",
    ]  # fmt: skip
    for flag, v in (
        ("--blocks", args.blocks),
        ("--block-s", args.block_s),
        ("--users", args.users),
        ("--mode", args.mode),
        ("--warmup", args.warmup),
    ):
        if v:
            argv += [flag, str(v)]
    t0 = time.time()
    with open(tdir / "canary.log", "wb") as log:
        rc = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    rec = {
        "trial": i, "kind": kind, "seed": seed, "exit": rc, "wall_s": round(time.time() - t0, 1),
        "design": {"profile": args.profile, "blocks": args.blocks or 8, "block_s": args.block_s,
                   "users": args.users, "preset": args.preset,
                   "preset_file": getattr(args, "design_preset_file", args.preset_file),
                   "file_set": args.file_set, "set": args.set, "mode": args.mode or None,
                   "warmup": args.warmup or None},
    }  # fmt: skip
    (tdir / "trial.json").write_text(json.dumps(rec))
    print(json.dumps(rec), flush=True)
    return rec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--kinds", default="aa,tail")
    p.add_argument("--trials", type=int, default=6, help="trials per kind")
    p.add_argument("--preset", default="vllm-0.28-v1")
    p.add_argument("--preset-file", default=None)
    p.add_argument(
        "--file-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting on top of the preset file, under the scenario (both sides)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="python -m workload.sim --set, both sides (overrides a scenario)",
    )
    p.add_argument("--profile", default="mixed")
    p.add_argument("--users", type=int, default=0, help="0: the profile's")
    p.add_argument("--blocks", type=int, default=0, help="0: the canary's default")
    p.add_argument("--block-s", type=float, default=0, help="0: the profile's run length")
    p.add_argument("--mode", default="", help="the canary's --mode (default: its own)")
    p.add_argument("--warmup", default="", help="the canary's --warmup (default: its own)")
    p.add_argument("--seed", type=int, default=41_000_000)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument(
        "--first", type=int, default=0, help="number of the first trial (to add to a campaign)"
    )
    p.add_argument("--stop-at", default="", help="HH:MM UTC: start no trial after this")
    args = p.parse_args(argv)
    kinds = args.kinds.split(",")
    plan = [(args.first + i, kinds[i % len(kinds)]) for i in range(args.trials * len(kinds))]
    stop = None
    if args.stop_at:
        stop = next_utc(args.stop_at)
    args.out.mkdir(parents=True, exist_ok=True)
    derived_preset(args)

    def go(item: tuple[int, str]) -> dict | None:
        if stop is not None and dt.datetime.now(dt.UTC) >= stop:
            return None
        return run_trial(args.out, item[0], item[1], args)

    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        list(pool.map(go, plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
