"""SLO evaluation: thresholds per traffic class against a run summary, JUnit XML for CI.

SLOs come per traffic class as a flat dict (from the profile or ``--slo`` flags)::

    {"interactive": {"ttft_p95_ms": 800, "itl_p95_ms": 60, "session_success_ratio": 0.99},
     "background":  {"e2e_p99_ms": 120000},
     "*":           {"error_ratio": 0.01}}          # "*" = the overall view

Keys (``SLO_KEY_HELP``):

- ``<metric>_p<NN>_ms`` / ``<metric>_mean_ms`` / ``<metric>_max_ms`` with metric in
  ttft, ttft_content (time to the first visible content: reasoning excluded), itl, tpot,
  e2e (per request), session_duration (= task_time), worst_ttft (per session) — an upper
  bound in milliseconds.
  ``p999`` means p99.9, ``p9999`` p99.99, ``p99.5`` is accepted as written.
  Session-level metrics: ``task_time`` is a session's wall time from its start to its end,
  think time and tool pauses included (``SessionRecord.duration_ms``; ``session_duration``
  is the same histogram); ``worst_ttft`` is a session's slowest step TTFT
  (``SessionRecord.worst_ttft_ms``).
- ``session_success_ratio``, ``cached_ratio``, ``draft_acceptance_rate``,
  ``goodput_per_min``, ``output_tokens_per_s`` — lower bounds.
- Goodput, lower bounds: ``request_goodput_ratio`` (requests that met every request-level
  SLO of their class / (requests - cancelled)), ``request_goodput_per_s`` (those requests
  per second), ``session_goodput_ratio`` (good sessions / finished sessions; a session is
  good when it completed, every request met the request-level SLOs, and its task time and
  worst TTFT are within the session-level limits, see ``session_meets_slo``).
- ``error_ratio``, ``tool_loop_failure_ratio`` — upper bounds.

A metric with no samples is *not judged* by default: the result says so (``judged`` False,
``status`` "not judged", a JUnit ``<skipped>``) and does not count as a violation, so a short
smoke run does not fail on SLOs it could not see. ``missing="fail"`` (the CLI's
``--require-slo-samples``) makes such an SLO fail instead; ``"pass"`` / ``"skip"`` are kept for
old callers. ``check_slo_overrides`` finds unknown metric names and classes before a run.
An unknown key is refused with the closest known names ("did you mean ...").

This module does not import ``workload.measure.stats``: it reads the plain ``summary()`` dict,
and asks an object with a ``percentile_ms`` method (an ``Aggregate``) for percentiles
the summary does not carry.
"""

from __future__ import annotations

import difflib
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LATENCY_METRICS = (
    "ttft", "ttft_content", "itl", "tpot", "e2e", "session_duration", "task_time", "worst_ttft",
)  # fmt: skip
SESSION_METRICS = ("session_duration", "task_time", "worst_ttft")  # one value per session
SUMMARY_PERCENTILES = (50.0, 90.0, 95.0, 99.0)
OVERALL = "*"

_LATENCY_KEY = re.compile(
    r"^(?P<metric>ttft|ttft_content|itl|tpot|e2e|session_duration|task_time|worst_ttft)"
    r"_(?P<stat>p[0-9]+(?:\.[0-9]+)?|mean|max)_ms$"
)
# SLO metric -> the summary block (and Aggregate histogram) that holds its samples
_HIST_OF = {"task_time": "session_duration"}

# name -> (bound, unit, how to read it from a view summary)
_SCALAR_SLOS: dict[str, tuple[str, str]] = {
    "session_success_ratio": (">=", "ratio"),
    "cached_ratio": (">=", "ratio"),
    "draft_acceptance_rate": (">=", "ratio"),
    "goodput_per_min": (">=", "per_min"),
    "output_tokens_per_s": (">=", "tokens_per_s"),
    "error_ratio": ("<=", "ratio"),
    "tool_loop_failure_ratio": ("<=", "ratio"),
    "request_goodput_ratio": (">=", "ratio"),
    "request_goodput_per_s": (">=", "per_s"),
    "session_goodput_ratio": (">=", "ratio"),
}

