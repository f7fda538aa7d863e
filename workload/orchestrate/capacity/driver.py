"""`agentload capacity`'s driver: run each load step, judge its measurement window, search.

The search itself is ``run.capacity`` (pure). Here each step is one bounded run at one load
(the same Locust machinery as `agentload run`, started by an injected ``start_step``), kept
under watch while it runs so a step that clearly breaks its SLOs ends early, and judged
afterwards on its measurement window only: the requests (and sessions) that started at least
``warmup_s`` after the step's first request. The window's rows go through the same
``measure.stats.Aggregate`` and ``measure.slo.evaluate_slos`` as a run's summary, so a step's
percentiles, goodput and SLO verdicts mean what they mean in run.json.

requests.jsonl does not keep each request's ITL gaps; a window's ITL histogram is rebuilt
from each request's mean gap, repeated once per gap (means exact, percentiles approximate).

Output (``write_outputs``): ``capacity.json`` (``CapacityResult.to_dict()`` plus, per step,
``out``, ``window_s``, ``early_stop``, ``request_goodput_ratio``, ``session_goodput_ratio``,
``session_goodput_per_min``, ``error_ratio``, ``percentiles`` and ``slo_results``; a step
whose error ratio is above the run's ``max_error_ratio`` fails as well; ``goodput`` is the good
requests per second of the window), ``capacity.html`` and the console table.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload.measure import artifacts
from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.slo import OVERALL, evaluate_slos, parse_slo_key
from workload.measure.stats import Aggregate
from workload.orchestrate.capacity.page import write_capacity_page
from workload.orchestrate.capacity.search import (
    CapacityResult,
    SearchSpec,
    StepResult,
    capacity_search,
    clearly_broken,
    quantile_verdict_settled,
    slo_quantile,
    stopped_result,
)
from workload.orchestrate.capacity.text import capacity_table
from workload.stopping import (
    STOPS,
    forward_stop,
    ignore_stops,
    signal_name,
    stop_child,
    stop_signum,
)

POLL_S = 1.0
EARLY_STOP_SAMPLES = 20  # a step this far past an SLO on this many samples will not recover
PERCENTILE_METRICS = ("ttft", "e2e", "itl")

_REQ_FIELDS = set(RequestRecord.__dataclass_fields__)
_SESS_FIELDS = set(SessionRecord.__dataclass_fields__)


@dataclass
class WindowJudgement:
    """One step's measurement window against the SLOs."""

    slo_met: bool
    slo_values: dict[str, float | None]
    samples: int
    extra: dict[str, Any] = field(default_factory=dict)
    broken: bool = False  # clearly past an SLO (``capacity.clearly_broken``)


def _request(row: Mapping[str, Any]) -> RequestRecord:
    rec = RequestRecord(**{k: v for k, v in row.items() if k in _REQ_FIELDS})
    itl = row.get("itl_ms")
    if rec.status == "ok" and isinstance(itl, dict) and isinstance(itl.get("mean"), (int, float)):
        rec.itl_gaps_ms = [float(itl["mean"])] * max(1, int(row.get("chunks") or 2) - 1)
    return rec


def window_aggregate(
    run_dir: Path,
    slos: Mapping[str, Mapping[str, float]],
    warmup_s: float,
    window_s: float | None = None,
) -> tuple[Aggregate, float, float | None]:
    """A step's measurement window: (its Aggregate, its length in s, its start in unix s).

    The window opens ``warmup_s`` after the step's first request and holds the requests and
    sessions that started in it (before ``window_s`` more seconds, when given); None as the
    start means no request has finished yet.
    """
    reqs = sorted(artifacts.read_records(run_dir, "requests"), key=lambda r: r.get("t_start") or 0)
    agg = Aggregate(slos)
    starts = [r["t_start"] for r in reqs if r.get("t_start")]
    if not starts:
        return agg, 0.0, None
    cutoff = min(starts) + warmup_s
    end = cutoff + window_s if window_s else float("inf")

    def inside(row: Mapping[str, Any]) -> bool:
        return cutoff <= (row.get("t_start") or 0) < end

    for r in reqs:
        if inside(r):
            agg.add_request(_request(r))
    for s in artifacts.read_records(run_dir, "sessions"):
        if inside(s):
            agg.add_session(SessionRecord(**{k: v for k, v in s.items() if k in _SESS_FIELDS}))
    last = agg.t_last if agg.t_last is not None else cutoff
    span = max(0.0, last - cutoff)
    return agg, min(span, window_s) if window_s else span, cutoff


