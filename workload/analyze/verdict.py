"""A/B comparison of two run directories, with uncertainty and a verdict.

Method (docs/canary.md, "Verdict method"):

* Every metric is computed from the raw rows (requests*.jsonl,
  sessions*.jsonl), per scope: overall, per traffic class, per (class, step).
* Uncertainty comes from a cluster bootstrap over sessions. Seeded traffic
  gives both runs the same session ids, so a session present in both runs is
  resampled *jointly* (paired); sessions present in one run only are resampled
  independently within their run (a stratified bootstrap). All requests of a
  resampled session come along, so within-session correlation is respected.
  Counts (completed sessions/requests per minute) use a Poisson interval.
  When sessions pair, latency percentiles are over the (session, step)
  requests both runs completed, so a side that fell behind does not change
  the mix of steps compared (its missing work shows in throughput/counts).
* Latency gates on the **paired per-request shift** (`ttft_shift`, `itl_shift`,
  `e2e_shift`): the median, over the (session, step) requests both runs served,
  of log(B/A) (ITL: the per-request mean), reported as exp(median) − 1, with the
  same session-cluster bootstrap. Two instances of the same server reorder a
  few requests in the tail (start-up waves, preemption cascades), which moves
  p95 by more than 10 % with no change in the server; the paired median does
  not move for that, and a real slowdown of every request moves it fully
  (docs/canary-verdict-quality.md). TPOT (per output token) is the headline
  latency; per-chunk ITL (`itl_*`) is a detail gated only when named, because
  under speculative decoding a chunk carries several tokens.
* Between-instance metrics (thresholds.BETWEEN_INSTANCE: percentiles, throughput,
  completed sessions, cached ratio): with paired runs they gate only on a
  trimmed-mean t-interval across >= MIN_BLOCKS interleaved blocks (Yuen's;
  workload.analyze.blocks),
  which holds instance divergence; with one block they are shown, not gated,
  unless a flag names them. Unpaired runs gate them as before.
* Session success, tool-loop failure and error ratios use Fisher's exact test
  on their counts (any n), with a Newcombe/Clopper-Pearson interval.
* Changes: relative (B/A − 1) for percentiles, counts and acceptance length,
  computed on the log scale; absolute (percentage points) for ratios. The
  interval is the normal interval from the bootstrap standard error.
* Verdict per metric with threshold T (same unit as the change, sign chosen
  so that positive = worse): **worse** when the interval lies above 0 *and*
  the point estimate is at least T/2; **better** symmetrically; otherwise
  **no detectable change**. The intervals of gated metrics (those with a
  threshold, overall and per class) are Bonferroni-adjusted over the gated
  metrics that can vary (Tarone: a metric with zero spread in both runs cannot
  be flagged and does not count; neither does a metric with too little data,
  nor a class row identical to the overall row), so the whole family keeps
  `confidence`. The split is weighted (gate_tails): the overall TPOT p90/p95
  rows judged across blocks share half of alpha, the other rows the rest.
  The T/2 floor keeps tiny systematic differences (two servers are never
  bit-identical) from being called regressions on long runs; with a run long
  enough that the standard error of the change is ≤ T/4.3, a true change of T
  is flagged with ≥ 90 % probability.
* Overall: mixed if gated metrics moved both ways, worse if any is worse, else
  better if any is better, else no detectable change. Exit code 3 on worse or
  mixed, else 0. Slices (workload.analyze.slices) say where a change happened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workload.analyze.blocks import apply_block_intervals, common_blocks, trimmed_each_end
from workload.analyze.bootstrap import Scope, weights_ahead
from workload.analyze.catalogue import (
    METRICS,
    SLICE_METRICS,
    STEP_METRICS,
    VERDICT_INCONCLUSIVE,
    VERDICT_NODATA,
    MetricDiff,
)
from workload.analyze.comparison import Comparison, GateTails
from workload.analyze.estimate import min_samples, scope_metrics
from workload.analyze.judge import (
    decided_by,
    drop_duplicate_gates,
    equivalence,
    gate_tails,
    judge,
    overall_verdict,
    settle,
)
from workload.analyze.prior import DEFAULT_PRIOR, PRIORS, Prior, prior_rows
from workload.analyze.rundata import RunData, load_pair, load_run
from workload.analyze.serverinfo import class_histogram, error_kinds, server_summary
from workload.analyze.slices import gates_in_slice, slice_filters, spec_lines, where_lines
from workload.analyze.table import Pair, Rows
from workload.analyze.thresholds import (
    BETWEEN_INSTANCE,
    HEADLINE_TAIL_SHARE,
    MIN_BLOCKS,
    PER_CHUNK,
    explicit_gates,
    history_actual_overrides,
    is_explicit,
    profile_compare,
    replays_answers,
    resolve_thresholds,
    threshold_for,
    thresholds_validated,
)
from workload.analyze.traffic import (
    VALIDATED_BLOCKS,
    VALIDATED_S,
    divergence_line,
    history_divergence,
    tool_loop_examples,
    traffic_differences,
)
from workload.errors import CompareError
from workload.observe.fingerprint import fingerprint_diff

__all__ = ["Comparison", "GateTails", "SHORT_DESIGN_WARNING", "compare_runs", "default_confidence"]


# The start of the warning for a comparison shorter than the validated design.
SHORT_DESIGN_WARNING = "this comparison ("


def default_confidence(run_a: dict[str, Any], run_b: dict[str, Any]) -> float:
    """1 - the recorded profile's `compare.alpha` (B's, else A's), else 0.95."""
    alpha = profile_compare(run_b).get("alpha", profile_compare(run_a).get("alpha", 0.05))
    return 1.0 - float(alpha) if isinstance(alpha, (int, float)) else 0.95