MISSING_MODES = ("not_judged", "fail", "pass", "skip")

SLO_KEY_HELP = (
    "<ttft|ttft_content|itl|tpot|e2e|session_duration|task_time|worst_ttft>_<pNN|mean|max>_ms, "
    + ", ".join(sorted(_SCALAR_SLOS))
)
# Names people type, for "did you mean": every scalar key and the common latency keys.
_KNOWN_KEYS = sorted(_SCALAR_SLOS) + [
    f"{m}_{s}_ms" for m in LATENCY_METRICS for s in ("p50", "p95", "p99", "mean", "max")
]
_ALIASES = {
    "goodput_ratio": ["request_goodput_ratio", "session_goodput_ratio"],
    "goodput": ["request_goodput_ratio", "session_goodput_ratio", "goodput_per_min"],
    "task_time_ms": ["task_time_p95_ms", "task_time_max_ms"],
    "worst_ttft_ms": ["worst_ttft_p95_ms", "worst_ttft_max_ms"],
}


def did_you_mean(key: str) -> list[str]:
    """Known SLO keys close to an unknown one (empty when nothing is close)."""
    if key in _ALIASES:
        return list(_ALIASES[key])
    return difflib.get_close_matches(key, _KNOWN_KEYS, n=3, cutoff=0.6)


