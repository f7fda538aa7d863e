"""Instance noise in virtual time: the per-block A/A spread it gives, in seconds not hours.

Two engines of one config (each its own instance seed, noise on) serve the same chat-like
closed-loop traffic (`chat`'s shapes: 400-token shared system prompt, ~150-token user
turns, ~210-token answers, ~8 s think time, 1-10 turns) on a virtual clock, block after
block; each block's paired shifts (median log ratio over the requests both served), p95s
and output throughput are compared the way bench/verdict_tables.py does for a canary. No
sockets, no host noise: what the noise model alone contributes, so its parameters can be
sized before a real-time campaign (bench/bench_sim_canary.py) confirms them.

    python bench/bench_sim_noise.py --preset-file twin.yaml --pairs 40
    python bench/bench_sim_noise.py --set noise_drift_sigma=0.5 --set noise_drift_tau_s=8

Prints each metric's rms per-block change next to a real campaign's A/A blocks (`--real`,
default bench/results/real-1; the target is within 1.5x). `--no-think` drops the think time
(bench/chat_no_think.yaml, the traffic of real-4 and real-5).
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import verdict_tables  # noqa: E402 - the repository on the path first

from workload.sim.calibrate import load_preset_file  # noqa: E402
from workload.sim.config import build_config  # noqa: E402
from workload.sim.engine import Engine, EngineRequest  # noqa: E402

METRICS = ("ttft_shift", "tpot_shift", "e2e_shift", "ttft_p50", "tpot_p50", "e2e_p50",
           "ttft_p95", "tpot_p95", "e2e_p95", "output_throughput", "completed_sessions")  # fmt: skip
MAX_STEPS = 2_000_000


def lognormal(rng: random.Random, mean: float, sigma: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))


class Session:
    """One chat session's plan, drawn from the traffic seed (the same on both sides)."""

    # think time between turns (s): `chat`'s; 0 is bench/chat_no_think.yaml (--no-think)
    think_s = 8.0

    def __init__(self, rng: random.Random, sid: int) -> None:
        self.sid = sid
        self.turns = round(lognormal(rng, 4, 0.5, 1, 10))
        self.user = [round(lognormal(rng, 150, 0.9, 5, 2000)) for _ in range(self.turns)]
        self.out = [round(lognormal(rng, 210, 0.7, 8, 1000)) for _ in range(self.turns)]
        think = [lognormal(rng, 8, 0.6, 0.1, 60) for _ in range(self.turns)]
        self.think = [t * self.think_s / 8.0 for t in think]  # the same draws either way


def run_block(eng: Engine, t0: float, block_s: float, users: int, seed: int) -> tuple[dict, float]:
    """One block of closed-loop traffic from `t0`; returns (key -> (ttft, tpot, e2e), end)."""
    rng = random.Random(seed)
    system = list(range(1, 401))
    tok = [10_000 + seed % 1000 * 1_000_000]
    plans = [Session(rng, u * 1000) for u in range(users)]
    state = [{"plan": plans[u], "turn": 0, "ctx": list(system), "n": 0} for u in range(users)]
    arrivals = [(t0 + 0.05 * u, u) for u in range(users)]
    heapq.heapify(arrivals)
    live: dict[EngineRequest, tuple[int, int]] = {}
    done: dict[tuple[int, int], tuple[float, float, float]] = {}
    completed = 0
    now, end = t0, t0 + block_s

    def fresh(n: int) -> list[int]:
        tok[0] += n
        return list(range(tok[0] - n, tok[0]))

    for _ in range(MAX_STEPS):
        while arrivals and arrivals[0][0] <= now:
            at, u = heapq.heappop(arrivals)
            st = state[u]
            p, i = st["plan"], st["turn"]
            if at >= end:
                continue
            st["ctx"] += fresh(p.user[i])
            outs = fresh(p.out[i])
            r = EngineRequest(f"{u}-{st['n']}-{i}", list(st["ctx"]), p.out[i], output_ids=outs,
                              accept_rate=0.55, seed=hash((seed, u, st["n"], i)) & 0xFFFF)  # fmt: skip
            st["ctx"] += outs
            eng.add_request(r, at)
            live[r] = (u, i)
        if not eng.has_work():
            if not arrivals:
                return {"reqs": done, "completed": completed}, now
            now = max(now, arrivals[0][0])
            continue
        ready = eng.next_ready()
        if not eng.has_runnable() and (ready is None or ready > now):
            # nothing past the API stage yet: jump to when something is (a step admits it)
            nxt = [t for t in (ready, arrivals[0][0] if arrivals else None) if t is not None]
            now = max(now, min(nxt))
            continue
        out = eng.step(now)
        now = out.end if out.duration_s > 0 else now + 0.001
        for r in out.finished:
            u, i = live.pop(r)
            n = max(1, r.output_len - 1)
            ttft = r.first_token_time - r.arrival_time
            done[(u, state[u]["n"], i)] = (ttft, (r.finished_time - r.first_token_time) / n,
                                          r.finished_time - r.arrival_time)  # fmt: skip
            st = state[u]
            st["turn"] += 1
            if st["turn"] >= st["plan"].turns:
                completed += 1
                st["n"] += 1
                st["plan"] = Session(rng, u * 1000 + st["n"])
                st["turn"], st["ctx"] = 0, list(system)
                heapq.heappush(arrivals, (now + 0.5, u))
            else:
                heapq.heappush(arrivals, (now + st["plan"].think[i], u))
    raise RuntimeError("block did not finish")


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1] if len(xs) >= 2 else xs[0]


