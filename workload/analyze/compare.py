"""A/B comparison of two run directories, with uncertainty and a verdict.

Method (README "Canary: compare two deployments"):

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
  (README, canary section, "Verdict quality"). When the runs pair, the percentile rows
  (p50/p95/p99) are shown with their intervals and verdicts but do not gate
  unless a flag names them (`--threshold ttft_p95=10`); when the runs do not
  pair (different seed or profile) there is no shift, and the percentiles with
  a threshold gate as before. With paired runs, `itl_shift`,
  `output_throughput`, `cached_ratio` and `completed_sessions` are likewise
  shown but gate only when named (PAIRED_REPORT_ONLY: two instances of the same
  server differ on them by more than their within-run intervals).
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
  `confidence`.
  The T/2 floor keeps tiny systematic differences (two servers are never
  bit-identical) from being called regressions on long runs; with a run long
  enough that the standard error of the change is ≤ T/4.3, a true change of T
  is flagged with ≥ 90 % probability.
* Overall: worse if any gated metric is worse, else better if any is better,
  else no detectable change. Exit code 3 on worse, else 0.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as _sps

from workload.measure.artifacts import iter_jsonl, read_json

VERDICT_WORSE = "worse"
VERDICT_BETTER = "better"
VERDICT_SAME = "no detectable change"
VERDICT_NODATA = "insufficient data"

EXIT_PASS = 0
EXIT_REGRESSION = 3

LATENCIES = ("ttft", "itl", "tpot", "e2e")
QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}

# Thresholds in percent (relative) or percentage points (ratios); a metric
# without a threshold is reported but does not gate.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "ttft_shift": 10.0,
    "itl_shift": 10.0,
    "e2e_shift": 10.0,
    "ttft_p95": 10.0,
    "itl_p95": 10.0,
    "e2e_p95": 10.0,
    "error_ratio": 1.0,
    "tool_loop_failure_ratio": 1.0,
    "session_success_ratio": 2.0,
    "output_throughput": 5.0,
    "cached_ratio": 5.0,
    "completed_sessions": 10.0,
}

# Profile `compare:` field names (workload.plan.profile.CompareThresholds) -> metric names.
_PROFILE_NAMES = {
    "ttft_p95_pct": "ttft_p95",
    "itl_p95_pct": "itl_p95",
    "e2e_p95_pct": "e2e_p95",
    "throughput_pct": "output_throughput",
    "session_success_pp": "session_success_ratio",
    "cached_ratio_pp": "cached_ratio",
}

# With paired runs these are shown (with threshold and verdict) but gate only when a
# --threshold flag names them: between two instances of the same server on the same
# traffic they differ by more than any within-run interval allows (README, canary section
# "Verdict quality": per-request ITL shifts of ~10 %, and throughput -23 % / -42 %,
# completed sessions -26 % / -42 % and cached-ratio drops when one instance falls into a
# KV preemption cascade). A slower server still shows in the gated ttft/e2e shifts.
# Unpaired runs gate them as before.
PAIRED_REPORT_ONLY = frozenset(
    {"itl_shift", "output_throughput", "cached_ratio", "completed_sessions"}
)

# A profile's percentile threshold also sets the paired shift's (the shift is what gates
# when runs pair, so a profile's "10 % TTFT" must reach it).
_SHIFT_OF = {f"{lat}_p95": f"{lat}_shift" for lat in ("ttft", "itl", "e2e")}


@dataclass(frozen=True)
class MetricDef:
    """How one metric is computed and judged."""

    name: str
    kind: str  # quantile | shift | ratio | mean | count
    change: str  # relative | absolute
    higher_is_worse: bool
    unit: str


def _metric_defs() -> dict[str, MetricDef]:
    defs = {}
    for lat in LATENCIES:
        for qn in QUANTILES:
            n = f"{lat}_{qn}"
            defs[n] = MetricDef(n, "quantile", "relative", True, "ms")
    for lat in ("ttft", "itl", "e2e"):
        n = f"{lat}_shift"
        defs[n] = MetricDef(n, "shift", "relative", True, "ms")
    for n, worse in (
        ("error_ratio", True),
        ("tool_loop_failure_ratio", True),
        ("session_success_ratio", False),
        ("cached_ratio", False),
        ("spec_acceptance_rate", False),
    ):
        defs[n] = MetricDef(n, "ratio", "absolute", worse, "ratio")
    defs["spec_acceptance_length"] = MetricDef(
        "spec_acceptance_length", "mean", "relative", False, "tokens"
    )
    defs["output_throughput"] = MetricDef("output_throughput", "sum", "relative", False, "tok/s")
    defs["completed_sessions"] = MetricDef("completed_sessions", "count", "relative", False, "/min")
    defs["completed_requests"] = MetricDef("completed_requests", "count", "relative", False, "/min")
    return defs


METRICS = _metric_defs()
STEP_METRICS = ("ttft_p50", "ttft_p95", "itl_p50", "itl_p95", "e2e_p50", "e2e_p95")


class CompareError(ValueError):
    """Bad input to a comparison (missing or unreadable run directory)."""


# --------------------------------------------------------------------------- loading


@dataclass
class RunData:
    """One run directory read into memory (blocks of an interleaved run merged)."""

    path: Path
    run: dict[str, Any]
    requests: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    stats: dict[str, Any] | None
    duration_s: float | None

    @property
    def classes(self) -> list[str]:
        names = {r.get("user_class") or "" for r in self.requests}
        names |= {s.get("user_class") or "" for s in self.sessions}
        return sorted(names)


def _parse_iso(s: Any) -> float | None:
    if not isinstance(s, str):
        return None
    try:
        return _dt.datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


def _rows(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in sorted(run_dir.glob(f"{kind}*.jsonl")):
        rows.extend(r for r in iter_jsonl(p) if isinstance(r, dict))
    return rows


def _duration(run: dict[str, Any]) -> float | None:
    a, b = _parse_iso(run.get("started_at")), _parse_iso(run.get("ended_at"))
    if a is not None and b is not None and b > a:
        return b - a
    d = run.get("duration_s")
    return float(d) if isinstance(d, (int, float)) and d > 0 else None


def _load_one(run_dir: Path) -> RunData:
    try:
        run = read_json(run_dir / "run.json")
    except FileNotFoundError:
        run = {}
    except Exception as e:  # noqa: BLE001 - any unreadable run.json is bad input
        raise CompareError(f"{run_dir}/run.json: unreadable ({e})") from None
    if not isinstance(run, dict):
        raise CompareError(f"{run_dir}/run.json: not a JSON object")
    stats = None
    if (run_dir / "stats.json").exists():
        try:
            stats = read_json(run_dir / "stats.json")
        except Exception:  # noqa: BLE001 - optional file; the raw rows suffice
            stats = None
    metrics = _rows(run_dir, "metrics")
    return RunData(
        run_dir,
        run,
        _rows(run_dir, "requests"),
        _rows(run_dir, "sessions"),
        metrics,
        stats,
        _duration(run),
    )


def load_run(path: Path | str) -> RunData:
    """Read a run directory; a directory of `block-*` runs (interleaved canary) is merged.

    Session ids of blocks are prefixed with the block name, because every block
    replays the same seeded sessions.
    """
    path = Path(path)
    if not path.is_dir():
        raise CompareError(f"{path}: not a run directory")
    blocks = sorted(p for p in path.glob("block-*") if p.is_dir())
    if not blocks:
        data = _load_one(path)
        if not data.requests and not data.sessions and not data.run:
            raise CompareError(f"{path}: no run.json, requests*.jsonl or sessions*.jsonl")
        return data
    parts = [_load_one(b) for b in blocks]
    reqs, sess, mets = [], [], []
    for b, d in zip(blocks, parts, strict=True):
        for r in d.requests:
            reqs.append({**r, "session_id": f"{b.name}:{r.get('session_id', '')}"})
        for s in d.sessions:
            sess.append({**s, "session_id": f"{b.name}:{s.get('session_id', '')}"})
        mets.extend(d.metrics)
    durs = [d.duration_s for d in parts if d.duration_s]
    run = dict(parts[0].run)
    run["blocks"] = [b.name for b in blocks]
    return RunData(path, run, reqs, sess, mets, None, sum(durs) if durs else None)


# --------------------------------------------------------------------------- bootstrap engine


class _Scope:
    """The rows of one scope of both runs, indexed by session cluster."""

    def __init__(
        self,
        reqs_a: list[dict],
        reqs_b: list[dict],
        sess_a: list[dict],
        sess_b: list[dict],
        paired: bool,
    ) -> None:
        ids_a = {r.get("session_id", "") for r in reqs_a} | {
            s.get("session_id", "") for s in sess_a
        }
        ids_b = {r.get("session_id", "") for r in reqs_b} | {
            s.get("session_id", "") for s in sess_b
        }
        common = sorted(ids_a & ids_b) if paired else []
        only_a = sorted(ids_a - set(common))
        only_b = sorted(ids_b - set(common))
        self.n_common, self.n_only_a, self.n_only_b = len(common), len(only_a), len(only_b)
        # Cluster index spaces: A = common + only_a, B = common + only_b.
        self.idx_a = {sid: i for i, sid in enumerate(common + only_a)}
        self.idx_b = {sid: i for i, sid in enumerate(common + only_b)}
        self.reqs = (reqs_a, reqs_b)
        self.sess = (sess_a, sess_b)

    @property
    def pair_share(self) -> float:
        tot = self.n_common + max(self.n_only_a, self.n_only_b)
        return self.n_common / tot if tot else 0.0

    def weights(self, rng: np.random.Generator, n_boot: int) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap multiplicities per cluster, shape (n_boot, clusters), for A and B."""

        def draw(n: int) -> np.ndarray:
            if n == 0:
                return np.zeros((n_boot, 0), dtype=np.int32)
            idx = rng.integers(0, n, size=(n_boot, n)) + (np.arange(n_boot) * n)[:, None]
            return (
                np.bincount(idx.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.int32)
            )

        c = draw(self.n_common)
        return np.hstack([c, draw(self.n_only_a)]), np.hstack([c, draw(self.n_only_b)])


