"""Verdict quality against the simulator: A/A false-positive rate and regression detection.

Each trial is a real `agentload canary` (two `agentload run` children,
simultaneous by default) against two embedded simulators with the same preset;
in regression trials the candidate simulator runs with `ttft_scale` (default
1.10: prefill-carrying engine steps 10 % slower). Every trial uses a fresh
traffic seed, so trials are independent draws.

    python bench/bench_verdict.py --trials 20 --profile mixed            # default run length
    python bench/bench_verdict.py --trials 20 --duration 120s            # shorter runs
    python bench/bench_verdict.py --reanalyze bench-out/verdict-...      # re-judge kept runs
    python bench/bench_verdict.py --reanalyze bench-out/verdict-... --early-stop  # as --early-stop would

Prints: A/A "no detectable change" rate, detection rate (overall verdict worse
and a gated TTFT metric worse: ttft_shift when the runs pair), each with a
Wilson 95 % interval; per-metric flag counts; the
observed spread of the TTFT-p95 change (its standard error), and the run
length that spread predicts is needed for 90 % detection of a true 10 %
(SE shrinks like 1/sqrt(run length)); for block designs, each gated block metric's A/A
resolution, the A/A miss rate resampled by block count, and how often a tail-only TPOT rise
injected into the A/A blocks (TPOT p90 and p95 of each block together) would be caught.
`--reanalyze` also writes what it judged to OUT/reanalysis.json. Figures go to
docs/canary-verdict-quality.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from scipy import stats as sps  # noqa: E402

from workload.analyze.blocks import trimmed_interval  # noqa: E402
from workload.analyze.catalogue import VERDICT_MIXED, VERDICT_SAME, VERDICT_WORSE  # noqa: E402
from workload.analyze.thresholds import HEADLINE_TAIL_SHARE  # noqa: E402

FAILS = (VERDICT_WORSE, VERDICT_MIXED)  # verdicts that exit 3
from workload.analyze.verdict import compare_runs  # noqa: E402
from workload.orchestrate.canary.canary import DEFAULT_BLOCKS, run_canary  # noqa: E402
from workload.sim.launcher import SimProcess  # noqa: E402


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


# Regression scenarios (issue 12's list): simulator settings / preset of the candidate, and
# run arguments both sides get. "upgrade" is the illustrative 0.28-v1 -> 0.29-v2 preset change
# (larger KV pool, less overhead, better drafts) with the spec-off-for-structured scenario on
# top (no drafts for structured outputs: a hypothesis, not a documented vLLM behaviour).
SCENARIOS: dict[str, dict] = {
    "ttft10": {"sets": ["ttft_scale=1.10"]},
    "kv-half": {"sets": ["num_gpu_blocks=5632"]},  # vllm-0.28-v1 has 11264
    "spec-half": {"sets": ["spec_accept_base=0.25"]},  # vllm-0.28-v1 has 0.50
    "structured-fallback": {"sets": ["spec_fallback_structured=true"]},
    "upgrade": {"preset": "vllm-0.29-v2", "sets": ["spec_fallback_structured=true"]},
    "malformed5": {"sets": ["malformed_tool_rate=0.05"], "run_args": ["--set", "history=actual"]},
}


def scenario_of(args: argparse.Namespace, i: int) -> tuple[str, dict]:
    """The regression scenario of trial i (cycled through --scenarios; else --scale/--candidate-preset)."""
    if args.scenarios:
        names = args.scenarios.split(",")
        name = names[i % len(names)]
        return name, SCENARIOS[name]
    sc = {"sets": [f"ttft_scale={args.scale}"]}
    if args.candidate_preset:
        sc["preset"] = args.candidate_preset
    return "custom", sc


def trial_triple(out: Path, i: int, args: argparse.Namespace) -> list[dict]:
    """One A/A and one regression comparison from three simultaneous runs (or block series).

    Three simulators (baseline, a same-preset twin, and the candidate of the trial's
    scenario), three `agentload run` children started together with the same seeded
    traffic; with --blocks N > 1 that is repeated N times with seeds S+i (the canary's
    default design: block i of every side at once). baseline vs twin is the A/A trial,
    baseline vs candidate the regression trial: both are measured the same way, under the
    same host load.
    """
    from workload.orchestrate.canary.canary import (
        Job,
        _launch,
        block_spec,
        run_sides,
        traffic_spec,
    )

    name, sc = scenario_of(args, i)
    run_args = [
        "--profile", args.profile, "--seed", str(args.seed + 10 * i), *sc.get("run_args", []),
        *args.run_arg,
    ]  # fmt: skip
    if args.duration:
        run_args += ["--duration", args.duration]
    traffic = traffic_spec(run_args)
    # --independent-seeds: every simulator draws its own answers (the simulator's --seed is in
    # every answer's draw, greedy ones too), so under `history: actual` the sides' sessions
    # part ways after the first reply, as with servers that answer differently.
    sd = (1000 + i, 2000 + i, 3000 + i) if args.independent_seeds else (1000 + i,) * 3
    sims = {
        "baseline": SimProcess(preset=args.preset, seed=sd[0]),
        "twin": SimProcess(preset=args.preset, seed=sd[1]),
        "candidate": SimProcess(
            preset=sc.get("preset") or args.preset, seed=sd[2], sets=list(sc.get("sets", []))
        ),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.json").write_text(json.dumps({"name": name, **sc}))
    t0 = time.time()
    try:
        for sp in sims.values():
            sp.start()

        def job(n: str, url: str, b: int | None) -> Job:
            spec = traffic if b is None else block_spec(traffic, b, traffic.duration_s)
            run_dir = out / n if b is None else out / n / f"block-{b}"
            label = n if b is None else f"{n} block-{b}"
            return Job(label, n, spec.replace(host=url, out=str(run_dir)))

        if args.blocks <= 1:
            groups = [[job(n, sp.url, None) for n, sp in sims.items()]]
        else:
            groups = [[job(n, sp.url, b) for n, sp in sims.items()] for b in range(args.blocks)]
        codes = run_sides(groups, traffic.duration_s + 300.0, _launch)
    finally:
        for sp in sims.values():
            sp.stop()
    wall = time.time() - t0
    try:
        judged = (judge(out, "twin"), judge(out))
    except Exception as e:  # noqa: BLE001 - keep the campaign going; --reanalyze can retry
        print(f"trial {i}: could not judge ({type(e).__name__}: {e})", flush=True)
        return []
    return [
        {
            "kind": "aa",
            "i": i,
            "scenario": name,
            "exit": codes,
            "wall_s": wall,
            **judged[0],
        },
        {
            "kind": "regression",
            "i": i,
            "scenario": name,
            "exit": codes,
            "wall_s": wall,
            **judged[1],
        },
    ]


def trial(out: Path, kind: str, i: int, args: argparse.Namespace) -> dict:
    scale = args.scale if kind == "regression" else 1.0
    run_args = ["--profile", args.profile, "--seed", str(args.seed + i), *args.run_arg]
    if args.duration:
        run_args += ["--duration", args.duration]
    a = SimProcess(preset=args.preset, seed=1000 + i).start()
    b_preset = args.candidate_preset if kind == "regression" and args.candidate_preset else None
    b = SimProcess(
        preset=b_preset or args.preset, seed=1000 + i, sets=[f"ttft_scale={scale}"]
    ).start()
    t0 = time.time()
    try:
        code = run_canary(a.url, b.url, run_args, out, args.mode, html=False, blocks=args.blocks)
    finally:
        a.stop()
        b.stop()
    return {"kind": kind, "i": i, "exit": code, "wall_s": time.time() - t0, **judge(out)}


def _current_compare(run: dict) -> None:
    """Judge with today's `compare:` section of the run's built-in profile (kept trials
    recorded the thresholds of their day; the rule being measured is today's)."""
    from workload.plan.loading import load_profile

    prof = run.get("profile")
    if isinstance(prof, dict) and prof.get("name"):
        with contextlib.suppress(Exception):  # not a built-in profile: keep what was recorded
            prof["compare"] = load_profile(prof["name"]).compare.model_dump()


def judge(out: Path, other: str = "candidate") -> dict:
    """Re-compare a kept trial directory (so rules can be re-evaluated without rerunning)."""
    from workload.analyze.rundata import load_run

    a, b = load_run(out / "baseline"), load_run(out / other)
    for r in (a, b):
        _current_compare(r.run)
    cmp = compare_runs(a, b)
    rows = {(m.scope, m.metric): m for m in cmp.metrics}
    ttft = {
        s: rows[(s, "ttft_p95")] for s, m in rows if m == "ttft_p95" and not s.startswith("step:")
    }
    shift = rows.get(("overall", "ttft_shift"))
    return {
        "verdict": cmp.verdict,
        "gated": cmp.gated_count,
        "flags": [
            f"{m.scope} {m.metric} {m.verdict}"
            for m in cmp.rows(gated=True)
            if m.verdict != VERDICT_SAME and m.verdict != "insufficient data"
        ],
        "ttft_p95": {
            s: {"change": m.change, "se": m.se, "verdict": m.verdict} for s, m in ttft.items()
        },
        "duration_s": cmp.run_a.duration_s,
        "blocks": cmp.blocks,
        "gated_rows": [
            {
                "scope": m.scope,
                "metric": m.metric,
                "change": m.change,
                "ci": list(m.ci) if m.ci else None,
                "threshold": m.threshold,
                "verdict": m.verdict,
                "method": m.method,
                "se": m.se,
                "blocks": m.blocks,
                "df": m.df,
                "block_changes": m.block_changes,
                "higher_is_worse": m.higher_is_worse,
                "change_kind": m.change_kind,
                # worse side of the one-sided (1 - alpha) bound, positive = worse
                "eq_worse": (
                    None
                    if m.eq_bound is None
                    else (m.eq_bound if m.higher_is_worse else -m.eq_bound)
                ),
                "underpowered": m.underpowered,
            }
            for m in cmp.rows(gated=True)
        ],  # fmt: skip
        "ttft_shift": (
            {"change": shift.change, "se": shift.se, "verdict": shift.verdict, "gated": shift.gated}
            if shift is not None
            else None
        ),
    }


@contextlib.contextmanager
def first_blocks(out: Path, k: int | None):
    """A kept trial cut to its first ``k`` blocks per side (symlinks in a temporary trial
    directory), so a design with fewer blocks is judged on the same traffic; ``None``: as is."""
    import tempfile

    if k is None:
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="bench-first-") as tmp:
        t = Path(tmp)
        for side in ("baseline", "twin", "candidate"):
            if not (out / side).is_dir():
                continue
            (t / side).mkdir()
            for i in range(k):
                (t / side / f"block-{i}").symlink_to((out / side / f"block-{i}").resolve())
        if (out / "scenario.json").exists():
            (t / "scenario.json").symlink_to((out / "scenario.json").resolve())
        yield t