def _label(cls: str, key: str) -> str:
    return key if cls == OVERALL else f"{cls}.{key}"


def _samples(summary: Mapping[str, Any], cls: str, key: str) -> int | None:
    """Sample count behind a quantile SLO (None for other keys)."""
    metric, stat, _, _ = parse_slo_key(key)
    if stat is None or not stat.startswith("p"):
        return None
    view = summary["overall"] if cls == OVERALL else (summary.get("by_class") or {}).get(cls)
    block = (view or {}).get(f"{'session_duration' if metric == 'task_time' else metric}_ms")
    return int((block or {}).get("count") or 0)


def _unsettled(
    agg: Aggregate, summary: Mapping[str, Any], slos: Mapping[str, Mapping[str, float]]
) -> list[str]:
    """The quantile SLOs (of classes that sent requests) whose verdict the window's samples do
    not settle at 95 % (``search.quantile_verdict_settled``): the step's ``(few)``."""
    out = []
    for cls, keys in slos.items():
        view = agg.overall if cls == OVERALL else agg.classes.get(cls)
        if view is None or not _sent(summary, cls):
            continue
        for key, threshold in keys.items():
            q = slo_quantile(key)
            n = _samples(summary, cls, key)
            metric, _, bound, unit = parse_slo_key(key)
            h = view.hists.get("session_duration" if metric == "task_time" else metric)
            if q is None or not n or h is None or unit != "ms":
                continue  # not a quantile, or no samples (inconclusive or not applicable)
            at_most = h.counts_at_most_us([round(threshold * 1000)])[0]
            beyond, share = (n - at_most, 1.0 - q) if bound == "<=" else (at_most, q)
            if not quantile_verdict_settled(n, beyond, share):
                out.append(_label(cls, key))
    return out


def judge(
    agg: Aggregate,
    slos: Mapping[str, Mapping[str, float]],
    window_s: float,
    max_error_ratio: float | None = None,
) -> WindowJudgement:
    """SLO verdicts, values, sample count and goodput of one window.

    Above ``max_error_ratio`` (the run's own limit) a window fails too: a server that sheds
    load with errors keeps the latency of the requests it does serve low.
    """
    summary = agg.summary(window_s or None)
    results = evaluate_slos(agg, slos) if window_s else []
    values = {_label(r.class_name, r.metric): r.observed for r in results}
    counts = [  # a class this load runs no user of has no say in the sample count
        n for cls, ks in slos.items() if _sent(summary, cls) for k in ks
        if (n := _samples(summary, cls, k)) is not None
    ]  # fmt: skip
    ov = summary["overall"]
    samples = min(counts) if counts else int(ov.get("requests", 0)) - int(ov.get("cancelled", 0))
    broken = any(
        clearly_broken(
            {r.metric: r.observed for r in results if r.class_name == cls}, dict(slos[cls])
        )
        for cls in slos
    )
    sess = ov.get("sessions") or {}
    extra = {
        "window_s": round(window_s, 3),
        "request_goodput_ratio": ov.get("request_goodput_ratio"),
        "session_goodput_ratio": sess.get("goodput_ratio"),
        "session_goodput_per_min": sess.get("goodput_per_min"),
        "goodput": ov.get("request_goodput_per_s"),
        "percentiles": {
            m: {p: (ov.get(f"{m}_ms") or {}).get(p) for p in ("p50", "p95", "p99")}
            for m in PERCENTILE_METRICS
        },
        "slo_results": [r.to_json() for r in results],
    }
    errors = ov.get("error_ratio")
    extra["error_ratio"] = errors
    extra["max_error_ratio"] = max_error_ratio
    too_many_errors = (
        max_error_ratio is not None and errors is not None and errors > max_error_ratio
    )
    # An SLO without samples is not judged (measure.slo). Where its class sent requests in
    # the window the step is inconclusive: it cannot count as a pass. A class this load runs
    # no user of (2 users of a 3:1 profile) has nothing to judge there: not applicable.
    unjudged = [r for r in results if not r.judged]
    inconclusive = [
        _label(r.class_name, r.metric) for r in unjudged if _sent(summary, r.class_name)
    ]
    extra["inconclusive"] = inconclusive
    extra["unsettled"] = _unsettled(agg, summary, slos)
    extra["not_applicable"] = [
        _label(r.class_name, r.metric) for r in unjudged if not _sent(summary, r.class_name)
    ]
    met = (
        bool(results) and all(r.passed for r in results) and not too_many_errors
        and not inconclusive
    )  # fmt: skip
    return WindowJudgement(met, values, samples, extra, broken)


