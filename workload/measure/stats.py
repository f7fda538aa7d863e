"""Mergeable run statistics: overall, per traffic class and per (class, session step).

Exact under merge: every counter is an integer, latency sums are integer microseconds,
fractional spec-decode sums are integer micro-units, and histograms are HDR histograms
(3 significant digits, integer microseconds: sub-ms precision holds) whose bucket counts
add exactly. Merging any partition of the records in any order gives the same
``to_dict()`` as aggregating them in one process.

Definitions (also in docs/metrics.md):

- Latency histograms (TTFT, ITL per gap from ``itl_gaps_ms``, TPOT, E2E) hold successful
  requests only; ``session_duration`` holds every session (overall and class views only).
  A percentile is HDR's highest-equivalent value of the bucket (<= 0.1 % above the true
  order statistic), capped at the exact maximum; means, min and max are exact.
- ``error_ratio`` = errors / (requests - cancelled). Cancelled requests (user stopped)
  are neither ok nor errors. ``tool_loop_failures`` counts requests whose
  ``tool_loop_failure`` is set (ok at the HTTP level or not); ``sessions.tool_loop_failure`` counts session outcomes.
- Tool calls, kept apart: ``tool_calls_planned`` = ok requests whose session plan has the
  step end in a tool call (``planned_tool``; in scripted history, the default, these are the
  synthesized calls the run stands for); ``tool_calls_returned`` (= ``tool_calls``, the older
  name, unchanged) = tool calls the server returned, summed over requests. Scripted runs
  return none unless the server volunteers them; in actual history planned - returned hints
  at missing calls (the tool-loop failures say which).
- ``cached_ratio`` = Σcached / Σprompt over requests that reported cached tokens.
- Request goodput: a request is *good* when it succeeded and met every request-level SLO
  of its class (``slo.request_meets_slo``; without SLOs: when it succeeded);
  ``good_requests`` counts them (an integer counter: it merges exactly),
  ``request_goodput_ratio`` = good_requests / (requests - cancelled),
  ``request_goodput_per_s`` = good_requests per second of run time. Overall, per class and
  per step.
- Sessions: ``finished`` = all outcomes but cancelled; ``success_ratio`` =
  completed / finished. A session is *good* when it completed, every one of its
  requests met the class's per-request latency SLOs (``slo.request_meets_slo``) and it met
  the session-level limits (task time, worst step TTFT: ``slo.session_meets_slo``);
  ``goodput_ratio`` = good / finished, ``goodput_per_min`` = good sessions per minute of
  run time. Without SLOs for a class, good = completed. ``worst_ttft_ms`` is the histogram
  of each session's slowest step TTFT (overall and class views).
- Spec decode (vLLM ``metrics.speculative_decoding``), with a = num_accepted_draft_tokens,
  s = num_spec_steps, L = a request's mean acceptance length ((a+s)/s when a and s are
  reported, else the reported ``mean_acceptance_length``):
  request-weighted mean = mean of L over requests with stats;
  token-weighted mean = Σ (a+s)·L / Σ (a+s) — every token emitted by a spec-decode step
  weighs the same;
  pooled = 1 + Σa / Σs — per spec step, the formula vLLM's /metrics counters give;
  draft_acceptance_rate = Σa / Σ num_draft_tokens; ``acceptance_histogram`` is the
  elementwise sum of the per-request [k+1] vectors (shorter ones padded with zeros);
  ``accepted_per_position[j]`` = Σ_{i>j} histogram[i] (steps accepting at least j+1
  drafts, comparable with ``vllm:spec_decode_num_accepted_tokens_per_pos_total``);
  share_without_stats = ok requests without spec stats / ok requests.

Parts: ``measure.histogram`` (the HDR latency histogram), ``measure.specdecode`` (the
spec-decode sums). Over-time series are not kept here: ``measure.series.time_series()``
derives them from requests.jsonl rows after the run, so the aggregate stays small and exactly
mergeable. Console and web-UI text from a summary is ``report.console``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from workload.measure.histogram import REQUEST_MAX_US, SESSION_MAX_US, LatencyHistogram
from workload.measure.records import SESSION_OUTCOMES, RequestRecord, SessionRecord
from workload.measure.slo import (
    request_meets_slo,
    request_thresholds,
    session_meets_slo,
    session_thresholds,
)
from workload.measure.specdecode import SpecDecodeStats

SCHEMA = "agentload.stats/1"
REQUEST_METRICS = ("ttft", "itl", "tpot", "e2e")


_COUNTERS = (
    "requests",
    "ok",
    "errors",
    "cancelled",
    "good_requests",  # ok and met every request-level SLO of its class (goodput)
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cached_prompt_tokens",  # Σ prompt tokens of requests that reported cached tokens
    "cached_reported",
    "tool_calls",  # server-returned tool calls (Σ len(record.tool_calls)); also tool_calls_returned
    "tool_calls_planned",  # ok requests whose plan has the step end in a tool call
    "tool_loop_failures",
    # reasoning (workload.plan.shapes): Σ reasoning tokens the server reported, ok requests
    # that streamed reasoning chunks, Σ reasoning tokens the plan asked for
    "reasoning_tokens",
    "reasoning_requests",
    "reasoning_requested",
)


class View:
    """Everything counted for one slice of the traffic (overall, a class, or a step)."""

    __slots__ = ("counters", "errors_by_kind", "hists", "sessions", "spec")

    def __init__(self) -> None:
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.errors_by_kind: dict[str, int] = {}
        self.hists: dict[str, LatencyHistogram] = {}
        self.sessions: dict[str, int] = {}  # outcome -> n, plus "good"
        self.spec = SpecDecodeStats()

    def hist(self, name: str) -> LatencyHistogram:
        h = self.hists.get(name)
        if h is None:
            h = self.hists[name] = LatencyHistogram(
                SESSION_MAX_US if name == "session_duration" else REQUEST_MAX_US
            )
        return h

    def add_request(self, rec: RequestRecord, good: bool | None = None) -> None:
        c = self.counters
        c["requests"] += 1
        if rec.status == "ok":
            c["ok"] += 1
            c["good_requests"] += 1 if good is None or good else 0
            for metric in ("ttft", "ttft_content", "tpot", "e2e"):
                value = getattr(rec, f"{metric}_ms")
                if value is not None:
                    self.hist(metric).record_ms(value)
            if rec.itl_gaps_ms:
                self.hist("itl").record_many_ms(rec.itl_gaps_ms)
            self.spec.add(rec.spec_decode)
            c["reasoning_requests"] += 1 if rec.reasoning_chunks else 0
        elif rec.status == "cancelled":
            c["cancelled"] += 1
        else:
            c["errors"] += 1
            kind = rec.error_kind or "unknown"
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
        c["prompt_tokens"] += rec.prompt_tokens or 0
        c["completion_tokens"] += rec.completion_tokens or 0
        c["reasoning_tokens"] += rec.reasoning_tokens or 0
        c["reasoning_requested"] += rec.reasoning_requested or 0
        if rec.cached_tokens is not None:
            c["cached_tokens"] += rec.cached_tokens
            c["cached_prompt_tokens"] += rec.prompt_tokens or 0
            c["cached_reported"] += 1
        c["tool_calls"] += len(rec.tool_calls)
        if rec.planned_tool and rec.status == "ok":
            c["tool_calls_planned"] += 1
        if rec.tool_loop_failure or rec.error_kind == "tool_loop":
            c["tool_loop_failures"] += 1

    def add_session(self, rec: SessionRecord, good: bool) -> None:
        self.sessions[rec.outcome] = self.sessions.get(rec.outcome, 0) + 1
        if good:
            self.sessions["good"] = self.sessions.get("good", 0) + 1
        self.hist("session_duration").record_ms(rec.duration_ms)
        if rec.worst_ttft_ms is not None:
            self.hist("worst_ttft").record_ms(rec.worst_ttft_ms)

    def merge(self, other: View) -> None:
        for k, v in other.counters.items():
            self.counters[k] = self.counters.get(k, 0) + v
        for mine, theirs in (
            (self.errors_by_kind, other.errors_by_kind),
            (self.sessions, other.sessions),
        ):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        for name, h in other.hists.items():
            self.hist(name).merge(h)
        self.spec.merge(other.spec)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "errors_by_kind": dict(sorted(self.errors_by_kind.items())),
            "sessions": dict(sorted(self.sessions.items())),
            "hists": {k: self.hists[k].to_dict() for k in sorted(self.hists)},
            "spec": self.spec.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> View:
        v = cls()
        v.counters.update({k: int(x) for k, x in d["counters"].items()})
        v.errors_by_kind = {k: int(x) for k, x in d["errors_by_kind"].items()}
        v.sessions = {k: int(x) for k, x in d["sessions"].items()}
        v.hists = {k: LatencyHistogram.from_dict(h) for k, h in d["hists"].items()}
        v.spec = SpecDecodeStats.from_dict(d["spec"])
        return v

    def summary(self, duration_s: float | None, with_sessions: bool) -> dict[str, Any]:
        c = self.counters
        attempted = c["requests"] - c["cancelled"]
        out: dict[str, Any] = dict(c)
        out["tool_calls_returned"] = c["tool_calls"]
        out["error_ratio"] = c["errors"] / attempted if attempted else None
        out["request_goodput_ratio"] = c["good_requests"] / attempted if attempted else None
        out["errors_by_kind"] = dict(sorted(self.errors_by_kind.items()))
        out["cached_ratio"] = (
            c["cached_tokens"] / c["cached_prompt_tokens"] if c["cached_prompt_tokens"] else None
        )
        empty = LatencyHistogram().summary()
        for metric in REQUEST_METRICS:
            h = self.hists.get(metric)
            out[f"{metric}_ms"] = h.summary() if h else dict(empty)
        # time to first visible content (reasoning excluded; ttft_ms counts it)
        h = self.hists.get("ttft_content")
        out["ttft_content_ms"] = h.summary() if h else dict(empty)
        per_s = duration_s if duration_s and duration_s > 0 else None
        out["throughput"] = {
            "requests_per_s": c["ok"] / per_s if per_s else None,
            "output_tokens_per_s": c["completion_tokens"] / per_s if per_s else None,
        }
        out["request_goodput_per_s"] = c["good_requests"] / per_s if per_s else None
        out["spec_decode"] = self.spec.summary()
        if with_sessions:
            h = self.hists.get("session_duration")
            out["session_duration_ms"] = h.summary() if h else dict(empty)
            h = self.hists.get("worst_ttft")
            out["worst_ttft_ms"] = h.summary() if h else dict(empty)
            out["sessions"] = self._session_summary(duration_s)
        return out

    def _session_summary(self, duration_s: float | None) -> dict[str, Any]:
        s = {o: self.sessions.get(o, 0) for o in SESSION_OUTCOMES}
        total = sum(s.values())
        finished = total - s["cancelled"]
        good = self.sessions.get("good", 0)
        return {
            **s,
            "total": total,
            "finished": finished,
            "good": good,
            "success_ratio": s["completed"] / finished if finished else None,
            "tool_loop_failure_ratio": s["tool_loop_failure"] / finished if finished else None,
            "goodput_ratio": good / finished if finished else None,
            "goodput_per_min": good / (duration_s / 60.0) if duration_s else None,
        }


class Aggregate:
    """Run statistics for the overall traffic, each class and each (class, step); mergeable.

    With ``slos_by_class`` the aggregate tracks, per open session, whether every request so
    far met the class's per-request SLOs, and counts the session as good on ``add_session``.
    That per-session state is local to the process that sees the session's requests
    (sessions never span workers); it is neither serialised nor merged.
    """

    def __init__(self, slos_by_class: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.slos_by_class = dict(slos_by_class or {})
        self._limits = {cls: request_thresholds(slo) for cls, slo in self.slos_by_class.items()}
        self._session_limits = {
            cls: session_thresholds(slo) for cls, slo in self.slos_by_class.items()
        }
        self.overall = View()
        self.classes: dict[str, View] = {}
        self.steps: dict[tuple[str, int], View] = {}
        self.t_first: float | None = None  # earliest request start, unix seconds
        self.t_last: float | None = None  # latest request end, unix seconds
        self._session_ok: dict[str, bool] = {}

    def _class(self, name: str) -> View:
        v = self.classes.get(name)
        if v is None:
            v = self.classes[name] = View()
        return v

    def _step(self, name: str, step: int) -> View:
        v = self.steps.get((name, step))
        if v is None:
            v = self.steps[(name, step)] = View()
        return v

    def add_request(self, rec: RequestRecord) -> bool:
        """Count one request attempt in the overall, class and step views.

        Returns whether it met its class's request-level SLOs (its goodput verdict).
        """
        limits = self._limits.get(rec.user_class)
        met = request_meets_slo(rec, None, limits) if limits else rec.status == "ok"
        self.overall.add_request(rec, met)
        self._class(rec.user_class).add_request(rec, met)
        self._step(rec.user_class, rec.step).add_request(rec, met)
        if rec.t_start:
            end = rec.t_start + (rec.e2e_ms or 0.0) / 1000.0
            self.t_first = rec.t_start if self.t_first is None else min(self.t_first, rec.t_start)
            self.t_last = end if self.t_last is None else max(self.t_last, end)
        if rec.session_id:
            self._session_ok[rec.session_id] = self._session_ok.get(rec.session_id, True) and met
        return met

    def add_session(self, rec: SessionRecord, good: bool | None = None) -> bool:
        """Count a finished session; ``good`` overrides the tracked per-request SLO verdict.

        Returns whether the session was good (its goodput verdict).
        """
        tracked = self._session_ok.pop(rec.session_id, True)
        if good is None:
            limits = self._session_limits.get(rec.user_class)
            good = (
                rec.outcome == "completed"
                and tracked
                and (not limits or session_meets_slo(rec, limits))
            )
        self.overall.add_session(rec, good)
        self._class(rec.user_class).add_session(rec, good)
        return good

    def merge(self, other: Aggregate) -> None:
        """Add another aggregate's counts into this one (associative and commutative)."""
        self.overall.merge(other.overall)
        for name, v in other.classes.items():
            self._class(name).merge(v)
        for (name, step), v in other.steps.items():
            self._step(name, step).merge(v)
        if other.t_first is not None:
            self.t_first = (
                other.t_first if self.t_first is None else min(self.t_first, other.t_first)
            )
        if other.t_last is not None:
            self.t_last = other.t_last if self.t_last is None else max(self.t_last, other.t_last)

    def drain(self) -> Aggregate:
        """Hand over everything counted so far and start empty (worker -> master deltas).

        Open sessions' SLO state stays here, so a session whose requests straddle two
        reports is still judged on all of them.
        """
        out = Aggregate(self.slos_by_class)
        out.overall, out.classes, out.steps = self.overall, self.classes, self.steps
        out.t_first, out.t_last = self.t_first, self.t_last
        self.overall, self.classes, self.steps = View(), {}, {}
        self.t_first = self.t_last = None
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; ``from_dict(to_dict())`` merges and summarises identically."""
        steps: dict[str, dict[str, Any]] = {}
        for name, step in sorted(self.steps):
            steps.setdefault(name, {})[str(step)] = self.steps[(name, step)].to_dict()
        return {
            "schema": SCHEMA,
            "t_first": self.t_first,
            "t_last": self.t_last,
            "overall": self.overall.to_dict(),
            "classes": {k: self.classes[k].to_dict() for k in sorted(self.classes)},
            "steps": steps,
        }

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], slos_by_class: Mapping[str, Mapping[str, Any]] | None = None
    ) -> Aggregate:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not an agentload stats object (schema {d.get('schema')!r})")
        agg = cls(slos_by_class)
        agg.t_first, agg.t_last = d["t_first"], d["t_last"]
        agg.overall = View.from_dict(d["overall"])
        agg.classes = {k: View.from_dict(v) for k, v in d["classes"].items()}
        agg.steps = {
            (name, int(step)): View.from_dict(v)
            for name, by_step in d["steps"].items()
            for step, v in by_step.items()
        }
        return agg

    def duration_s(self) -> float | None:
        """Span from the first request start to the last request end."""
        if self.t_first is None or self.t_last is None:
            return None
        return max(0.0, self.t_last - self.t_first)

    def percentile_ms(
        self, metric: str, pct: float, class_name: str | None = None, step: int | None = None
    ) -> float | None:
        """Any percentile of ttft/itl/tpot/e2e/session_duration for a view; None if empty."""
        if class_name is None:
            view: View | None = self.overall
        elif step is None:
            view = self.classes.get(class_name)
        else:
            view = self.steps.get((class_name, step))
        h = view.hists.get(metric) if view else None
        return h.percentile_ms(pct) if h else None

    def summary(self, duration_s: float | None = None) -> dict[str, Any]:
        """Plain numbers for console, run.json, web UI and compare (shape in docs/internals.md)."""
        duration = duration_s if duration_s is not None else self.duration_s()
        by_step: dict[str, dict[str, Any]] = {}
        for name, step in sorted(self.steps):
            by_step.setdefault(name, {})[str(step)] = self.steps[(name, step)].summary(
                duration, with_sessions=False
            )
        return {
            "schema": SCHEMA,
            "duration_s": duration,
            "overall": self.overall.summary(duration, with_sessions=True),
            "by_class": {
                k: self.classes[k].summary(duration, with_sessions=True)
                for k in sorted(self.classes)
            },
            "by_step": by_step,
        }


def session_goodput(
    session: SessionRecord, requests: Iterable[RequestRecord], slo: Mapping[str, Any] | None
) -> bool:
    """Whether a session is good: completed, each request met the class's latency SLOs, and
    the session met the session-level ones (task time, worst step TTFT)."""
    if session.outcome != "completed" or not session_meets_slo(session, session_thresholds(slo)):
        return False
    limits = request_thresholds(slo)
    return all(request_meets_slo(r, None, limits) for r in requests)