def judge_early(out: Path, other: str, blocks: int) -> dict:
    """Re-judge a kept trial as `agentload canary --early-stop` would have run it.

    The same looks (`orchestrate.canary.early_stop.EarlyStop`) over the blocks as they
    would have arrived.
    """
    import io
    import tempfile

    from workload.orchestrate.canary.early_stop import EarlyStop

    with tempfile.TemporaryDirectory(prefix="bench-early-") as tmp:
        t = Path(tmp)
        es = EarlyStop(t, blocks, None, None, 1000)
        for i in range(blocks):
            for side, src in (("baseline", "baseline"), ("candidate", other)):
                (t / side).mkdir(exist_ok=True)
                (t / side / f"block-{i}").symlink_to((out / src / f"block-{i}").resolve())
            with contextlib.redirect_stdout(io.StringIO()):
                stop = i + 1 < blocks and es.look()
            if stop:
                return {"verdict": es.stopped.verdict, "blocks_used": i + 1}
        cmp = compare_runs(t / "baseline", t / "candidate", confidence=es.final_confidence())
        return {"verdict": cmp.verdict, "blocks_used": blocks}


def summarize_early(results: list[dict], blocks: int) -> str:
    """A/A passes, detections and blocks used per scenario under --early-stop."""
    lines = []
    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault("A/A" if r["kind"] == "aa" else r["scenario"], []).append(r)
    for name, rs in sorted(groups.items()):
        ok = sum(
            (r["verdict"] == VERDICT_SAME) if name == "A/A" else (r["verdict"] in FAILS) for r in rs
        )
        lo, hi = wilson(ok, len(rs))
        used = statistics.mean(r["blocks_used"] for r in rs)
        early = sum(r["blocks_used"] < blocks for r in rs)
        what = "no detectable change" if name == "A/A" else "detected (exit 3)"
        lines.append(
            f"early-stop {name}: {what} {ok}/{len(rs)} (Wilson 95 % {lo:.0%}-{hi:.0%}); "
            f"blocks used mean {used:.2f}, stopped early {early}/{len(rs)}; verdicts "
            + ", ".join(f"{v} x{n}" for v, n in _counts(r["verdict"] for r in rs))
        )
    return "\n".join(lines)