def block_changes(a: dict, b: dict, dur: tuple[float, float]) -> dict[str, float | None]:
    ra, rb = a["reqs"], b["reqs"]
    keys = ra.keys() & rb.keys()
    out: dict[str, float | None] = {}
    for j, lat in enumerate(("ttft", "tpot", "e2e")):
        logs = [math.log(rb[k][j] / ra[k][j]) for k in keys if ra[k][j] > 0 and rb[k][j] > 0]
        out[f"{lat}_shift"] = statistics.median(logs) if len(logs) >= 3 else None
        xa = [v[j] for v in ra.values() if v[j] > 0]
        xb = [v[j] for v in rb.values() if v[j] > 0]
        out[f"{lat}_p50"] = (
            math.log(statistics.median(xb) / statistics.median(xa)) if xa and xb else None
        )
        out[f"{lat}_p95"] = math.log(p95(xb) / p95(xa)) if xa and xb else None
    na, nb = len(ra), len(rb)
    out["output_throughput"] = math.log((nb / dur[1]) / (na / dur[0])) if na and nb else None
    ca, cb = a["completed"], b["completed"]
    out["completed_sessions"] = math.log((cb / dur[1]) / (ca / dur[0])) if ca and cb else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="default")
    p.add_argument("--preset-file", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--pairs", type=int, default=30, help="A/A pairs (instance seeds)")
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--block-s", type=float, default=15.0)
    p.add_argument("--gap-s", type=float, default=5.0, help="idle time between blocks")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--warm-from", type=int, default=1, help="blocks before this are left out")
    p.add_argument("--no-think", action="store_true", help="no think time (chat_no_think.yaml)")
    p.add_argument(
        "--real", default="real-1", help="the real campaign whose A/A blocks are the target"
    )
    p.add_argument(
        "--candidate-scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="side B gets this scenario: its changes instead of an A/A spread",
    )
    args = p.parse_args(argv)
    if args.no_think:
        Session.think_s = 0.0
    fs = load_preset_file(args.preset_file) if args.preset_file else None
    cfg_args = dict(file_settings=fs) if fs else {}
    sets = ["instance_noise=true", *args.set]
    # each pair as a trial summary (block_changes from block 0, the warm ones filled), so
    # verdict_tables.spread_parts splits the spread into instance offset and within-trial
    trials: list[dict] = []
    for pair in range(args.pairs):
        sides = []
        for side in (0, 1):
            scen = args.candidate_scenario if side else []
            cfg = build_config(args.preset, sets, scenarios=scen, **cfg_args)
            eng = Engine(cfg, instance_seed=2 * pair + side + 1)
            t, blocks = 0.0, []
            for blk in range(args.blocks):
                res, end = run_block(eng, t, args.block_s, args.users, seed=pair * 100 + blk)
                blocks.append((res, end - t))
                t = end + args.gap_s
            sides.append(blocks)
        per: dict[str, list[float | None]] = {m: [None] * args.warm_from for m in METRICS}
        for blk in range(args.warm_from, args.blocks):
            (a, da), (b, db) = sides[0][blk], sides[1][blk]
            got = block_changes(a, b, (da, db))
            for m in METRICS:
                per[m].append(got.get(m))
        trials.append({"kind": "aa", "block_changes": per})
    # every warm block's change, pooled over the pairs
    changes = {
        m: [v for t in trials for v in t["block_changes"][m] if v is not None] for m in METRICS
    }
    real = [t for t in verdict_tables.load(args.real) if t["kind"] == "aa"]
    if args.candidate_scenario:
        print(f"{'metric':20} {'median':>8} {'mean':>8} {'sd':>8} {'blocks':>6}  (log change, B/A)")
        for m in METRICS:
            v = changes[m]
            if len(v) >= 2:
                med, mean, sd = statistics.median(v), statistics.fmean(v), statistics.stdev(v)
                print(f"{m:20} {med:8.3f} {mean:8.3f} {sd:8.3f} {len(v):6d}")
        return 0
    print(
        f"{'metric':20} {'sim rms':>8} {'blocks':>6} {'real rms':>8} {'ratio':>6}"
        f"  {'offset/within sim':>18} {'real':>14}"
    )
    for m in METRICS:
        v = changes[m]
        sim = math.sqrt(sum(x * x for x in v) / len(v)) if v else math.nan
        r, _ = verdict_tables.block_spread(real, m)
        ratio = sim / r if r else math.nan
        ok = "" if 1 / 1.5 <= ratio <= 1.5 else "  not within 1.5x"
        parts = []
        for ts in (trials, real):
            sp = verdict_tables.spread_parts(ts, m)
            parts.append("–" if sp is None else f"{sp[0]:.3f}/{sp[1]:.3f}")
        print(
            f"{m:20} {sim:8.3f} {len(v):6d} {r or math.nan:8.3f} {ratio:6.2f}"
            f"  {parts[0]:>18} {parts[1]:>14}{ok}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