def _quantile_sorted(values: np.ndarray, q: float) -> float:
    """Inverted-CDF quantile: the smallest value whose CDF reaches q (matches the bootstrap)."""
    n = len(values)
    k = max(0, math.ceil(q * n) - 1)
    return float(values[min(k, n - 1)])


def _boot_quantiles(
    vals: np.ndarray, clusters: np.ndarray, W: np.ndarray, qs: list[float]
) -> np.ndarray:
    """Weighted inverted-CDF quantiles per bootstrap row: shape (len(qs), n_boot)."""
    order = np.argsort(vals, kind="stable")
    v = vals[order]
    out = np.empty((len(qs), W.shape[0]))
    chunk = max(1, 4_000_000 // max(1, len(v)))
    for s in range(0, W.shape[0], chunk):
        w = W[s : s + chunk][:, clusters[order]]
        cw = np.cumsum(w, axis=1, dtype=np.int64)
        tot = cw[:, -1]
        for j, q in enumerate(qs):
            target = np.ceil(q * tot - 1e-9)
            k = (cw >= np.maximum(target, 1)[:, None]).argmax(axis=1)
            res = v[k].astype(float)
            res[tot == 0] = np.nan
            out[j, s : s + chunk] = res
    return out


def _cluster_sums(values: np.ndarray, clusters: np.ndarray, n_clusters: int) -> np.ndarray:
    return np.bincount(clusters, weights=values, minlength=n_clusters)


def _robust_se(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    if len(x) < 10:
        return float("nan")
    q25, q75 = np.percentile(x, [25, 75])
    return float(max(np.std(x, ddof=1), (q75 - q25) / 1.349))


# --------------------------------------------------------------------------- results


@dataclass
class MetricDiff:
    """One metric in one scope, A vs B, with its interval and verdict."""

    scope: str  # "overall" | "class:NAME" | "step:NAME:K"
    metric: str
    unit: str
    change_kind: str  # relative | absolute
    a: float | None
    b: float | None
    n_a: int
    n_b: int
    change: float | None = None  # fraction (relative) or ratio difference (absolute)
    ci: tuple[float, float] | None = None
    threshold: float | None = None  # same unit as change
    verdict: str = VERDICT_NODATA
    gated: bool = False
    paired_share: float = 0.0
    se: float | None = None  # standard error on the test scale (log ratio | difference)
    higher_is_worse: bool = True
    same_as: str | None = None  # scope whose gated row is this same test (then not gated)
    note: str | None = None  # why a row with a threshold does not gate

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["ci"] = list(self.ci) if self.ci else None
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()
        }


@dataclass
class Comparison:
    """The result of comparing run A (baseline) with run B (candidate)."""

    run_a: RunData
    run_b: RunData
    metrics: list[MetricDiff]
    fingerprint_diff: list[dict[str, Any]]
    error_kinds: dict[str, dict[str, dict[str, int]]]
    server: dict[str, dict[str, Any]]
    spec_histograms: dict[str, dict[str, list[int]]]
    warnings: list[str]
    confidence: float
    n_boot: int
    thresholds: dict[str, float]
    gated_count: int
    verdict: str = VERDICT_SAME
    gating: str = ""  # one sentence: which metrics gate and why

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.verdict == VERDICT_WORSE else EXIT_PASS

    def rows(self, scope: str | None = None, *, gated: bool | None = None) -> list[MetricDiff]:
        return [
            m
            for m in self.metrics
            if (scope is None or m.scope == scope) and (gated is None or m.gated == gated)
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (comparison.json)."""
        return {
            "schema_version": 1,
            "run_a": {"path": str(self.run_a.path), "run_id": self.run_a.run.get("run_id")},
            "run_b": {"path": str(self.run_b.path), "run_id": self.run_b.run.get("run_id")},
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "method": {
                "confidence": self.confidence,
                "n_boot": self.n_boot,
                "gated_metrics": self.gated_count,
                "rule": "worse: interval above 0 and change >= threshold/2; intervals of gated "
                "metrics Bonferroni-adjusted over gated metrics; paired cluster bootstrap over sessions",
                "gating": self.gating,
            },
            "thresholds": self.thresholds,
            "warnings": self.warnings,
            "fingerprint_diff": self.fingerprint_diff,
            "metrics": [m.to_dict() for m in self.metrics],
            "error_kinds": self.error_kinds,
            "server": self.server,
            "spec_histograms": self.spec_histograms,
        }

    def render_text(self) -> str:
        """A console table: verdict, gated metrics, per-class detail, TTFT by step."""
        return _render_text(self)


# --------------------------------------------------------------------------- thresholds


def _pct(v: Any) -> float:
    if isinstance(v, str):
        v = v.strip().rstrip("%").removesuffix("pp").strip()
    return float(v)


def _metric_name(key: str) -> str:
    """Normalise a threshold key: profile names, `_pct`/`_pp` suffixes, CLASS. prefixes."""
    scope, dot, base = key.rpartition(".")
    base = _PROFILE_NAMES.get(base, base)
    for suffix in ("_pct", "_pp"):
        base = base.removesuffix(suffix)
    base = {"throughput": "output_throughput", "session_success": "session_success_ratio"}.get(
        base, base
    )
    return f"{scope}{dot}{base}"


def profile_compare(run: dict) -> dict[str, Any]:
    """The profile's `compare:` section recorded in run.json (empty when absent)."""
    prof = run.get("profile") if isinstance(run.get("profile"), dict) else {}
    sec = prof.get("compare") if isinstance(prof, dict) else None
    if isinstance(sec, dict) and isinstance(sec.get("thresholds"), dict):
        return {**sec["thresholds"], **{k: v for k, v in sec.items() if k == "alpha"}}
    return sec if isinstance(sec, dict) else {}


def resolve_thresholds(run_a: dict, run_b: dict, flags: dict | None) -> dict[str, float]:
    """Defaults, then the profile's `compare` section (A's, then B's on top), then flags."""
    out = dict(DEFAULT_THRESHOLDS)
    for run in (run_a, run_b):
        for k, v in profile_compare(run).items():
            if k == "alpha":
                continue
            try:
                name, val = _metric_name(str(k)), _pct(v)
            except (TypeError, ValueError):
                continue
            out[name] = val
            scope, dot, base = name.rpartition(".")
            shift = _SHIFT_OF.get(base)
            if shift and not any(
                _metric_name(str(x)) == f"{scope}{dot}{shift}" for x in profile_compare(run)
            ):
                out[f"{scope}{dot}{shift}"] = val
    for k, v in (flags or {}).items():
        name = _metric_name(k)
        if v is None:
            out.pop(name, None)
        else:
            out[name] = _pct(v)
    for k in list(out):
        if k.split(".")[-1] not in METRICS:
            raise CompareError(
                f"unknown threshold metric {k!r}; known: {', '.join(sorted(METRICS))}"
            )
    return out


def explicit_gates(flags: dict | None) -> set[str]:
    """Threshold keys a flag set (normalised): those percentiles gate even when runs pair."""
    return {_metric_name(k) for k, v in (flags or {}).items() if v is not None}


def _is_explicit(explicit: set[str], scope: str, metric: str) -> bool:
    if scope == "overall":
        return metric in explicit or f"overall.{metric}" in explicit
    cls = scope.split(":", 1)[1] if scope.startswith("class:") else None
    return metric in explicit or (cls is not None and f"{cls}.{metric}" in explicit)


def _threshold_for(thresholds: dict[str, float], scope: str, metric: str) -> float | None:
    cls = scope.split(":", 1)[1] if scope.startswith("class:") else None
    if scope == "overall" and f"overall.{metric}" in thresholds:
        return thresholds[f"overall.{metric}"]
    if cls is not None and f"{cls}.{metric}" in thresholds:
        return thresholds[f"{cls}.{metric}"]
    return thresholds.get(metric)


# --------------------------------------------------------------------------- metric extraction


def _latency(r: dict, lat: str) -> float | None:
    if r.get("status", "ok") != "ok":
        return None
    if lat == "itl":
        v = r.get("itl_ms")
        v = v.get("mean") if isinstance(v, dict) else None
    else:
        v = r.get(f"{lat}_ms")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _ratio_parts(kind: str, rows_req: list[dict], rows_sess: list[dict]) -> tuple[list, list, list]:
    """(session_ids, numerators, denominators) per row for a ratio metric."""
    sid, num, den = [], [], []
    if kind == "error_ratio":
        for r in rows_req:
            if r.get("status") == "cancelled":
                continue
            sid.append(r.get("session_id", ""))
            num.append(0.0 if r.get("status", "ok") == "ok" else 1.0)
            den.append(1.0)
    elif kind in ("tool_loop_failure_ratio", "session_success_ratio"):
        for s in rows_sess:
            out = s.get("outcome")
            if out == "cancelled" or out is None:
                continue
            sid.append(s.get("session_id", ""))
            hit = out == ("tool_loop_failure" if kind == "tool_loop_failure_ratio" else "completed")
            num.append(1.0 if hit else 0.0)
            den.append(1.0)
    elif kind == "cached_ratio":
        for r in rows_req:
            p = r.get("prompt_tokens")
            if r.get("status", "ok") != "ok" or not p or r.get("cached_tokens") is None:
                continue
            sid.append(r.get("session_id", ""))
            num.append(float(r["cached_tokens"]))
            den.append(float(p))
    elif kind == "spec_acceptance_rate":
        for r in rows_req:
            sd = r.get("spec_decode")
            if not isinstance(sd, dict) or not sd.get("num_draft_tokens"):
                continue
            sid.append(r.get("session_id", ""))
            num.append(float(sd.get("num_accepted_draft_tokens") or 0))
            den.append(float(sd["num_draft_tokens"]))
    elif kind == "spec_acceptance_length":
        for r in rows_req:
            sd = r.get("spec_decode")
            v = sd.get("mean_acceptance_length") if isinstance(sd, dict) else None
            if isinstance(v, (int, float)):
                sid.append(r.get("session_id", ""))
                num.append(float(v))
                den.append(1.0)
    return sid, num, den


def _judge(m: MetricDiff, z: float) -> None:
    """Fill ci and verdict from change/se/threshold (see module docstring)."""
    if m.change is None or m.se is None or not math.isfinite(m.se):
        m.verdict = VERDICT_NODATA
        return
    half = z * m.se
    if m.change_kind == "relative":
        lc = math.log1p(m.change)
        lo, hi = math.expm1(lc - half), math.expm1(lc + half)
    else:
        lo, hi = m.change - half, m.change + half
    m.ci = (lo, hi)
    if m.threshold is None:
        m.verdict = (
            VERDICT_SAME
            if lo <= 0 <= hi
            else (VERDICT_WORSE if (lo > 0) == m.higher_is_worse else VERDICT_BETTER)
        )
        return
    sign = 1.0 if m.higher_is_worse else -1.0
    worse_lo, worse_hi = sorted((sign * lo, sign * hi))
    worse_pt = sign * m.change
    half = m.threshold / 2.0
    if worse_lo > 0 and worse_pt >= half:
        m.verdict = VERDICT_WORSE
    elif worse_hi < 0 and worse_pt <= -half:
        m.verdict = VERDICT_BETTER
    else:
        m.verdict = VERDICT_SAME


MIN_SAMPLES = 20  # per side, below which a metric is "insufficient data"


def _req_key(r: dict) -> tuple[str, int]:
    return str(r.get("session_id", "")), int(r.get("step") or 0)


def _paired_requests(sc: _Scope, lat: str) -> set[tuple[str, int]] | None:
    """The (session, step) requests with a `lat` value in both runs, or None if unpaired.

    Seeded traffic sends the same requests to both sides, but a slower side gets
    fewer of them done before the run ends, and the later steps it misses carry
    longer contexts: a quantile over all requests would compare different work.
    Latency quantiles are therefore taken over the requests both sides completed
    (the work done shows in throughput and completed counts).
    """
    if not sc.n_common:
        return None
    keys = [{_req_key(r) for r in sc.reqs[side] if _latency(r, lat) is not None} for side in (0, 1)]
    return keys[0] & keys[1]


def _shift_metric(scope_name: str, sc: _Scope, name: str, Wa: np.ndarray) -> MetricDiff:
    """Paired per-request shift: median over paired requests of log(B/A), cluster bootstrap.

    Only sessions in both runs carry paired requests, and those are the first
    `n_common` clusters of both index spaces, where A's and B's bootstrap
    weights are the same draw, so A's weights resample the pairs jointly.
    a / b are the medians of each side over the same paired requests.
    """
    d = METRICS[name]
    lat = name.split("_")[0]
    m = MetricDiff(scope_name, name, d.unit, d.change, None, None, 0, 0)
    m.paired_share, m.higher_is_worse = sc.pair_share, d.higher_is_worse
    if not sc.n_common:
        return m
    vals: list[dict[tuple[str, int], float]] = [{}, {}]
    for side in (0, 1):
        for r in sc.reqs[side]:
            v = _latency(r, lat)
            if v is not None and v > 0:
                vals[side][_req_key(r)] = v
    keys = sorted(set(vals[0]) & set(vals[1]))
    m.n_a = m.n_b = len(keys)
    if not keys:
        return m
    va = np.asarray([vals[0][k] for k in keys])
    vb = np.asarray([vals[1][k] for k in keys])
    m.a = _quantile_sorted(np.sort(va), 0.5)
    m.b = _quantile_sorted(np.sort(vb), 0.5)
    if len(keys) < MIN_SAMPLES:
        return m
    lr = np.log(vb) - np.log(va)
    med = _quantile_sorted(np.sort(lr), 0.5)
    m.change = math.expm1(med)
    cl = np.asarray([sc.idx_a[k[0]] for k in keys], dtype=np.int64)
    boot = _boot_quantiles(lr, cl, Wa, [0.5])[0]
    m.se = 0.0 if np.nanmax(np.abs(boot - med), initial=0) == 0 else _robust_se(boot)
    return m


def _min_n(q: float) -> int:
    return max(MIN_SAMPLES, math.ceil(5 / (1 - q)))


def _scope_metrics(
    scope_name: str,
    sc: _Scope,
    names: list[str],
    rng: np.random.Generator,
    n_boot: int,
    dur: tuple[float | None, float | None],
) -> list[MetricDiff]:
    """Point estimates and bootstrap standard errors for `names` in one scope."""
    out: list[MetricDiff] = []
    Wa, Wb = sc.weights(rng, n_boot)
    idx = (sc.idx_a, sc.idx_b)
    W = (Wa, Wb)
    ps = sc.pair_share
    lat_names: dict[str, list[str]] = {}
    for n in names:
        if METRICS[n].kind == "quantile":
            lat_names.setdefault(n.split("_")[0], []).append(n)
    for lat, qnames in lat_names.items():
        qs = [QUANTILES[q.split("_")[1]] for q in qnames]
        pts: list[list[float | None]] = []
        boots: list[np.ndarray | None] = []
        ns: list[int] = []
        both = _paired_requests(sc, lat)
        for side in (0, 1):
            vals: list[float] = []
            cl: list[int] = []
            for r in sc.reqs[side]:
                v = _latency(r, lat)
                if v is not None and (both is None or _req_key(r) in both):
                    vals.append(v)
                    cl.append(idx[side][r.get("session_id", "")])
            va = np.asarray(vals, dtype=float)
            ns.append(len(va))
            if len(va) == 0:
                pts.append([None] * len(qs))
                boots.append(None)
                continue
            sv = np.sort(va)
            pts.append([_quantile_sorted(sv, q) for q in qs])
            boots.append(_boot_quantiles(va, np.asarray(cl, dtype=np.int64), W[side], qs))
        for j, (qn, q) in enumerate(zip(qnames, qs, strict=True)):
            d = METRICS[qn]
            m = MetricDiff(scope_name, qn, d.unit, d.change, pts[0][j], pts[1][j], ns[0], ns[1])
            m.paired_share, m.higher_is_worse = ps, d.higher_is_worse
            ba, bb = boots
            if min(ns) >= _min_n(q) and m.a and m.b and ba is not None and bb is not None:
                m.change = m.b / m.a - 1.0
                lr = np.log(bb[j]) - np.log(ba[j])
                m.se = _robust_se(lr)
            out.append(m)
    for n in names:
        if METRICS[n].kind == "shift":
            out.append(_shift_metric(scope_name, sc, n, Wa))
    for n in names:
        d = METRICS[n]
        if d.kind in ("ratio", "mean"):
            pt: list[float | None] = []
            bs: list[Any] = []
            ns = []
            for side in (0, 1):
                sid, num, den = _ratio_parts(n, sc.reqs[side], sc.sess[side])
                ns.append(len(sid))
                if not sid or sum(den) == 0:
                    pt.append(None)
                    bs.append(None)
                    continue
                cla = np.asarray([idx[side][s] for s in sid], dtype=np.int64)
                k = W[side].shape[1]
                ns_num = _cluster_sums(np.asarray(num), cla, k)
                ns_den = _cluster_sums(np.asarray(den), cla, k)
                pt.append(float(sum(num) / sum(den)))
                with np.errstate(invalid="ignore", divide="ignore"):
                    bs.append((W[side] @ ns_num) / (W[side] @ ns_den))
            m = MetricDiff(scope_name, n, d.unit, d.change, pt[0], pt[1], ns[0], ns[1])
            m.paired_share, m.higher_is_worse = ps, d.higher_is_worse
            if min(ns) >= MIN_SAMPLES and pt[0] is not None and pt[1] is not None:
                if d.change == "relative":
                    if pt[0] > 0 and pt[1] > 0:
                        m.change = pt[1] / pt[0] - 1.0
                        m.se = _robust_se(np.log(bs[1]) - np.log(bs[0]))
                else:
                    m.change = pt[1] - pt[0]
                    diff = bs[1] - bs[0]
                    # Zero spread in both runs: nothing can vary, so the metric cannot be flagged.
                    m.se = (
                        0.0
                        if np.nanmax(np.abs(diff - m.change), initial=0) == 0
                        else _robust_se(diff)
                    )
            out.append(m)
        elif d.kind == "sum":
            da, db = dur
            per = (da or 1.0, db or 1.0)
            spt: list[float] = []
            sbs: list[Any] = []
            ns = []
            for side in (0, 1):
                rows = [r for r in sc.reqs[side] if r.get("status", "ok") == "ok"]
                toks = np.asarray([float(r.get("completion_tokens") or 0) for r in rows])
                cla = np.asarray([idx[side][r.get("session_id", "")] for r in rows], dtype=np.int64)
                ns.append(len(rows))
                sums = (
                    _cluster_sums(toks, cla, W[side].shape[1])
                    if len(rows)
                    else np.zeros(W[side].shape[1])
                )
                spt.append(float(toks.sum()) / per[side])
                sbs.append((W[side] @ sums) / per[side])
            m = MetricDiff(
                scope_name,
                n,
                d.unit if da and db else "tokens",
                d.change,
                spt[0],
                spt[1],
                ns[0],
                ns[1],
            )
            m.paired_share, m.higher_is_worse = ps, d.higher_is_worse
            if min(ns) >= MIN_SAMPLES and spt[0] > 0 and spt[1] > 0:
                m.change = spt[1] / spt[0] - 1.0
                with np.errstate(invalid="ignore", divide="ignore"):
                    m.se = _robust_se(np.log(sbs[1]) - np.log(sbs[0]))
            out.append(m)
        elif d.kind == "count":
            counts = []
            for side in (0, 1):
                if n == "completed_sessions":
                    c = sum(1 for s in sc.sess[side] if s.get("outcome") == "completed")
                else:
                    c = sum(1 for r in sc.reqs[side] if r.get("status", "ok") == "ok")
                counts.append(c)
            da, db = dur
            scale = (60.0 / da, 60.0 / db) if da and db else (1.0, 1.0)
            m = MetricDiff(
                scope_name, n, d.unit if da and db else "count", d.change,
                counts[0] * scale[0], counts[1] * scale[1], counts[0], counts[1],
            )  # fmt: skip
            m.paired_share, m.higher_is_worse = ps, d.higher_is_worse
            # Like every other metric: below MIN_SAMPLES per side it is reported, not judged
            # (a 10 % change in 10 sessions is far inside Poisson noise, and a metric that
            # cannot be flagged must not widen every other interval through Bonferroni).
            if min(counts) >= MIN_SAMPLES:
                ca, cb = counts[0] + 0.5, counts[1] + 0.5
                m.change = (cb * scale[1]) / (ca * scale[0]) - 1.0
                m.se = math.sqrt(1 / ca + 1 / cb)
            out.append(m)
    return out


# --------------------------------------------------------------------------- side info


def _flatten_fp(d: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Fingerprint leaves: dotted path -> (value, source)."""
    out: dict[str, tuple[Any, Any]] = {}
    if isinstance(d, dict) and "value" in d and set(d) <= {"value", "source", "detail", "unit"}:
        v, src = d.get("value"), d.get("source")
        if isinstance(v, dict):
            # e.g. cache_config: compare and show the fields, not one long dict
            for k, sub in v.items():
                out[f"{prefix}.{k}"] = (sub, src)
        else:
            out[prefix] = (v, src)
    elif isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten_fp(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = (d, None)
    return out


def fingerprint_diff(run_a: dict, run_b: dict) -> list[dict[str, Any]]:
    """Fields of `fingerprint`, `labels` and target facts that differ between two runs."""
    rows = []
    for section in ("fingerprint", "labels"):
        fa = _flatten_fp(run_a.get(section) or {})
        fb = _flatten_fp(run_b.get(section) or {})
        for k in sorted(set(fa) | set(fb)):
            va, sa = fa.get(k, (None, None))
            vb, sb = fb.get(k, (None, None))
            if va != vb:
                rows.append(
                    {"field": f"{section}.{k}", "a": va, "b": vb, "source_a": sa, "source_b": sb}
                )
    ta, tb = run_a.get("target") or {}, run_b.get("target") or {}
    for k in ("model", "max_model_len"):
        if ta.get(k) != tb.get(k):
            rows.append(
                {
                    "field": f"target.{k}",
                    "a": ta.get(k),
                    "b": tb.get(k),
                    "source_a": "run",
                    "source_b": "run",
                }
            )
    return rows


def _error_kinds(data: RunData, scopes: list[tuple[str, str | None]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, cls in scopes:
        kinds: dict[str, int] = {}
        for r in data.requests:
            if (cls is None or r.get("user_class") == cls) and r.get("status", "ok") != "ok":
                k = r.get("error_kind") or r.get("status") or "unknown"
                kinds[k] = kinds.get(k, 0) + 1
        out[name] = kinds
    return out


_TIME_KEYS = ("t", "ts", "time", "wall", "timestamp", "t_wall")


def metric_series(rows: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """metrics.jsonl rows -> {metric name: [(unix time, value)]}, label sets summed."""
    series: dict[str, list[tuple[float, float]]] = {}

    def add(t: float, name: str, v: Any) -> None:
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)):
            acc[name] = acc.get(name, 0.0) + float(v)
        elif isinstance(v, dict):
            if "value" in v and isinstance(v["value"], (int, float)):
                acc[name] = acc.get(name, 0.0) + float(v["value"])
            else:
                for sub in v.values():
                    add(t, name, sub)
        elif isinstance(v, list):
            for sub in v:
                add(t, name, sub)

    for row in rows:
        t = next((row[k] for k in _TIME_KEYS if isinstance(row.get(k), (int, float))), None)
        if t is None:
            continue
        data = row.get("values", row.get("metrics", row.get("samples")))
        if not isinstance(data, dict):
            if "error" in row:
                continue  # a failed scrape
            data = {k: v for k, v in row.items() if k not in _TIME_KEYS}
        if any(g in data for g in ("gauges", "counters", "labelled")):
            # workload.observe.metrics.parse_metrics shape; histograms and cache config are not series
            data = {
                **(data.get("gauges") or {}),
                **(data.get("counters") or {}),
                **(data.get("labelled") or {}),
            }
        acc: dict[str, float] = {}
        for k, v in data.items():
            add(float(t), str(k), v)
        for k, v in acc.items():
            series.setdefault(k, []).append((float(t), v))
    for v in series.values():
        v.sort()
    return series


def server_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per /metrics series: counters (…_total) as the delta over the run, gauges as mean and max."""
    out = {}
    for name, pts in metric_series(rows).items():
        vals = [v for _, v in pts]
        if name.endswith("_total") or name.endswith("_count") or name.endswith("_sum"):
            out[name] = {"delta": vals[-1] - vals[0]}
        else:
            out[name] = {"mean": float(np.mean(vals)), "max": float(np.max(vals))}
    return out


def spec_histogram(requests: list[dict], cls: str | None = None) -> list[int]:
    """Summed spec-decode acceptance histogram (index = accepted drafts per step)."""
    tot: list[int] = []
    for r in requests:
        if cls is not None and r.get("user_class") != cls:
            continue
        sd = r.get("spec_decode")
        h = sd.get("acceptance_histogram") if isinstance(sd, dict) else None
        if isinstance(h, list):
            if len(h) > len(tot):
                tot.extend([0] * (len(h) - len(tot)))
            for i, x in enumerate(h):
                if isinstance(x, (int, float)):
                    tot[i] += int(x)
    return tot


# --------------------------------------------------------------------------- entry point


def _drop_duplicate_gates(metrics: list[MetricDiff]) -> None:
    """Un-gate a class row that is the overall row again (that class holds all the data).

    When one class carries every sample of a metric (e.g. only the streamed class
    has TTFT), its row and the overall row are the same test on the same data;
    gating both would only spend Bonferroni budget twice. Same samples means same
    counts and same point values on both sides; a class-scoped threshold that
    differs from the overall one keeps the class row gated.
    """
    overall = {m.metric: m for m in metrics if m.scope == "overall" and m.gated}
    for m in metrics:
        o = overall.get(m.metric)
        if (
            o is not None
            and m.gated
            and m.scope.startswith("class:")
            and (m.n_a, m.n_b, m.a, m.b, m.threshold) == (o.n_a, o.n_b, o.a, o.b, o.threshold)
        ):
            m.gated, m.same_as = False, "overall"


def _traffic_key(run: dict) -> tuple[Any, Any]:
    prof = run["profile"] if isinstance(run.get("profile"), dict) else {}
    return run.get("seed", prof.get("seed")), run.get("profile_name", prof.get("name"))


def compare_runs(
    run_a: Path | str | RunData,
    run_b: Path | str | RunData,
    thresholds: dict | None = None,
    *,
    confidence: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    steps: bool = True,
) -> Comparison:
    """Compare baseline A with candidate B; see the module docstring for the method.

    `confidence` defaults to 1 - the profile's `compare.alpha`, else 0.95.
    """
    if n_boot < 100:
        raise CompareError(f"n_boot must be at least 100, got {n_boot}")
    a = run_a if isinstance(run_a, RunData) else load_run(run_a)
    b = run_b if isinstance(run_b, RunData) else load_run(run_b)
    if confidence is None:
        alpha = profile_compare(b.run).get("alpha", profile_compare(a.run).get("alpha", 0.05))
        confidence = 1.0 - float(alpha) if isinstance(alpha, (int, float)) else 0.95
    if not 0.5 < confidence < 1:
        raise CompareError(f"confidence must be in (0.5, 1), got {confidence}")
    th = resolve_thresholds(a.run, b.run, thresholds)
    explicit = explicit_gates(thresholds)
    warnings: list[str] = []
    paired = True
    ka, kb = _traffic_key(a.run), _traffic_key(b.run)
    if ka != kb and a.run and b.run:
        paired = False
        warnings.append(f"traffic differs (seed/profile A={ka} B={kb}); sessions not paired")
    if not a.requests or not b.requests:
        warnings.append("a run has no request rows")
    classes = sorted(set(a.classes) | set(b.classes))
    dur = (a.duration_s, b.duration_s)
    if not (dur[0] and dur[1]):
        warnings.append("run duration unknown; counts compared as totals")

    rng = np.random.default_rng(seed)
    metrics: list[MetricDiff] = []
    top_names = list(METRICS)
    scopes: list[tuple[str, str | None]] = [("overall", None)] + [
        (f"class:{c}", c) for c in classes
    ]
    for name, cls in scopes:

        def pick(rows: list[dict], c: str | None = cls) -> list[dict]:
            return rows if c is None else [r for r in rows if r.get("user_class") == c]

        sc = _Scope(pick(a.requests), pick(b.requests), pick(a.sessions), pick(b.sessions), paired)
        metrics += _scope_metrics(name, sc, top_names, rng, n_boot, dur)
    if steps:
        for cls in classes:
            ra = [r for r in a.requests if r.get("user_class") == cls]
            rb = [r for r in b.requests if r.get("user_class") == cls]
            for k in sorted({int(r.get("step") or 0) for r in ra + rb}):
                sa = [r for r in ra if int(r.get("step") or 0) == k]
                sb = [r for r in rb if int(r.get("step") or 0) == k]
                sc = _Scope(sa, sb, [], [], paired)
                metrics += _scope_metrics(
                    f"step:{cls}:{k}", sc, list(STEP_METRICS), rng, n_boot, dur
                )

    for m in metrics:
        step = m.scope.startswith("step:")
        t = _threshold_for(th, "class:" + m.scope.split(":")[1] if step else m.scope, m.metric)
        if t is not None:
            m.threshold = t / 100.0  # per-step rows use it for the T/2 floor but do not gate
            m.gated = not step
    by_key = {(m.scope, m.metric): m for m in metrics}
    for m in metrics:
        if m.gated and METRICS[m.metric].kind == "shift" and not m.paired_share:
            m.gated, m.note = False, "runs do not pair: the percentiles gate"
    # Paired data: percentiles, and the metrics that two instances of the same server
    # disagree on, are shown but gate only when a flag names them (report-only set first,
    # so a percentile's note knows whether its shift gates).
    demote = [
        m
        for m in metrics
        if m.gated and m.paired_share and not _is_explicit(explicit, m.scope, m.metric)
    ]
    for m in demote:
        if m.metric in PAIRED_REPORT_ONLY:
            m.gated, m.note = False, "not gated by default; name it to gate"
    for m in demote:
        if METRICS[m.metric].kind == "quantile":
            shift = by_key.get((m.scope, m.metric.split("_")[0] + "_shift"))
            if shift is not None and shift.paired_share:
                why = f"{shift.metric} gates" if shift.gated else "name it to gate"
                m.gated, m.note = False, f"not gated; {why}"
    _drop_duplicate_gates(metrics)
    alpha = 1.0 - confidence
    # Tarone: only gated metrics that can vary count towards the Bonferroni divisor.
    k = sum(1 for m in metrics if m.gated and m.se is not None and math.isfinite(m.se) and m.se > 0)
    k = max(1, k)
    z_gated = float(_sps.norm.ppf(1 - alpha / (2 * k)))
    z_plain = float(_sps.norm.ppf(1 - alpha / 2))
    for m in metrics:
        _judge(m, z_gated if m.gated or m.same_as or m.note else z_plain)
    gated = [m for m in metrics if m.gated]
    if any(m.verdict == VERDICT_WORSE for m in gated):
        verdict = VERDICT_WORSE
    elif any(m.verdict == VERDICT_BETTER for m in gated):
        verdict = VERDICT_BETTER
    else:
        verdict = VERDICT_SAME
    nodata = [f"{m.scope} {m.metric}" for m in gated if m.verdict == VERDICT_NODATA]
    if nodata:
        warnings.append("not enough data to judge: " + ", ".join(nodata))

    ek = {"a": _error_kinds(a, scopes), "b": _error_kinds(b, scopes)}
    server = {"a": server_summary(a.metrics), "b": server_summary(b.metrics)}
    if not a.metrics or not b.metrics:
        warnings.append(
            "server /metrics samples absent in "
            + ("A and B" if not (a.metrics or b.metrics) else ("A" if not a.metrics else "B"))
        )
    spec = {
        "a": {c: spec_histogram(a.requests, c) for c in classes},
        "b": {c: spec_histogram(b.requests, c) for c in classes},
    }
    return Comparison(
        a, b, metrics, fingerprint_diff(a.run, b.run), ek, server, spec, warnings,
        confidence, n_boot, th, k, verdict, _gating_sentence(metrics),
    )  # fmt: skip


def _gating_sentence(metrics: list[MetricDiff]) -> str:
    """One sentence for the verdict box: which latency metrics gate, and why."""
    gated = [m for m in metrics if m.gated]
    shifts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "shift"})
    pcts = sorted({m.metric for m in gated if METRICS[m.metric].kind == "quantile"})
    shown = sorted({m.metric for m in metrics if m.note and m.note.startswith("not gated")})
    if shifts:
        s = (
            f"Latency gates on the paired shift ({', '.join(shifts)}: median over the requests "
            "both runs served of B/A), which a slowdown of every request moves but a few "
            "requests changing places in the tail does not"
        )
        if shown:
            s += (
                f"; {', '.join(shown)} are shown but do not gate, because two instances of the "
                "same server differ on them by more than their intervals (name one to gate it, "
                "e.g. --threshold ttft_p95=10)"
            )
        if pcts:
            s += f"; {', '.join(pcts)} gate because a threshold flag names them"
        return s + "."
    if pcts:
        return (
            f"The runs do not pair (different seed or profile), so latency gates on the "
            f"percentiles ({', '.join(pcts)})."
        )
    return "No latency metric gates."


# --------------------------------------------------------------------------- rendering


def fmt_value(m: MetricDiff, v: float | None) -> str:
    """A metric value in its display unit."""
    if v is None:
        return "-"
    if m.unit == "ms":
        return f"{v:,.1f}"
    if m.unit == "ratio":
        return f"{100 * v:.2f} %"
    if m.unit in ("/min", "count"):
        return f"{v:,.1f}"
    return f"{v:.3f}"


def fmt_change(m: MetricDiff) -> str:
    """The change and its interval, e.g. '+12.3 % [+5.0, +19.9]'."""
    if m.change is None:
        return "-"
    unit = "%" if m.change_kind == "relative" else "pp"
    s = f"{100 * m.change:+.1f} {unit}"
    if m.ci:
        s += f" [{100 * m.ci[0]:+.1f}, {100 * m.ci[1]:+.1f}]"
    return s


def fmt_threshold(m: MetricDiff) -> str:
    if m.threshold is None:
        return ""
    return f"{100 * m.threshold:g} {'%' if m.change_kind == 'relative' else 'pp'}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    rows = [[c if len(c) <= 60 else c[:57] + "..." for c in r] for r in rows]
    w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w[i]) for i, h in enumerate(headers))
    out = [line, "  ".join("-" * x for x in w)]
    out += ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    return out