def _counts(items) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return sorted(out.items(), key=lambda kv: -kv[1])


def resolvable(aa: list[dict], q: float = 0.95) -> list[str]:
    """Per gated metric: the smallest threshold the design rules out in a share q of A/A trials.

    The worse side of each A/A trial's one-sided bound; a threshold above its q-quantile is
    settled ("no detectable change") in about q of A/A trials. The design's resolution.
    """
    per: dict[tuple[str, str], list[float]] = {}
    thr: dict[tuple[str, str], set[float]] = {}
    settled: dict[tuple[str, str], list[bool]] = {}
    for r in aa:
        for g in r.get("gated_rows") or []:
            if g.get("eq_worse") is not None and not g.get("underpowered"):
                key = (g["scope"], g["metric"])
                per.setdefault(key, []).append(g["eq_worse"])
                # each trial against its own threshold (compare.history_actual moves some)
                settled.setdefault(key, []).append(g["eq_worse"] < g["threshold"])
                thr.setdefault(key, set()).add(g["threshold"])
    # Block-interval metrics: the per-block spread sigma pooled over trials (from each trial's
    # block changes), and the threshold an A/A trial's bound stays under with 99 % probability,
    # by Monte Carlo of the verdict's own bound (trimmed centre + t(df, 0.95) * se) over n
    # normal blocks of that spread: the design's resolution for that metric.
    sig: dict[tuple[str, str], list[float]] = {}
    nb: dict[tuple[str, str], int] = {}
    for r in aa:
        for g in r.get("gated_rows") or []:
            ch = g.get("block_changes") or []
            if g.get("method") == "blocks" and len(ch) >= 2:
                key = (g["scope"], g["metric"])
                sig.setdefault(key, []).append(statistics.variance(ch))
                nb[key] = len(ch)
    rng = np.random.default_rng(0)
    t99: dict[tuple[str, str], float] = {}
    for key, v in sig.items():
        n, sigma = nb[key], math.sqrt(statistics.mean(v))
        centre, se, df = trimmed_interval(sigma * rng.standard_normal((200_000, n)))
        t99[key] = float(np.quantile(centre + sps.t.ppf(0.95, df) * se, 0.99))
    lines = []
    for (scope, metric), v in sorted(per.items()):
        if scope.startswith("slice:"):
            continue
        arr = sorted(v)
        k = min(len(arr) - 1, math.ceil(q * len(arr)) - 1)
        rel = metric.endswith(
            ("_p50", "_p90", "_p95", "_p99", "_shift", "_throughput", "_sessions", "_length")
        )
        unit = "%" if rel else "pp"
        lines.append(
            f"  {scope:22s} {metric:26s} A/A bound median {100 * statistics.median(arr):+6.1f} "
            f"q{int(q * 100)} {100 * arr[k]:+6.1f} {unit} (threshold "
            f"{' / '.join(f'{100 * t:g}' for t in sorted(thr[(scope, metric)]))}; "
            f"{sum(settled[(scope, metric)])}/{len(arr)} settled)"
            + (
                f"; per-block sd {100 * math.sqrt(statistics.mean(sig[(scope, metric)])):.1f} %, "
                f"99 % A/A resolution {100 * math.expm1(t99[(scope, metric)]):.0f} {unit}"
                if (scope, metric) in t99
                else ""
            )
        )
    return lines