def compare_runs(
    run_a: Path | str | RunData,
    run_b: Path | str | RunData,
    thresholds: dict[str, Any] | None = None,
    *,
    confidence: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    steps: bool = True,
    instance_prior: str | Prior | None = DEFAULT_PRIOR,
) -> Comparison:
    """Compare baseline A with candidate B; see the module docstring for the method.

    `confidence` defaults to 1 - the profile's `compare.alpha`, else 0.95. `instance_prior`:
    with 2-3 blocks, judge against this measured instance spread (a name in prior.PRIORS, or
    a Prior); None turns it off, as the canary's interim looks (early stop, at 3 blocks of a
    longer design) do.
    """
    if n_boot < 100:
        raise CompareError(f"n_boot must be at least 100, got {n_boot}")
    a, b = _load(run_a, run_b)
    if confidence is None:
        confidence = default_confidence(a.run, b.run)
    if not 0.5 < confidence < 1:
        raise CompareError(f"confidence must be in (0.5, 1), got {confidence}")
    th = resolve_thresholds(a.run, b.run, thresholds)
    differs = traffic_differences(a.run, b.run)
    paired = not differs
    warnings = _design_warnings(a, b, differs) + _generator_warnings(a, b)
    classes = sorted(set(a.classes) | set(b.classes))
    dur = (a.duration_s, b.duration_s)
    rng = np.random.default_rng(seed)
    scopes: list[tuple[str, str | None]] = [("overall", None)] + [
        (f"class:{c}", c) for c in classes
    ]
    pair = Pair((a.req_cols, b.req_cols), (a.sess_cols, b.sess_cols))
    replays = replays_answers(a.run) or replays_answers(b.run)
    jobs = _scope_jobs(pair, scopes, classes, paired, replays, steps)
    metrics: list[MetricDiff] = []
    drawn = weights_ahead([sc for _, sc, _ in jobs], rng, n_boot)
    for (name, sc, names), w in zip(jobs, drawn, strict=True):
        metrics += scope_metrics(name, sc, names, rng, n_boot, dur, w)
    n_blocks = apply_block_intervals(metrics, a, b, pair, scopes, paired, rng)
    used = _apply_prior(metrics, instance_prior, n_blocks) if paired else None
    _choose_gates(metrics, th, explicit_gates(thresholds), n_blocks)
    _drop_impossible(metrics, pair, scopes)
    warnings += _drop_one_sided(metrics)
    tails = _judge_all(metrics, 1.0 - confidence)
    gated = [m for m in metrics if m.gated]
    warnings += _judged_warnings(gated, used)
    verdict = overall_verdict(gated)
    divergence = None
    if replays:
        divergence = history_divergence(pair)
        warnings += _history_warnings(a, b, divergence)
    if not a.metrics or not b.metrics:
        warnings.append(
            "server /metrics samples absent in "
            + ("A and B" if not (a.metrics or b.metrics) else ("A" if not a.metrics else "B"))
        )
    return Comparison(
        a, b, metrics, fingerprint_diff(a.run, b.run),
        {"a": error_kinds(a, scopes), "b": error_kinds(b, scopes)},
        {"a": server_summary(a.metrics), "b": server_summary(b.metrics)},
        {
            "a": {c: class_histogram(a.req_cols, c) for c in classes},
            "b": {c: class_histogram(b.req_cols, c) for c in classes},
        },
        warnings, confidence, n_boot, th, tails.k, verdict,
        _gating_sentence(metrics, n_blocks, tails), n_blocks,
        where_lines(metrics) + spec_lines(metrics),
        {"a": tool_loop_examples(a.req_cols.loop_rows()),
         "b": tool_loop_examples(b.req_cols.loop_rows())},
        divergence, settle(metrics, a, n_blocks), tails,
        decided_by(gated, verdict, n_blocks), thresholds_validated(a.run, b.run),
        {"name": used.name, "source": used.source} if used else None,
    )  # fmt: skip


