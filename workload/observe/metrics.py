"""The server's /metrics: parse the Prometheus text, scrape it over a run, summarise the samples.

Shapes:

- ``parse_metrics(text)`` -> ``{"gauges": {name: v}, "counters": {name: v},
  "labelled": {name: {label_value: v}}, "histograms": {name: {"count", "sum",
  "buckets": {le: cumulative}}}, "cache_config": [{label: str}, ...] (one per engine),
  "engines": [engine ids]}``. Series of one name are summed across engines and models,
  except ``vllm:kv_cache_usage_perc`` (a fraction: averaged).
- A scrape sample (``MetricsScraper.scrape_once``, one line of metrics.jsonl):
  ``{"t": unix_s, "scrape_ms": float, "values": parse_metrics(...)}`` or
  ``{"t": unix_s, "scrape_ms": float, "error": "..."}``. ``read_samples`` reads them back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from workload.observe.http_get import http_get

log = logging.getLogger(__name__)

GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
)
COUNTERS = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
LABELLED = {
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": "position",
    "vllm:request_success_total": "finished_reason",
}
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)
CACHE_CONFIG = "vllm:cache_config_info"
# Older vLLM names, used only when the current name is absent from the same scrape.
LEGACY = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries_total": "vllm:prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total": "vllm:prefix_cache_hits_total",
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",
}
_AVERAGED = {"vllm:kv_cache_usage_perc"}


def parse_metrics(text: str) -> dict[str, Any]:
    """The vLLM series agentload tracks, from Prometheus text exposition (see module doc)."""
    gauges: dict[str, list[float]] = {}
    counters: dict[str, float] = {}
    labelled: dict[str, dict[str, float]] = {}
    hists: dict[str, dict[str, Any]] = {}
    cache_config: list[dict[str, str]] = []
    engines: set[str] = set()
    hist_names = set(HISTOGRAMS) | {k for k, v in LEGACY.items() if v in HISTOGRAMS}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if not name.startswith("vllm:"):
                continue
            if "engine" in labels:
                engines.add(labels["engine"])
            if name == CACHE_CONFIG:
                cache_config.append({k: v for k, v in labels.items() if k != "model_name"})
            elif name in GAUGES or LEGACY.get(name) in GAUGES:
                gauges.setdefault(name, []).append(value)
            elif name in COUNTERS or LEGACY.get(name) in COUNTERS:
                counters[name] = counters.get(name, 0.0) + value
            elif name in LABELLED:
                key = labels.get(LABELLED[name], "")
                by = labelled.setdefault(name, {})
                by[key] = by.get(key, 0.0) + value
            else:
                base, _, suffix = name.rpartition("_")
                if base in hist_names and suffix in ("bucket", "count", "sum"):
                    h = hists.setdefault(base, {"count": 0.0, "sum": 0.0, "buckets": {}})
                    if suffix == "bucket":
                        le = labels.get("le", "+Inf")
                        h["buckets"][le] = h["buckets"].get(le, 0.0) + value
                    else:
                        h[suffix] += value
    out_gauges = {
        n: (sum(v) / len(v) if (LEGACY.get(n, n) in _AVERAGED) else sum(v))
        for n, v in gauges.items()
    }
    result = {
        "gauges": out_gauges,
        "counters": counters,
        "labelled": labelled,
        "histograms": hists,
        "cache_config": cache_config,
        "engines": sorted(engines),
    }
    _apply_legacy(result)
    return result


def _apply_legacy(parsed: dict[str, Any]) -> None:
    for group in ("gauges", "counters", "histograms"):
        d = parsed[group]
        for old, new in LEGACY.items():
            if old in d:
                value = d.pop(old)
                d.setdefault(new, value)


# ---------------------------------------------------------------- scraping


class MetricsScraper:
    """Samples /metrics every ``interval_s`` on a background thread and hands each to ``sink``.

    Uses ``threading`` only, so under gevent monkey-patching it runs as a greenlet and
    its blocking socket reads yield. ``start()`` takes a first sample at once and
    ``stop()`` a last one, so counter deltas span the run. Samples are also kept in
    ``samples`` for ``scrape_summary`` unless ``keep=False`` (a run that streams them to
    its sink: ~20 KiB a sample, every 2 s, would otherwise grow for the whole run).
    """

    def __init__(
        self,
        base_url: str,
        interval_s: float = 5.0,
        sink: Callable[[dict], None] | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 5.0,
        wall: Callable[[], float] = time.time,
        keep: bool = True,
    ) -> None:
        self.base_url = base_url
        self.keep = keep
        self.interval_s = interval_s
        self.sink = sink
        self._api_key = api_key
        self.timeout_s = timeout_s
        self._wall = wall
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scrape_once(self) -> dict[str, Any]:
        """One sample; a failed scrape is a sample with ``error`` (never raises)."""
        t = self._wall()
        t0 = time.perf_counter()
        status, body = http_get(self.base_url, "/metrics", self._api_key, self.timeout_s)
        sample: dict[str, Any] = {"t": t}
        if status == 200 and isinstance(body, bytes):
            try:
                sample["values"] = parse_metrics(body.decode("utf-8", "replace"))
            except Exception as e:  # a malformed exposition is data, not a crash
                sample["error"] = f"unparseable /metrics: {type(e).__name__}: {e}"
        else:
            sample["error"] = body if isinstance(body, str) else f"HTTP {status}"
        sample["scrape_ms"] = (time.perf_counter() - t0) * 1000.0
        return sample

    def _emit(self, sample: dict[str, Any]) -> None:
        if self.keep:
            self.samples.append(sample)
        if self.sink is not None:
            try:
                self.sink(sample)
            except Exception:
                log.exception("metrics sink failed; sample kept in memory")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._emit(self.scrape_once())

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        # The baseline sample is taken before start() returns, i.e. before any load is
        # sent: run deltas then cover every request of the run.
        self._emit(self.scrape_once())
        self._thread = threading.Thread(target=self._run, name="agentload-metrics", daemon=True)
        self._thread.start()

    def stop(self, final_sample: bool = True) -> list[dict[str, Any]]:
        """Stop sampling (taking one last sample) and return all kept samples."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=self.timeout_s + self.interval_s + 1.0)
            self._thread = None
            if final_sample:
                self._emit(self.scrape_once())
        return self.samples


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The scrape samples of one metrics.jsonl, in file order; [] when the file is absent.

    Blank lines, a torn last line (a run killed mid-write) and non-object lines are skipped.
    """
    path = Path(path)
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    with open(path, "rb") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                out.append(row)
    return out


_TIME_KEYS = ("t", "ts", "time", "wall", "timestamp", "t_wall")


def series_from_samples(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """metrics.jsonl rows -> {metric name: [(unix time, value)]}, label sets summed, sorted by time.

    Reads our samples (``values`` = ``parse_metrics`` shape; histograms and cache config are
    not series) and flatter foreign rows (``metrics`` / ``samples`` / top-level numbers,
    time under one of ``_TIME_KEYS``); failed scrapes are skipped."""
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


def _delta(first: float | None, last: float | None) -> float | None:
    if first is None or last is None:
        return None
    # A counter that went down means the server restarted: the last value is the
    # least-wrong lower bound of what happened since.
    return last - first if last >= first else last


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def scrape_summary(samples: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counter deltas over the run, gauge min/mean/max, and which metrics were absent.

    Absent metrics (never seen in any successful sample) are listed in ``absent`` and
    reported as None, never 0.
    """
    samples = list(samples)
    ok = [s for s in samples if "values" in s]
    out: dict[str, Any] = {
        "samples": len(samples),
        "failed_samples": len(samples) - len(ok),
        "span_s": ok[-1]["t"] - ok[0]["t"] if len(ok) > 1 else 0.0 if ok else None,
    }
    if samples and not ok:
        out["error"] = samples[-1].get("error")
    seen: set[str] = set()
    for s in ok:
        v = s["values"]
        for group in ("gauges", "counters", "labelled", "histograms"):
            seen.update(v[group])
        if v.get("cache_config"):
            seen.add(CACHE_CONFIG)
    first, last = (ok[0]["values"], ok[-1]["values"]) if ok else ({}, {})

    def counter_delta(name: str) -> float | None:
        return _delta(first.get("counters", {}).get(name), last.get("counters", {}).get(name))

    def labelled_delta(name: str) -> dict[str, float | None] | None:
        a, b = first.get("labelled", {}).get(name), last.get("labelled", {}).get(name)
        if b is None:
            return None
        a = a or {}
        return {k: _delta(a.get(k, 0.0), v) for k, v in sorted(b.items(), key=_label_order)}

    counters = {name: counter_delta(name) for name in COUNTERS}
    out["counters"] = counters
    out["prefix_cache_hit_ratio"] = _ratio(
        counters["vllm:prefix_cache_hits_total"], counters["vllm:prefix_cache_queries_total"]
    )
    out["preemptions"] = counters["vllm:num_preemptions_total"]
    out["request_success"] = labelled_delta("vllm:request_success_total")
    per_pos = labelled_delta("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    drafts = counters["vllm:spec_decode_num_drafts_total"]
    draft_tokens = counters["vllm:spec_decode_num_draft_tokens_total"]
    accepted = counters["vllm:spec_decode_num_accepted_tokens_total"]
    out["spec_decode"] = {
        "num_drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "accepted_per_position": list(per_pos.values()) if per_pos is not None else None,
        "draft_acceptance_rate": _ratio(accepted, draft_tokens),
        "acceptance_length": 1.0 + accepted / drafts if accepted is not None and drafts else None,
    }
    gauges: dict[str, Any] = {}
    for name in GAUGES:
        values = [s["values"]["gauges"][name] for s in ok if name in s["values"]["gauges"]]
        gauges[name] = (
            {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}
            if values
            else None
        )
    out["gauges"] = gauges
    hist_deltas: dict[str, dict[str, float | None] | None] = {}
    for name in HISTOGRAMS:
        a, b = first.get("histograms", {}).get(name), last.get("histograms", {}).get(name)
        if b is None:
            hist_deltas[name] = None
            continue
        a = a or {"count": 0.0, "sum": 0.0}
        n, total = _delta(a["count"], b["count"]), _delta(a["sum"], b["sum"])
        hist_deltas[name] = {"count": n, "sum": total, "mean": _ratio(total, n)}
    out["histograms"] = hist_deltas
    expected = [*GAUGES, *COUNTERS, *LABELLED, *HISTOGRAMS, CACHE_CONFIG]
    out["absent"] = [name for name in expected if name not in seen]
    return out


def _label_order(item: tuple[str, float]) -> tuple[int, Any]:
    k = item[0]
    return (0, int(k)) if k.isdigit() else (1, k)


def metrics_series(samples: Iterable[Mapping[str, Any]]) -> dict[str, list]:
    """Over-time series for the report: KV usage, running and waiting requests per sample."""
    out: dict[str, list] = {"t": [], "kv_cache_usage_perc": [], "running": [], "waiting": []}
    for s in samples:
        if "values" not in s:
            continue
        g = s["values"]["gauges"]
        out["t"].append(s["t"])
        out["kv_cache_usage_perc"].append(g.get("vllm:kv_cache_usage_perc"))
        out["running"].append(g.get("vllm:num_requests_running"))
        out["waiting"].append(g.get("vllm:num_requests_waiting"))
    return out


def spec_decode_crosscheck(
    aggregate_spec: Mapping[str, Any], scrape: Mapping[str, Any]
) -> dict[str, Any]:
    """Client-side spec-decode sums next to the server's counter deltas, with differences.

    ``aggregate_spec``: ``Aggregate.summary()["overall"]["spec_decode"]``; ``scrape``:
    ``scrape_summary(...)``. ``difference`` = server - client. The server counts every
    request it served during the scrape window (other clients, requests still running or
    cancelled), so a small positive difference is expected; a large one means the
    per-request stats are missing or wrong.
    """
    server = scrape.get("spec_decode") or {}
    pairs = {
        "accepted_tokens": ("accepted_tokens", "accepted_tokens"),
        "draft_tokens": ("draft_tokens", "draft_tokens"),
        "spec_steps": ("spec_steps", "num_drafts"),
        "draft_acceptance_rate": ("draft_acceptance_rate", "draft_acceptance_rate"),
        "acceptance_length": ("acceptance_length_pooled", "acceptance_length"),
    }
    out: dict[str, Any] = {}
    for name, (ck, sk) in pairs.items():
        c, s = aggregate_spec.get(ck), server.get(sk)
        diff = s - c if c is not None and s is not None else None
        rel = diff / c if diff is not None and c else None
        out[name] = {"client": c, "server": s, "difference": diff, "relative": rel}
    c_pos = list(aggregate_spec.get("accepted_per_position") or [])
    s_pos = server.get("accepted_per_position")
    n = max(len(c_pos), len(s_pos or []))
    out["accepted_per_position"] = {
        "client": c_pos or None,
        "server": s_pos,
        "difference": (
            [
                (s_pos[i] if i < len(s_pos) else 0) - (c_pos[i] if i < len(c_pos) else 0)
                for i in range(n)
            ]
            if s_pos is not None and c_pos
            else None
        ),
    }
    out["server_absent"] = server.get("accepted_tokens") is None
    return out