def history_mode(r: dict) -> str:
    """The history mode a trial's runs used ("actual" for malformed5), from its scenario."""
    args = SCENARIOS.get(r.get("scenario", ""), {}).get("run_args", [])
    return "actual" if "history=actual" in args else "scripted"


def resampled_by_mode(aa: list[dict]) -> list[str]:
    """`resampled` per history mode: an A/A canary runs in one mode, and under `history:
    actual` some block metrics spread wider and gate at other thresholds
    (compare.history_actual), so pooling both modes would hide that."""
    modes = sorted({history_mode(r) for r in aa})
    if len(modes) < 2:
        return resampled(aa)
    lines = []
    for mode in modes:
        sub = [r for r in aa if history_mode(r) == mode]
        lines.append(f"  history: {mode} ({len(sub)} A/A trials)")
        lines += ["  " + ln for ln in resampled(sub)]
    return lines


def resampled(aa: list[dict], sizes: tuple[int, ...] = (5, 6, 7, 8, 10)) -> list[str]:
    """The A/A miss rate of the block metrics for other block counts, from the blocks kept.

    The per-block changes of every A/A trial are pooled per metric (two instances of one
    server: no trial-level effect was found, so blocks are exchangeable across trials) and
    n of them drawn with replacement, 100,000 times: the share of draws whose one-sided
    bound (the verdict's trimmed centre + t(df, 0.95) * se) reaches the metric's threshold, per
    metric and
    for any of them (an A/A canary needs all to settle). Unlike a normal model this keeps the
    spread's heavy tails: an occasional block far out widens s past the threshold.
    """
    pool: dict[tuple[str, str], list[float]] = {}
    info: dict[tuple[str, str], tuple[float, bool, str]] = {}
    for r in aa:
        for g in r.get("gated_rows") or []:
            if g.get("method") == "blocks" and g.get("block_changes") and g.get("threshold"):
                key = (g["scope"], g["metric"])
                pool.setdefault(key, []).extend(g["block_changes"])
                info[key] = (g["threshold"], g.get("higher_is_worse", True), g["change_kind"])
    if not pool:
        return []
    rng = np.random.default_rng(0)
    lines = [
        "  resampled from the kept blocks: A/A share inconclusive on a block metric "
        "(per metric; any) by blocks per side"
    ]
    for n in sizes:
        anyf = np.zeros(100_000, dtype=bool)
        parts = []
        for key in sorted(pool):
            thr, hiw, kind = info[key]
            lim = (math.log1p(thr) if hiw else -math.log1p(-thr)) if kind == "relative" else thr
            sign = 1.0 if hiw else -1.0
            centre, se, df = trimmed_interval(
                sign * rng.choice(np.asarray(pool[key]), (100_000, n))
            )
            bound = centre + sps.t.ppf(0.95, df) * se
            miss = bound >= lim
            anyf |= miss
            parts.append(f"{key[1]} {100 * miss.mean():.2f}")
        lines.append(
            f"    {n:2d} blocks: any {100 * anyf.mean():.2f} %  (" + ", ".join(parts) + ")"
        )
    return lines