def _apply_prior(
    metrics: list[MetricDiff], instance_prior: str | Prior | None, n_blocks: int
) -> Prior | None:
    """With 2-3 paired blocks, judge rows against the measured instance spread (prior.py);
    the prior used, or None where no row was judged on one."""
    if isinstance(instance_prior, str):
        if instance_prior not in PRIORS:
            raise CompareError(
                f"unknown instance spread {instance_prior!r}; use one of {', '.join(PRIORS)}"
            )
        instance_prior = PRIORS[instance_prior]
    if instance_prior is None or not 2 <= n_blocks < MIN_BLOCKS:
        return None
    return instance_prior if prior_rows(metrics, n_blocks, instance_prior) else None


def _load(run_a: Path | str | RunData, run_b: Path | str | RunData) -> tuple[RunData, RunData]:
    """Both runs' data (a pair of paths loads in parallel)."""
    if isinstance(run_a, RunData) or isinstance(run_b, RunData):
        a = run_a if isinstance(run_a, RunData) else load_run(run_a)
        b = run_b if isinstance(run_b, RunData) else load_run(run_b)
        return a, b
    return load_pair(run_a, run_b)


def _design_warnings(a: RunData, b: RunData, differs: list[str]) -> list[str]:
    """What limits the comparison before any metric: unpaired traffic, missing rows, a
    design shorter than the validated one."""
    warnings: list[str] = []
    if differs:
        warnings.append(f"traffic differs ({'; '.join(differs)}); sessions not paired")
    if not a.req_cols.n or not b.req_cols.n:
        warnings.append("a run has no request rows")
    dur = (a.duration_s, b.duration_s)
    if not (dur[0] and dur[1]):
        warnings.append("run duration unknown; counts compared as totals")
    short = min((d for d in dur if d), default=None)
    nb = len(common_blocks(a, b))
    per_block = short / nb if short is not None and nb >= 2 else short
    if per_block is not None and (per_block < 0.9 * VALIDATED_S or 2 <= nb < VALIDATED_BLOCKS):
        design = f"{nb} blocks x {per_block:.0f} s" if nb >= 2 else f"one run of {per_block:.0f} s"
        warnings.append(
            f"{SHORT_DESIGN_WARNING}{design}) is shorter than the design the verdict was validated "
            f"at ({VALIDATED_BLOCKS} blocks x {VALIDATED_S:.0f} s of mixed on the simulator, "
            "docs/canary-verdict-quality.md): fewer blocks widen the block intervals, shorter "
            "blocks make the start-up wave a larger share"
        )
    return warnings


def _crossed(run: RunData) -> tuple[list[str], float | None]:
    """The blocks (names; "" for a run without blocks) whose load generator crossed its
    health thresholds, and the largest event-loop lag among them (ms)."""
    names, lags = [], []
    for name, gh in run.health.items():
        if isinstance(gh, dict) and gh.get("crossed"):
            names.append(name)
            lag = gh.get("loop_lag_ms_max")
            if isinstance(lag, (int, float)) and not isinstance(lag, bool):
                lags.append(float(lag))
    return names, max(lags, default=None)