def _render_text(c: Comparison) -> str:
    pa, pb = c.run_a.path, c.run_b.path
    lines = [f"A (baseline):  {pa}", f"B (candidate): {pb}", ""]
    if c.fingerprint_diff:
        lines.append("What changed besides the code (fingerprint / labels):")
        lines += [
            "  " + ln
            for ln in _table(
                ["field", "A", "B"],
                [[d["field"], str(d["a"]), str(d["b"])] for d in c.fingerprint_diff],
            )
        ]
        lines.append("")
    hdr = ["scope", "metric", "A", "B", "change [CI]", "threshold", "verdict"]
    gated = c.rows(gated=True)
    lines.append(
        f"Gated metrics ({c.gated_count} counted; intervals {100 * c.confidence:g} % family-wise, paired by session):"
    )
    if c.gating:
        lines.append(f"  {c.gating}")
    lines += [
        "  " + ln
        for ln in _table(
            hdr,
            [
                [
                    m.scope,
                    m.metric,
                    fmt_value(m, m.a),
                    fmt_value(m, m.b),
                    fmt_change(m),
                    fmt_threshold(m),
                    m.verdict,
                ]
                for m in gated
            ],
        )
    ]
    lines.append("")
    lines.append(f"Details (not gated; {100 * c.confidence:g} % intervals per metric):")
    detail = [
        m
        for m in c.metrics
        if not m.gated and not m.scope.startswith("step:") and m.verdict != VERDICT_NODATA
    ]
    lines += [
        "  " + ln
        for ln in _table(
            hdr[:-2] + ["verdict"],
            [
                [
                    m.scope,
                    m.metric,
                    fmt_value(m, m.a),
                    fmt_value(m, m.b),
                    fmt_change(m),
                    m.verdict + (f" ({m.note})" if m.note else ""),
                ]
                for m in detail
            ],
        )
    ]
    steps = [
        m
        for m in c.metrics
        if m.scope.startswith("step:") and m.metric == "ttft_p95" and m.a is not None
    ]
    if steps:
        lines += ["", "TTFT p95 by session step:"]
        lines += [
            "  " + ln
            for ln in _table(
                ["class", "step", "A ms", "B ms", "change [CI]"],
                [
                    [
                        m.scope.split(":")[1],
                        m.scope.split(":")[2],
                        fmt_value(m, m.a),
                        fmt_value(m, m.b),
                        fmt_change(m),
                    ]
                    for m in steps
                ],
            )
        ]
    kinds = sorted(
        set(c.error_kinds["a"].get("overall", {})) | set(c.error_kinds["b"].get("overall", {}))
    )
    if kinds:
        lines += [
            "",
            "Errors by kind (A / B): "
            + ", ".join(
                f"{k} {c.error_kinds['a']['overall'].get(k, 0)} / {c.error_kinds['b']['overall'].get(k, 0)}"
                for k in kinds
            ),
        ]
    for w in c.warnings:
        lines.append(f"warning: {w}")
    lines += ["", f"VERDICT: {c.verdict.upper()} (exit {c.exit_code})"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def parse_threshold_flags(items: list[str]) -> dict[str, float | None]:
    """`metric=10` (percent / pp) or `metric=off` -> thresholds dict."""
    out: dict[str, float | None] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip():
            raise CompareError(f"--threshold {it!r}: expected METRIC=PERCENT (e.g. ttft_p95=10)")
        if v.strip().lower() in ("off", "none", ""):
            out[k.strip()] = None
            continue
        try:
            out[k.strip()] = _pct(v)
        except ValueError:
            raise CompareError(f"--threshold {it!r}: {v!r} is not a number") from None
    return out


def compare_argparser(prog: str = "agentload compare") -> argparse.ArgumentParser:
    p = QuietParser(
        prog=prog, description="Compare two runs (A = baseline, B = candidate) with a verdict."
    )
    p.add_argument("run_a", type=Path, help="baseline run directory")
    p.add_argument("run_b", type=Path, help="candidate run directory")
    add_verdict_options(p)
    p.add_argument("--html", type=Path, help="write the comparison report here")
    p.add_argument("--json", type=Path, help="write comparison.json here")
    return p


def add_verdict_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `compare` and `canary`."""
    p.add_argument(
        "--threshold", action="append", default=[], metavar="METRIC=PCT",
        help="gate METRIC at PCT percent (relative) or points (ratios); 'off' disables; "
        "CLASS.METRIC scopes it to one class. Defaults: "
        + ", ".join(f"{k}={v:g}" for k, v in DEFAULT_THRESHOLDS.items()),
    )  # fmt: skip
    p.add_argument(
        "--confidence", type=float, default=0.95, help="family-wise confidence (default 0.95)"
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")


class ArgError(Exception):
    """Bad command-line arguments (reported as one line, exit 2)."""


class QuietParser(argparse.ArgumentParser):
    """An ArgumentParser that raises ArgError instead of printing usage and exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise ArgError(message)


def run_cli(
    name: str, parser: argparse.ArgumentParser, argv: list[str], body, *, rest: bool = False
) -> int:
    """Parse argv and call body(args); bad input -> one line on stderr and 2.

    With `rest`, unknown arguments are kept in `args.rest` (after an optional `--`).
    """
    try:
        if rest:
            args, extra = parser.parse_known_args(argv)
            args.rest = extra[1:] if extra[:1] == ["--"] else [a for a in extra if a != "--"]
        else:
            args = parser.parse_args(argv)
        return int(body(args))
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except (ArgError, CompareError) as e:
        print(f"agentload {name}: error: {e}", file=sys.stderr)
        return 2


def main_compare(argv: list[str]) -> int:
    """`agentload compare RUN_A RUN_B`: print the verdict, exit 0 pass / 3 regression / 2 bad input."""

    def body(args: argparse.Namespace) -> int:
        cmp = compare_runs(
            args.run_a, args.run_b, parse_threshold_flags(args.threshold),
            confidence=args.confidence, n_boot=args.n_boot,
        )  # fmt: skip
        print(cmp.render_text())
        if args.json:
            from workload.measure.artifacts import write_json

            write_json(args.json, cmp.to_dict())
        if args.html:
            from workload.report.html import write_compare_report

            write_compare_report(cmp, args.html)
            print(f"report: {args.html}")
        return cmp.exit_code

    return run_cli("compare", compare_argparser(), argv, body)