def _tail_blocks(aa: list[dict]) -> tuple[np.ndarray, dict[str, float]]:
    """Per A/A block: the overall TPOT p95 change and the TPOT p90 change of the same block
    (NaN where p90 was not gated then), and each metric's threshold."""
    rows, thr = [], {}
    for r in aa:
        g = {
            x["metric"]: x
            for x in r.get("gated_rows") or []
            if x["scope"] == "overall" and x.get("block_changes")
        }
        if "tpot_p95" not in g:
            continue
        p95 = g["tpot_p95"]["block_changes"]
        p90 = g["tpot_p90"]["block_changes"] if "tpot_p90" in g else [math.nan] * len(p95)
        if len(p90) != len(p95):
            continue
        rows += list(zip(p95, p90, strict=True))
        thr.update({m: g[m]["threshold"] for m in ("tpot_p95", "tpot_p90") if m in g})
    return np.asarray(rows, dtype=float).reshape(-1, 2), thr


def injected_tail(aa: list[dict], sizes: tuple[int, ...] = (5, 8, 10)) -> list[str]:
    """How often a tail-only TPOT regression would be caught, from the A/A blocks kept.

    The simulator has no tail trade-off to run (docs/canary-verdict-quality.md), so this
    injects one into real between-instance noise: n pooled A/A blocks (each block's overall
    TPOT p95 and p90 changes together, as they co-vary) plus log(1 + r), judged as the
    verdict judges a block row: worse when the Bonferroni-adjusted two-sided interval
    (the two TPOT tail rows' share of alpha, verdict.gate_tails) excludes 0 and the change reaches half the
    threshold, inconclusive when the one-sided bound still reaches the threshold, else a
    pass. The canary is flagged when either gated percentile is worse. Two shapes: *broad*,
    the slowest quarter of streams r slower (p90 and p95 both rise by r), and *top 5 %*,
    only the slowest twentieth slower (p95 rises by r, p90 stays).
    """
    pool, thr = _tail_blocks(aa)
    gated = [r["gated"] for r in aa if r.get("gated")]
    if not len(pool) or "tpot_p95" not in thr or not gated:
        return []
    m = statistics.median(gated)
    has90 = "tpot_p90" in thr and not np.isnan(pool[:, 1]).any()
    # The verdict's weighted Bonferroni (verdict.gate_tails): the gated TPOT tail rows share
    # HEADLINE_TAIL_SHARE of alpha; with an equal share (before) each had alpha / m.
    heads = 2 if has90 else 1
    tail = 0.05 / 2 * HEADLINE_TAIL_SHARE / heads if m > heads else 0.05 / 2 / m
    rng = np.random.default_rng(0)
    head = f"TPOT p95 at {thr['tpot_p95']:.0%}" + (
        f", TPOT p90 at {thr['tpot_p90']:.0%}" if has90 else ", TPOT p90 not gated"
    )
    lines = [f"  tail-only TPOT rise injected into the kept A/A blocks ({head}):"]

    def judge_rows(x: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        mean, se, df = trimmed_interval(x)
        q, tq = sps.t.ppf(1 - tail, df), sps.t.ppf(0.95, df)
        worse = (mean - q * se > 0) & (np.expm1(mean) >= t / 2)
        settled = mean + tq * se < math.log1p(t)
        return worse, settled

    for n in sizes:
        idx = rng.integers(0, len(pool), (100_000, n))
        draws = pool[idx]  # (draws, n, 2)
        for shape in ("broad", "top 5 %") if has90 else ("top 5 %",):
            parts = []
            for rise in (0.0, 0.3, 0.4, 0.5, 0.6, 0.8):
                up = math.log1p(rise)
                w95, s95 = judge_rows(draws[:, :, 0] + up, thr["tpot_p95"])
                worse, settled = w95, s95
                if has90:
                    w90, s90 = judge_rows(
                        draws[:, :, 1] + (up if shape == "broad" else 0.0), thr["tpot_p90"]
                    )
                    worse, settled = w95 | w90, s95 & s90
                passed = ~worse & settled
                parts.append(f"+{rise:.0%}: worse {worse.mean():.0%}, pass {passed.mean():.0%}")
            lines.append(f"    {n:2d} blocks, {shape}: " + "; ".join(parts))
    return lines


def summarize(results: list[dict], threshold: float = 0.10) -> str:
    aa = [r for r in results if r["kind"] == "aa"]
    rg = [r for r in results if r["kind"] == "regression"]
    lines = []
    by_sc: dict[str, list[dict]] = {}
    for r in rg:
        by_sc.setdefault(r.get("scenario", "custom"), []).append(r)
    heads = ("tpot_shift", "ttft_shift", "tpot_p95", "e2e_p95", "output_throughput",
             "spec_acceptance_length", "session_success_ratio", "tool_loop_failure_ratio")  # fmt: skip
    for name, rs in sorted(by_sc.items()):
        k = sum(r["verdict"] in FAILS for r in rs)
        lo, hi = wilson(k, len(rs))
        lines.append(
            f"scenario {name}: detected (worse or mixed, exit 3) {k}/{len(rs)} "
            f"(Wilson 95 % {lo:.0%}-{hi:.0%}); verdicts {', '.join(r['verdict'] for r in rs)}"
        )
        med = []
        for h in heads:
            v = [
                g["change"]
                for r in rs
                for g in r.get("gated_rows") or []
                if g["scope"] == "overall" and g["metric"] == h and g["change"] is not None
            ]
            if v:
                unit = "pp" if h.endswith("_ratio") else "%"
                med.append(f"{h} {100 * statistics.median(v):+.1f} {unit}")
        if med:
            lines.append("  median overall change: " + ", ".join(med))
        for r in rs:
            if r["flags"]:
                lines.append(f"  trial {r['i']}: {', '.join(r['flags'])}")
    if aa:
        verdicts: dict[str, int] = {}
        for r in aa:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        lines.append(f"A/A verdicts: {verdicts}")
        lines.append("Resolution of the design (A/A bounds; a threshold above q95 settles 95 %):")
        lines += resolvable(aa)
        lines += resampled_by_mode(aa)
        lines += injected_tail(aa)
        k = sum(r["verdict"] == VERDICT_SAME for r in aa)
        lo, hi = wilson(k, len(aa))
        lines.append(
            f"A/A: no detectable change {k}/{len(aa)} = {k / len(aa):.0%} (Wilson 95 % {lo:.0%}-{hi:.0%})"
        )
        for r in aa:
            if r["flags"]:
                lines.append(f"  trial {r['i']}: {', '.join(r['flags'])}")
    if rg:
        k = sum(
            r["verdict"] in FAILS
            and any(f.endswith((" ttft_shift worse", " ttft_p95 worse")) for f in r["flags"])
            for r in rg
        )
        lo, hi = wilson(k, len(rg))
        lines.append(
            f"regression: flagged worse on a gated TTFT metric {k}/{len(rg)} = {k / len(rg):.0%} (Wilson 95 % {lo:.0%}-{hi:.0%})"
        )
        k = sum(r["verdict"] in FAILS for r in rg)
        lo, hi = wilson(k, len(rg))
        lines.append(
            f"regression: overall verdict worse (any gated metric) {k}/{len(rg)} = {k / len(rg):.0%} (Wilson 95 % {lo:.0%}-{hi:.0%})"
        )
        for r in rg:
            ch = (r["ttft_p95"].get("overall") or {}).get("change")
            lines.append(
                f"  trial {r['i']}: {r['verdict']}; overall ttft_p95 {ch if ch is None else f'{ch:+.1%}'}"
                + (f"; {', '.join(r['flags'])}" if r["flags"] else "")
            )

    # The gated latency statistic: the paired TTFT shift (compare's ttft_shift row).
    for kind, rs in (("aa", aa), ("regression", rg)):
        sh = [r["ttft_shift"] for r in rs if r.get("ttft_shift")]
        if sh:
            want = VERDICT_WORSE if kind == "regression" else VERDICT_SAME
            k = sum(x["verdict"] == want for x in sh)
            lo, hi = wilson(k, len(sh))
            ch = [x["change"] for x in sh if x["change"] is not None]
            se = [x["se"] for x in sh if x["se"]]
            lines.append(
                f"{kind}: overall ttft_shift '{want}' {k}/{len(sh)} = {k / len(sh):.0%} "
                f"(Wilson 95 % {lo:.0%}-{hi:.0%})"
                + (f"; change {min(ch):+.1%}..{max(ch):+.1%}" if ch else "")
                + (f", se median {statistics.median(se):.1%}" if se else "")
            )
        if kind == "aa":
            # Calibration: between-instance spread vs the within-run bootstrap SE.
            z = [
                math.log1p(x["change"]) / x["se"] for x in sh if x["change"] is not None and x["se"]
            ]
            if len(z) >= 2:
                lines.append(
                    f"  aa ttft_shift z-scores: median |z| {statistics.median(abs(x) for x in z):.2f}, "
                    f"|z| > 3 in {sum(abs(x) > 3 for x in z)}/{len(z)}; |change| max "
                    f"{max(abs(x['change']) for x in sh if x['change'] is not None):.1%} "
                    "(a change below T/2 = 5 % is never flagged)"
                )
        # which metrics (gated or shown) flip, across trials
        counts: dict[str, int] = {}
        for r in rs:
            for f in r["flags"]:
                counts[f] = counts.get(f, 0) + 1
        if counts:
            lines.append(
                f"  {kind} gated flags over {len(rs)} trials: "
                + ", ".join(f"{f} x{n}" for f, n in sorted(counts.items()))
            )
        if kind == "regression":
            k = sum(any(v["verdict"] == VERDICT_WORSE for v in r["ttft_p95"].values()) for r in rs)
            lines.append(
                f"  regression: ttft_p95 row worse (shown, gated only on request) {k}/{len(rs)}"
            )
        else:
            k = sum(
                any(
                    v["verdict"] not in (VERDICT_SAME, "insufficient data")
                    for v in r["ttft_p95"].values()
                )
                for r in rs
            )
            lines.append(f"  aa: ttft_p95 row not 'no detectable change' (shown) {k}/{len(rs)}")
    scopes = sorted({s for r in results for s in r["ttft_p95"]})
    for s in scopes:
        for kind, rs in (("aa", aa), ("regression", rg)):
            ch = [
                r["ttft_p95"][s]["change"]
                for r in rs
                if s in r["ttft_p95"] and r["ttft_p95"][s]["change"] is not None
            ]
            se = [
                r["ttft_p95"][s]["se"] for r in rs if s in r["ttft_p95"] and r["ttft_p95"][s]["se"]
            ]
            if len(ch) >= 2 and se:
                lines.append(
                    f"  {kind:10s} {s:20s} ttft_p95 change mean {statistics.mean(ch):+.1%} "
                    f"median {statistics.median(ch):+.1%} sd {statistics.stdev(ch):.1%}; "
                    f"bootstrap se (log) median {statistics.median(se):.1%}"
                )
            if kind == "aa":
                # Calibration: A/A z-scores log(1+change)/se should have sd about 1.
                z = [
                    math.log1p(r["ttft_p95"][s]["change"]) / r["ttft_p95"][s]["se"]
                    for r in rs
                    if s in r["ttft_p95"]
                    and r["ttft_p95"][s]["change"] is not None
                    and r["ttft_p95"][s]["se"]
                ]
                if len(z) >= 2:
                    big = sum(abs(x) > 3 for x in z)
                    lines.append(
                        f"  {'aa':10s} {s:20s} ttft_p95 z-scores: median |z| "
                        f"{statistics.median(abs(x) for x in z):.2f}, |z| > 3 in {big}/{len(z)}"
                    )
    # Run length needed: 90 % power at a true 10 % needs log1p(T) - z_K*se >= 1.28*se and
    # change >= T/2, i.e. se <= log1p(T) / (z_K + 1.28).
    gated = [r["gated"] for r in results if r.get("gated")]
    if gated:
        kk = int(statistics.median(gated))
        zk = float(sps.norm.ppf(1 - 0.05 / (2 * kk)))
        need = math.log1p(threshold) / (zk + 1.2816)
        lines.append(
            f"gated metrics counted (median) {kk}: z = {zk:.2f}; 90 % detection of a true {threshold:.0%} needs se <= {need:.2%}"
        )
        sse = [r["ttft_shift"]["se"] for r in results if (r.get("ttft_shift") or {}).get("se")]
        dur = [r["duration_s"] for r in results if r.get("duration_s")]
        if sse and dur:
            m, d = statistics.median(sse), statistics.median(dur)
            lines.append(
                f"  overall ttft_shift: median se {m:.2%} at {d:.0f} s -> about "
                f"{d * (m / need) ** 2:.0f} s of run needed"
            )
        for s in scopes:
            se = [
                r["ttft_p95"][s]["se"]
                for r in results
                if s in r["ttft_p95"] and r["ttft_p95"][s]["se"]
            ]
            dur = [r["duration_s"] for r in results if r.get("duration_s")]
            if se and dur:
                m, d = statistics.median(se), statistics.median(dur)
                lines.append(
                    f"  {s}: median se {m:.2%} at {d:.0f} s -> about {d * (m / need) ** 2:.0f} s of run needed"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20, help="trials per kind (A/A and regression)")
    p.add_argument("--profile", default="mixed")
    p.add_argument("--duration", default="", help="run length per side (default: the profile's)")
    p.add_argument("--preset", default="vllm-0.28-v1")
    p.add_argument(
        "--scale", type=float, default=1.10, help="candidate ttft_scale in regression trials"
    )
    p.add_argument(
        "--candidate-preset",
        default="",
        help="regression candidate's simulator preset, e.g. vllm-0.29-v2 for the upgrade "
        "trade-off (with --scale 1.0); default: --preset",
    )
    p.add_argument(
        "--blocks", type=int, default=DEFAULT_BLOCKS,
        help=f"blocks per side, each one run of --duration (the canary's default design: "
        f"{DEFAULT_BLOCKS}); --reanalyze: the trials' block count",
    )  # fmt: skip
    p.add_argument(
        "--first-blocks", type=int, default=None,
        help="--reanalyze: judge only the first K blocks of each trial (a shorter design on "
        "the same traffic)",
    )  # fmt: skip
    p.add_argument(
        "--scenarios", default="",
        help=f"triple: regression scenarios cycled over trials, from {','.join(SCENARIOS)}",
    )  # fmt: skip
    p.add_argument(
        "--mode", default="simultaneous", choices=("simultaneous", "sequential", "interleaved")
    )
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--kinds", default="aa,regression")
    p.add_argument(
        "--design",
        default="triple",
        choices=("triple", "pairs"),
        help="triple: baseline, twin and candidate at once (one A/A and one regression "
        "comparison per trial); pairs: a separate canary per trial kind",
    )
    p.add_argument(
        "--independent-seeds",
        action="store_true",
        help="triple: a different simulator seed per side (responses differ between sides)",
    )
    p.add_argument(
        "--run-arg",
        action="append",
        default=[],
        help="extra `agentload run` argument for every run, e.g. --run-arg=--users=12",
    )
    p.add_argument(
        "--out", type=Path, default=Path("bench-out") / f"verdict-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    p.add_argument(
        "--reanalyze",
        type=Path,
        nargs="+",
        help="re-judge the trial-* directories under these paths",
    )
    p.add_argument(
        "--min-trial", type=int, default=0,
        help="--reanalyze: only trials numbered from this on (e.g. those run after a rule change)",
    )  # fmt: skip
    p.add_argument(
        "--early-stop", action="store_true",
        help="--reanalyze: judge as `agentload canary --early-stop` would have (interim looks)",
    )  # fmt: skip
    args = p.parse_args(argv)
    results = []
    if args.reanalyze:
        dirs = sorted(
            d
            for root in args.reanalyze
            for d in root.glob("*trial-*")
            if int(d.name.rpartition("trial-")[2]) >= args.min_trial
        )
        for d in dirs:
            if not ((d / "baseline").exists() and (d / "candidate").exists()):
                continue
            sides = [x for x in (d / "baseline", d / "twin", d / "candidate") if x.exists()]
            if not all((x / "run.json").exists() or (x / "block-0").exists() for x in sides) or any(
                b.is_dir() and not (b / "run.json").exists()
                for x in sides
                for b in x.glob("block-*")
            ):
                continue  # a trial still running (or cut short)
            counts = {len([b for b in x.glob("block-*") if b.is_dir()]) for x in sides}
            if counts != ({args.blocks} if args.blocks > 1 else {0}):
                continue
            kind, _, i = d.name.partition("trial-")
            used = args.first_blocks or args.blocks
            with first_blocks(d, args.first_blocks) as t:
                if (t / "twin").exists() and args.early_stop:
                    sc = t / "scenario.json"
                    name = json.loads(sc.read_text())["name"] if sc.exists() else "custom"
                    for k, other in (("aa", "twin"), ("regression", "candidate")):
                        r = judge_early(t, other, used)
                        results.append({"kind": k, "i": int(i), "scenario": name, **r})
                        print(
                            f"[{k} {d.name} {name}] {r['verdict']} after {r['blocks_used']}",
                            flush=True,
                        )
                elif (t / "twin").exists():
                    sc = t / "scenario.json"
                    name = json.loads(sc.read_text())["name"] if sc.exists() else "custom"
                    aa, reg = judge(t, "twin"), judge(t)
                    results.append({"kind": "aa", "i": int(i), "scenario": name, **aa})
                    results.append({"kind": "regression", "i": int(i), "scenario": name, **reg})
                else:
                    results.append({"kind": kind.rstrip("-"), "i": int(i), **judge(t)})
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "reanalysis.json").write_text(json.dumps(results, indent=1))
    else:
        for i in range(args.trials):
            if args.design == "triple":
                for r in trial_triple(args.out / f"trial-{i:03d}", i, args):
                    results.append(r)
                    print(
                        f"[{r['kind']} {i} {r['scenario']}] {r['verdict']} flags {r['flags']} ttft_p95 "
                        f"{json.dumps({s: round(v['change'] or 0, 4) for s, v in r['ttft_p95'].items()})} "
                        f"({r['wall_s']:.0f} s)",
                        flush=True,
                    )
                (args.out / "results.json").write_text(json.dumps(results, indent=1))
                continue
            for kind in args.kinds.split(","):
                r = trial(args.out / f"{kind}-trial-{i:03d}", kind, i, args)
                results.append(r)
                print(
                    f"[{kind} {i}] {r['verdict']} ttft_p95 {json.dumps({s: round(v['change'] or 0, 4) for s, v in r['ttft_p95'].items()})} ({r['wall_s']:.0f} s)",
                    flush=True,
                )
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    if args.early_stop:
        print(summarize_early(results, args.first_blocks or args.blocks))
        return 0
    print(summarize(results, args.scale - 1.0 if args.scale > 1 else 0.10))
    return 0


if __name__ == "__main__":
    sys.exit(main())