def _generator_warnings(a: RunData, b: RunData) -> list[str]:
    """One warning when either side's load generator was short of CPU (run.json
    generator_health crossed): its reads came late, so that side's latencies hold the
    generator's delay as well as the server's."""
    parts, lags = [], []
    for side, run in (("A", a), ("B", b)):
        names, lag = _crossed(run)
        if not names:
            continue
        if lag is not None:
            lags.append(lag)
        if names == [""]:
            parts.append(side)
        else:
            nums = [n.removeprefix("block-").lstrip("0") or "0" for n in names]
            parts.append(f"{side} in {len(names)} of {len(run.health)} blocks ({', '.join(nums)})")
    if not parts:
        return []
    lag_txt = f", event-loop lag up to {max(lags):.0f} ms" if lags else ""
    return [
        f"the load generator was short of CPU for {'; '.join(parts)}{lag_txt}: those "
        "latencies include its own late reads; run it on cores the servers do not use "
        "(taskset) or add --workers"
    ]


def _scope_jobs(
    pair: Pair,
    scopes: list[tuple[str, str | None]],
    classes: list[str],
    paired: bool,
    replays: bool,
    steps: bool,
) -> list[tuple[str, Scope, list[str]]]:
    """Every scope (overall, classes, then per class its steps and slices) with the metrics
    it computes, in the order their bootstrap weights are drawn (so the draws can run ahead
    in a second thread)."""
    req = (Rows(pair.req[0]), Rows(pair.req[1]))
    sess = (Rows(pair.sess[0]), Rows(pair.sess[1]))
    jobs: list[tuple[str, Scope, list[str]]] = []
    for name, cls in scopes:
        ra, rb = (pair.of_class(r, cls) for r in req)
        sa, sb = (pair.of_class(s, cls) for s in sess)
        jobs.append((name, Scope(ra, rb, sa, sb, paired, pair.n_ids, replays), list(METRICS)))
    if not steps:
        return jobs
    for cls in classes:
        ra, rb = (pair.of_class(r, cls) for r in req)
        sta, stb = ra.col("step"), rb.col("step")
        for k in np.unique(np.concatenate([sta, stb])).tolist():
            sc = Scope(
                ra.where(sta == k), rb.where(stb == k), None, None, paired, pair.n_ids, replays
            )
            jobs.append((f"step:{cls}:{k}", sc, list(STEP_METRICS)))
        for label, keep_a, keep_b in slice_filters(ra, rb):
            sc = Scope(ra.where(keep_a), rb.where(keep_b), None, None, paired, pair.n_ids, replays)
            jobs.append((f"slice:{cls}:{label}", sc, list(SLICE_METRICS)))
    return jobs


def _choose_gates(
    metrics: list[MetricDiff], th: dict[str, float], explicit: Any, n_blocks: int
) -> None:
    """Which rows gate: those with a threshold, less what this design cannot judge (the
    paired shift without pairs, per-chunk ITL, between-instance rows without blocks, a
    class's copy of an overall tail); a row a flag names gates regardless."""
    for m in metrics:
        local = m.scope.startswith(("step:", "slice:"))
        t = threshold_for(th, "class:" + m.scope.split(":")[1] if local else m.scope, m.metric)
        if t is not None:
            m.threshold = t / 100.0  # step/slice rows use it for the T/2 floor
            m.gated = not local or (
                m.scope.startswith("slice:") and gates_in_slice(m.scope, m.metric)
            )
    for m in metrics:
        if m.gated and METRICS[m.metric].kind == "shift" and not m.paired_share:
            m.gated, m.note = False, "runs do not pair: the percentiles gate"
    for m in metrics:
        if not m.gated or is_explicit(explicit, m.scope, m.metric):
            continue
        if m.metric in PER_CHUNK:
            # Under spec decode a chunk carries several tokens: per-chunk gaps shrink when
            # acceptance falls. TPOT (per token) gates instead.
            m.gated, m.note = False, "per-chunk detail; TPOT gates (name it to gate)"
        elif (
            m.paired_share and m.metric in BETWEEN_INSTANCE and m.method not in ("blocks", "prior")
        ):
            # Paired single-block runs: no between-instance estimate for these.
            why = (
                f"needs >= {MIN_BLOCKS} blocks per side, --blocks"
                if n_blocks < MIN_BLOCKS
                else f"fewer than {MIN_BLOCKS} blocks with data on both sides"
            )
            m.gated = False
            m.note = f"not gated: no between-instance estimate ({why}; name it to gate)"
        elif m.paired_share and m.metric in BETWEEN_INSTANCE and m.scope.startswith("class:"):
            # A class's tails and work done, judged across blocks, rest on that class's share
            # of the traffic: a small class (mixed's two background users) cannot rule out
            # any useful change in 8 blocks. The overall row gates; the class row is shown
            # (and named in "where" when it moved).
            m.gated, m.note = False, "class row shown; the overall row gates (name it to gate)"
    drop_duplicate_gates(metrics)