def step_verdict(j: WindowJudgement, early: bool = False) -> str:
    """ "pass", "fail", or "inconclusive" (no SLO violated, but one could not be judged)."""
    if j.slo_met:
        return "pass"
    if early or not j.extra.get("inconclusive"):
        return "fail"
    judged_ok = all(r["passed"] for r in j.extra["slo_results"])
    limit = j.extra.get("max_error_ratio")
    errors = j.extra.get("error_ratio")
    return "inconclusive" if judged_ok and not (limit is not None and errors is not None
                                                and errors > limit) else "fail"  # fmt: skip


def _sent(summary: Mapping[str, Any], cls: str) -> bool:
    """Whether class `cls` (OVERALL: any class) sent a request in the window."""
    view = summary["overall"] if cls == OVERALL else (summary.get("by_class") or {}).get(cls)
    return bool((view or {}).get("requests"))


@dataclass
class CapacityDriver:
    """Runs load steps for ``capacity_search``; ``start_step(load, out_dir)`` starts one."""

    slos: dict[str, dict[str, float]]
    out: Path
    warmup_s: float
    window_s: float
    start_step: Callable[[float, Path], subprocess.Popen]
    log: Callable[[str], None] = print
    max_error_ratio: float | None = None  # a window above it fails (the run's --max-error-ratio)
    steps_extra: list[dict[str, Any]] = field(default_factory=list)
    results: list[StepResult] = field(default_factory=list)
    stopped: int | None = None  # the stop signal that ended the search

    def measure(self, load: float) -> StepResult:
        """Run one step at ``load``; judge its window. Raises RuntimeError if the run failed."""
        n = len(self.steps_extra) + 1
        step_out = self.out / "steps" / f"{n:02d}"
        self.log(f"agentload capacity: step {n}: load {load:g} -> {step_out}")
        proc = self.start_step(load, step_out)
        try:
            early, stopped = self._watch(proc, step_out)
        except STOPS as e:
            # The search is stopped: the step's run finishes (its artifacts complete), its
            # window so far is judged and kept, marked stopped; the search ends here.
            self.stopped = stop_signum(e)
            forward_stop([proc], self.stopped)
            self._keep(load, step_out, n, early=False)
            raise
        code = proc.wait()
        if code not in (0, 1, 3) and not stopped:
            raise RuntimeError(f"the step at load {load:g} failed (exit {code}); see {step_out}")
        return self._keep(load, step_out, n, early)

    def _keep(self, load: float, step_out: Path, n: int, early: bool) -> StepResult:
        """Judge a step's window, say what is worth saying, keep its fields; its result."""
        agg, window, _ = window_aggregate(step_out, self.slos, self.warmup_s, self.window_s)
        j = judge(agg, self.slos, window, self.max_error_ratio)
        errors, limit = j.extra["error_ratio"], self.max_error_ratio
        if errors is not None and limit is not None and errors > limit:
            self.log(f"agentload capacity: step {n}: error ratio {errors:.3f} is above "
                     f"--max-error-ratio {limit:g}")  # fmt: skip
        if early:
            j.slo_met = False  # stopped because it was already far past an SLO
        stopped = signal_name(self.stopped) if self.stopped is not None else None
        verdict = "stopped" if stopped else step_verdict(j, early)
        for r in j.extra["slo_results"]:
            if r["observed"] is None:
                if _label(r["class_name"], r["metric"]) not in j.extra["inconclusive"]:
                    why = "not applicable: no request of that class at this load"
                elif verdict == "inconclusive":
                    why = "so the step is inconclusive: a longer --step-duration gives it samples"
                else:
                    why = f"the step is judged {verdict} on the others"
                self.log(f"agentload capacity: step {n}: {r['message']} in the measurement "
                         f"window ({why})")  # fmt: skip
        self.steps_extra.append(
            {"out": str(step_out), "early_stop": early, "stopped_by": stopped,
             "verdict": verdict, **j.extra}
        )  # fmt: skip
        result = StepResult(load, j.slo_met, j.extra["goodput"], j.slo_values, j.samples)
        self.results.append(result)
        return result

    def _watch(self, proc: subprocess.Popen, step_out: Path) -> tuple[bool, bool]:
        """Poll the running step; end it when its window is over, or early when the window
        so far clearly breaks an SLO. Returns (ended early, stopped by us).

        The step's own run time is only a safety bound: Locust's setup takes a few seconds,
        so the window is timed from the step's first request instead.
        """
        while proc.poll() is None:
            time.sleep(POLL_S)
            try:
                agg, window, cutoff = window_aggregate(
                    step_out, self.slos, self.warmup_s, self.window_s
                )
            except (OSError, ValueError):
                continue
            if cutoff is None or time.time() < cutoff + 1.0:
                continue
            if time.time() >= cutoff + self.window_s:
                stop_child(proc, timeout_s=30)
                return False, True
            j = judge(agg, self.slos, window)
            if j.broken and j.samples >= EARLY_STOP_SAMPLES:
                self.log("agentload capacity: the SLOs clearly broke; ending this step early")
                stop_child(proc, timeout_s=30)
                return True, True
        return False, False

    def search(self, spec: SearchSpec) -> dict[str, Any]:
        """The search result with every step's extra fields merged in (capacity.json).

        A stop signal ends the search after the running step finished its run: the result
        then has the steps so far, `stop_reason` "stopped" and `stopped_by`, no capacity.
        """
        try:
            result: CapacityResult = capacity_search(spec, self.measure)
        except STOPS as e:
            if self.stopped is None and not self.results:
                raise  # before the first step ran: nothing measured
            if self.stopped is None:  # between steps: no step to finish
                self.stopped = stop_signum(e)
                ignore_stops()
            result = stopped_result(spec, self.results)
        d = result.to_dict()
        d["stopped_by"] = signal_name(self.stopped) if self.stopped is not None else None
        for step, extra in zip(d["steps"], self.steps_extra, strict=True):
            step.update(extra)
            step["goodput"] = extra["goodput"]
        d["slos"] = self.slos
        d["warmup_s"] = self.warmup_s
        d["step_duration_s"] = self.window_s
        d["goodput_unit"] = "good requests per second of the measurement window"
        return d


def write_outputs(out: Path, result: Mapping[str, Any]) -> str:
    """capacity.json and capacity.html in ``out``; returns the console table."""
    artifacts.write_json(out / "capacity.json", dict(result))
    write_capacity_page(out / "capacity.html", result)
    return capacity_table(result)