@dataclass(slots=True)
class SLOResult:
    """One SLO checked for one class. ``observed`` is None when there were no samples."""

    class_name: str
    metric: str
    threshold: float
    observed: float | None
    passed: bool
    unit: str
    bound: str = "<="  # "<=" (upper bound) or ">=" (lower bound)
    skipped: bool = False
    message: str = ""
    judged: bool = True  # False: no samples, so the SLO was neither met nor violated

    @property
    def status(self) -> str:
        """ "met", "violated" or "not judged" (no samples)."""
        if not self.judged:
            return "not judged"
        return "met" if self.passed else "violated"

    def to_json(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["status"] = self.status
        return out


def parse_percentile(stat: str) -> float:
    """'p95' -> 95.0, 'p999' -> 99.9, 'p99.5' -> 99.5, 'p5' -> 5.0."""
    digits = stat[1:]
    if "." in digits:
        return float(digits)
    if len(digits) <= 2:
        return float(digits)
    return float(digits[:2] + "." + digits[2:])


def parse_slo_key(key: str) -> tuple[str, str | None, str, str]:
    """Split an SLO key into (metric, stat, bound, unit); raises ValueError if unknown."""
    m = _LATENCY_KEY.match(key)
    if m:
        stat = m.group("stat")
        if stat.startswith("p"):
            p = parse_percentile(stat)
            if not 0.0 < p <= 100.0:
                raise ValueError(f"SLO {key!r}: percentile must be in (0, 100]")
        return m.group("metric"), stat, "<=", "ms"
    if key in _SCALAR_SLOS:
        bound, unit = _SCALAR_SLOS[key]
        return key, None, bound, unit
    close = did_you_mean(key)
    if close:
        raise ValueError(f"unknown SLO {key!r}; did you mean {' or '.join(close)}?")
    raise ValueError(f"unknown SLO {key!r}; expected one of: {SLO_KEY_HELP}")


def validate_slos(slos_by_class: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Problems with an SLO mapping (unknown keys, non-numeric thresholds); empty when valid."""
    problems = []
    for cls, slos in slos_by_class.items():
        for key, threshold in (slos or {}).items():
            try:
                parse_slo_key(key)
            except ValueError as e:
                problems.append(f"slo for class {cls!r}: {e}")
                continue
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
                problems.append(f"slo {cls}.{key}: threshold must be a number, got {threshold!r}")
            elif not math.isfinite(threshold) or threshold < 0:
                problems.append(f"slo {cls}.{key}: threshold must be finite and >= 0")
    return problems


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_slo_overrides(
    overrides: Mapping[str, Mapping[str, Any]], classes: Iterable[str]
) -> list[str]:
    """Problems with ``--slo`` overrides before any traffic: one line each, empty when fine.

    ``overrides`` is ``{class or "*": {metric: threshold}}`` (``parse_slo_overrides``);
    ``classes`` the profile's traffic classes. Unknown classes and metric names get a
    "did you mean"; thresholds must be finite numbers >= 0.
    """
    known = list(classes)
    problems: list[str] = []
    for cls, slos in overrides.items():
        if cls != OVERALL and cls not in known:
            problems.append(
                f"--slo {cls}.*: unknown class {cls!r}{_did_you_mean(cls, known)}"
                f" (classes: {', '.join(known) or 'none'}; no prefix = overall)"
            )
            continue
        where = "" if cls == OVERALL else f"{cls}."
        for key, threshold in (slos or {}).items():
            try:
                parse_slo_key(key)
            except ValueError:
                close = did_you_mean(key)
                close = close if key in _ALIASES else close[:1]
                hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
                problems.append(
                    f"--slo {where}{key}: unknown SLO metric {key!r}{hint} (allowed: {SLO_KEY_HELP})"
                )
                continue
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
                problems.append(f"--slo {where}{key}: threshold must be a number")
            elif not math.isfinite(threshold) or threshold < 0:
                problems.append(f"--slo {where}{key}: threshold must be finite and >= 0")
    return problems


def _view(summary: Mapping[str, Any], class_name: str) -> Mapping[str, Any] | None:
    if class_name == OVERALL:
        return summary.get("overall")
    return (summary.get("by_class") or {}).get(class_name)


def _observe(
    source: Any, summary: Mapping[str, Any], class_name: str, key: str
) -> tuple[float | None, int]:
    """The observed value of one SLO key for one class, and its sample count."""
    metric, stat, _, _ = parse_slo_key(key)
    view = _view(summary, class_name)
    if view is None:
        return None, 0
    if stat is not None:
        metric = _HIST_OF.get(metric, metric)
        block = view.get(f"{metric}_ms")
        if not block or not block.get("count"):
            return None, 0
        n = int(block["count"])
        if stat in ("mean", "max"):
            return block.get(stat), n
        p = parse_percentile(stat)
        label = _pct_label(p)
        if label in block:
            return block[label], n
        if hasattr(source, "percentile_ms"):
            cls = None if class_name == OVERALL else class_name
            return source.percentile_ms(metric, p, class_name=cls), n
        raise ValueError(
            f"SLO {key!r} needs a percentile the summary lacks; pass the Aggregate instead"
        )
    sessions = view.get("sessions") or {}
    spec = view.get("spec_decode") or {}
    if key == "session_success_ratio":
        return sessions.get("success_ratio"), int(sessions.get("finished", 0))
    if key == "tool_loop_failure_ratio":
        return sessions.get("tool_loop_failure_ratio"), int(sessions.get("finished", 0))
    if key == "goodput_per_min":
        return sessions.get("goodput_per_min"), int(sessions.get("finished", 0))
    if key == "session_goodput_ratio":
        return sessions.get("goodput_ratio"), int(sessions.get("finished", 0))
    if key in ("request_goodput_ratio", "request_goodput_per_s"):
        return view.get(key), int(view.get("requests", 0)) - int(view.get("cancelled", 0))
    if key == "cached_ratio":
        return view.get("cached_ratio"), int(view.get("cached_reported", 0))
    if key == "draft_acceptance_rate":
        return spec.get("draft_acceptance_rate"), int(spec.get("requests_with_stats", 0))
    if key == "output_tokens_per_s":
        return (view.get("throughput") or {}).get("output_tokens_per_s"), int(view.get("ok", 0))
    if key == "error_ratio":
        return view.get("error_ratio"), int(view.get("requests", 0)) - int(view.get("cancelled", 0))
    raise AssertionError(key)  # parse_slo_key rejected everything else


def _pct_label(p: float) -> str:
    return f"p{p:g}".replace(".", "_")


def _shown_unit(unit: str) -> str:
    """The unit as a reader writes it after a value: " ms", "/min", "/s"; none for a ratio
    (the key already says so: "session_success_ratio = 1 ratio" read as jargon)."""
    return {"ratio": "", "per_min": "/min", "per_s": "/s"}.get(unit, f" {unit}")


def evaluate_slos(
    aggregate_or_summary: Any,
    slos_by_class: Mapping[str, Mapping[str, Any]],
    *,
    missing: str = "not_judged",
) -> list[SLOResult]:
    """Check every SLO of every class; one result per (class, SLO), in input order.

    ``aggregate_or_summary``: an ``Aggregate`` (anything with ``summary()``) or its summary dict.
    ``missing``: what a metric without samples does — "not_judged" (default: reported as not
    judged, skipped in JUnit, not a violation), "fail" (a violation), "pass" or "skip".
    Raises ValueError for unknown SLO keys (bad input: the CLI maps it to exit 2).
    """
    if missing not in MISSING_MODES:
        raise ValueError(f"missing must be {'|'.join(MISSING_MODES)}, got {missing!r}")
    problems = validate_slos(slos_by_class)
    if problems:
        raise ValueError("; ".join(problems))
    source = aggregate_or_summary
    summary = source.summary() if hasattr(source, "summary") else source
    results = []
    for cls, slos in slos_by_class.items():
        for key, threshold in (slos or {}).items():
            _, _, bound, unit = parse_slo_key(key)
            observed, n = _observe(source, summary, cls, key)
            label = "overall" if cls == OVERALL else cls
            if observed is None:
                results.append(
                    SLOResult(
                        cls,
                        key,
                        float(threshold),
                        None,
                        passed=missing != "fail",
                        unit=unit,
                        bound=bound,
                        skipped=missing in ("skip", "not_judged"),
                        message=(
                            f"{label}: {key} not judged (no samples)"
                            if missing == "not_judged"
                            else f"{label}: {key} has no samples"
                        ),
                        judged=False,
                    )
                )
                continue
            ok = observed <= threshold if bound == "<=" else observed >= threshold
            verdict = "met" if ok else "VIOLATED"
            results.append(
                SLOResult(
                    cls,
                    key,
                    float(threshold),
                    float(observed),
                    passed=bool(ok),
                    unit=unit,
                    bound=bound,
                    message=(
                        f"{label}: {key} = {_fmt(observed)}{_shown_unit(unit)} "
                        f"(need {bound} {_fmt(threshold)}, n={n}) {verdict}"
                    ),
                )
            )
    return results


def _fmt(x: float) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def error_ratio(summary: Mapping[str, Any], class_name: str | None = None) -> float | None:
    """errors / (requests - cancelled) for the overall view or one class; None without requests."""
    view = _view(summary, OVERALL if class_name is None else class_name)
    if not view:
        return None
    return view.get("error_ratio")


def junit_xml(results: Iterable[SLOResult], suite_name: str = "agentload.slo") -> str:
    """A JUnit XML document: one testcase per SLO per class, failures carry the message."""
    results = list(results)
    failures = sum(1 for r in results if not r.passed)
    skipped = sum(1 for r in results if r.skipped)
    suites = ET.Element("testsuites", name=suite_name)
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=suite_name,
        tests=str(len(results)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    for r in results:
        cls = "overall" if r.class_name == OVERALL else r.class_name
        case = ET.SubElement(
            suite, "testcase", classname=f"{suite_name}.{cls}", name=r.metric, time="0"
        )
        if r.skipped:
            ET.SubElement(case, "skipped", message=r.message)
        elif not r.passed:
            fail = ET.SubElement(case, "failure", message=r.message, type="SLOViolation")
            fail.text = r.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = r.message
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


# ---------------------------------------------------------------- per-request checks (goodput)


def _nearest_rank(sorted_values: list[float], p: float) -> float:
    k = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[min(k, len(sorted_values)) - 1]


def request_thresholds(slo: Mapping[str, Any] | None) -> dict[str, Any]:
    """Per-request limits implied by a class's latency SLOs (see ``request_meets_slo``)."""
    limits: dict[str, Any] = {"itl": []}
    for key, threshold in (slo or {}).items():
        m = _LATENCY_KEY.match(key)
        if not m or m.group("metric") in SESSION_METRICS:
            continue
        metric, stat = m.group("metric"), m.group("stat")
        if stat == "mean":
            continue  # a mean bounds the population, not each request
        if metric == "itl":
            limits["itl"].append((100.0 if stat == "max" else parse_percentile(stat), threshold))
        else:
            limits[metric] = max(limits.get(metric, threshold), threshold)
    return limits


def request_meets_slo(
    rec: Any, slo: Mapping[str, Any] | None, limits: dict[str, Any] | None = None
) -> bool:
    """Whether one request met its class's latency SLOs, read per request.

    Definition (used for goodput): the request succeeded, and
    - ttft / ttft_content / tpot / e2e: its value is <= the most lenient threshold set for that metric
      across the ``_pNN_ms`` / ``_max_ms`` keys (a tail bound every good request must meet);
    - itl: for each ``itl_pNN_ms`` key, the request's own pNN gap (nearest rank over
      ``itl_gaps_ms``; without gaps, ``itl_ms["pNN"]`` or else ``itl_ms["p99"]``) is <= it.
    ``_mean_ms`` keys are not checked per request. A missing value cannot violate.
    """
    if rec.status != "ok":
        return False
    limits = request_thresholds(slo) if limits is None else limits
    for metric in ("ttft", "ttft_content", "tpot", "e2e"):
        limit = limits.get(metric)
        value = getattr(rec, f"{metric}_ms", None)
        if limit is not None and value is not None and value > limit:
            return False
    if limits["itl"]:
        gaps = sorted(rec.itl_gaps_ms) if rec.itl_gaps_ms else None
        for p, limit in limits["itl"]:
            if gaps:
                value = _nearest_rank(gaps, p)
            elif rec.itl_ms:
                value = rec.itl_ms.get(f"p{p:g}", rec.itl_ms.get("p99"))
            else:
                value = None
            if value is not None and value > limit:
                return False
    return True


def session_thresholds(slo: Mapping[str, Any] | None) -> dict[str, float]:
    """Per-session limits implied by a class's session-level SLOs (see ``session_meets_slo``)."""
    limits: dict[str, float] = {}
    for key, threshold in (slo or {}).items():
        m = _LATENCY_KEY.match(key)
        if not m or m.group("metric") not in SESSION_METRICS or m.group("stat") == "mean":
            continue
        metric = "task_time" if m.group("metric") == "session_duration" else m.group("metric")
        limits[metric] = max(limits.get(metric, threshold), threshold)
    return limits


def session_meets_slo(rec: Any, limits: Mapping[str, float]) -> bool:
    """Whether one session met its class's session-level limits (``session_thresholds``).

    Definition: its task time (``duration_ms``: start to end, think time and tool pauses
    included) and its worst step TTFT (``worst_ttft_ms``) are each <= the most lenient
    threshold set for that metric across its ``_pNN_ms`` / ``_max_ms`` keys. A missing value
    cannot violate. Completion and the per-request SLOs are checked by the caller.
    """
    task = limits.get("task_time")
    if task is not None and rec.duration_ms is not None and rec.duration_ms > task:
        return False
    worst = limits.get("worst_ttft")
    value = getattr(rec, "worst_ttft_ms", None)
    return not (worst is not None and value is not None and value > worst)