def _drop_impossible(
    metrics: list[MetricDiff], pair: Pair, scopes: list[tuple[str, str | None]]
) -> None:
    """Un-gate the tool-loop failure ratio where no tool call happened on either side and no
    session failed: on a profile without tools (`chat`) it cannot occur, and 0 of 10 against
    0 of 10 sessions would otherwise hold the verdict inconclusive (it cannot rule out 5 pp)."""
    req = (Rows(pair.req[0]), Rows(pair.req[1]))
    for name, cls in scopes:
        if any(bool(pair.of_class(r, cls).col("tool").any()) for r in req):
            continue
        for m in metrics:
            if (
                m.scope == name
                and m.metric == "tool_loop_failure_ratio"
                and m.gated
                and not (m.counts and (m.counts[0] or m.counts[2]))
            ):
                m.gated, m.note = False, "does not apply: no tool calls on either side"


ONE_SIDED = ("spec_acceptance_rate", "spec_acceptance_length")


def _drop_one_sided(metrics: list[MetricDiff]) -> list[str]:
    """Un-gate speculative-decoding acceptance where only one side reports any: a server
    without drafts (speculation off, or its per-request spec metrics off) has no acceptance
    to compare, and no amount of traffic gives it one, so the row must not hold the verdict
    inconclusive. Its effect is in the latency rows, which still gate. The warning line."""
    sides = set()
    for m in metrics:
        if m.gated and m.metric in ONE_SIDED and (m.n_a == 0) != (m.n_b == 0):
            side = "A" if m.n_a else "B"
            m.gated = False
            m.note = f"does not apply: only {side} reports speculative decoding"
            sides.add(side)
    if len(sides) != 1:
        return []
    side = sides.pop()
    other = "B" if side == "A" else "A"
    return [
        f"speculative decoding reported by {side} only ({other} has no accepted drafts: "
        "speculation off, or its per-request spec metrics off): acceptance not compared; "
        "its effect is in the latency rows"
    ]


def _judge_all(metrics: list[MetricDiff], alpha: float) -> GateTails:
    """Every row's interval and verdict; gated rows at their share of alpha, with the
    equivalence test. The split of alpha it used."""
    tails = gate_tails(metrics, alpha)
    for m in metrics:
        judge(m, tails.of(m) if m.gated or m.same_as or m.note else alpha / 2)
        if m.gated:
            equivalence(m, alpha, tails.of(m))
        if m.gated and m.scope == "overall" and m.verdict == VERDICT_NODATA and max(m.n_a, m.n_b):
            # Measured, but too few to judge (a short canary's latency shift): it could not
            # have seen a regression. A metric with no samples on either side does not apply.
            m.verdict = VERDICT_INCONCLUSIVE
            m.settle_factor = min_samples(m.metric) / max(1, min(m.n_a, m.n_b))
    return tails


def _judged_warnings(gated: list[MetricDiff], prior: Prior | None) -> list[str]:
    """Gated rows judged only one way (too few to rule out their threshold), or not at all."""
    out: list[str] = []
    weak = [(m, u) for m in gated if (u := m.underpowered) is not None and m.method != "prior"]
    leaning = [(m, u) for m in gated if (u := m.underpowered) is not None and m.method == "prior"]
    if leaning:
        assert prior is not None  # rows judged on a prior exist only where one was applied
        unit = {True: "%", False: "pp"}
        out.append(
            f"{leaning[0][0].blocks} block{'s' if leaning[0][0].blocks > 1 else ''} per side "
            "cannot estimate how far two instances differ, so these are judged against the "
            f"measured instance spread ({prior.name}: {prior.source}) and only for getting worse: "
            + ", ".join(
                f"{m.metric} (rules out only {100 * u:+.0f} {unit[m.change_kind == 'relative']})"
                for m, u in leaning
            )
        )
    if weak:
        out.append(
            "too few to rule out their threshold, so judged only for getting worse: "
            + ", ".join(
                f"{m.scope} {m.metric} ({min(m.n_a, m.n_b):,} per side rule out only "
                f"{100 * u:.0f} pp)"
                for m, u in weak
            )
        )
    nodata = [  # rows with no sample on either side do not apply (a non-streamed class's TTFT)
        f"{m.scope} {m.metric}"
        for m in gated
        if m.verdict == VERDICT_NODATA and max(m.n_a, m.n_b) > 0
    ]
    if nodata:
        out.append("not enough data to judge: " + ", ".join(nodata))
    return out


def _history_warnings(a: RunData, b: RunData, divergence: dict[str, Any]) -> list[str]:
    """Under history: actual, how far the sides' traffic parted, and the thresholds used."""
    out = [divergence_line(divergence)]
    over = history_actual_overrides(a.run) | history_actual_overrides(b.run)
    if over:
        out.append(
            "history: actual, so the profile's compare.history_actual thresholds apply ("
            + ", ".join(f"{k}: {'off' if v is None else v}" for k, v in sorted(over.items()))
            + "): the sessions follow the server's answers, and their tails move more "
            "between two instances"
        )
    return out


def _trim_words(blocks: int) -> str:
    """How the block interval treats the extremes, for the gating sentence."""
    g = trimmed_each_end(blocks)
    if g == 0:
        return "the plain mean: too few blocks to trim"
    return (
        f"trimmed mean: the {'most extreme block' if g == 1 else f'{g} most extreme blocks'} "
        "at each end left out, so one instance's bad block does not decide"
    )


def _gating_sentence(
    metrics: list[MetricDiff], blocks: int = 0, tails: GateTails | None = None
) -> str:
    """One or two sentences for the verdict box: which metrics gate, and why."""
    gated = [m for m in metrics if m.gated]
    shifts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "shift"})
    pcts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "quantile"})
    by_blocks = sorted({m.metric for m in gated if m.method == "blocks"})
    held = sorted({m.metric for m in metrics if m.note and "between-instance" in m.note})
    out = []
    if shifts:
        out.append(
            f"Latency gates on the paired shift ({', '.join(shifts)}: median over the requests "
            "both runs served of B/A; TPOT, per output token, is the headline, per-chunk ITL a "
            "detail because spec-decode chunks carry several tokens)"
        )
    elif pcts:
        out.append(
            f"The runs do not pair (different traffic), so latency gates on the percentiles "
            f"({', '.join(pcts)})"
        )
    else:
        out.append("No latency metric gates")
    named = [x for x in pcts if x not in by_blocks]
    if shifts and named:
        out.append(f"{', '.join(named)} gate because a threshold flag names them")
    if by_blocks:
        out.append(
            f"{', '.join(by_blocks)} gate on a t-interval across {blocks} blocks per side "
            f"({_trim_words(blocks)}), which holds the divergence between two instances of a "
            "server"
            + (
                f"; {' and '.join(sorted(m for _, m in tails.headline_rows))}, the headline tail, "
                f"share {HEADLINE_TAIL_SHARE:.0%} of the family's error budget and the other "
                "gated rows the rest"
                if tails and tails.headline_rows
                else ""
            )
        )
    elif held:
        out.append(
            f"{', '.join(held)} (tails and work done) are shown but not gated: with "
            f"{'one block' if blocks <= 1 else f'{blocks} blocks'} per side"
            f"{' (too few with data)' if blocks >= MIN_BLOCKS else ''} there is no "
            "between-instance estimate, and two instances of the same server differ on them by "
            f"more than a within-run interval knows (run >= {MIN_BLOCKS} blocks, --blocks, or name "
            "one, e.g. --threshold tpot_p95=10)"
        )
    return "; ".join(out) + "."
