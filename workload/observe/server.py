"""What the server says about itself: /metrics scrapes, server-log parsing, deployment fingerprint.

HTTP here is start-up and background only (urllib, one request at a time); the API key
goes into the Authorization header and nowhere else — never into a sample, an error
string or a log line.

Shapes:

- ``parse_metrics(text)`` -> ``{"gauges": {name: v}, "counters": {name: v},
  "labelled": {name: {label_value: v}}, "histograms": {name: {"count", "sum",
  "buckets": {le: cumulative}}}, "cache_config": [{label: str}, ...] (one per engine),
  "engines": [engine ids]}``. Series of one name are summed across engines and models,
  except ``vllm:kv_cache_usage_perc`` (a fraction: averaged).
- A scrape sample (``MetricsScraper.scrape_once``, one line of metrics.jsonl):
  ``{"t": unix_s, "scrape_ms": float, "values": parse_metrics(...)}`` or
  ``{"t": unix_s, "scrape_ms": float, "error": "..."}``.
- ``fingerprint(...)`` -> ``{field: {"value": ..., "source": SOURCE | None}}`` (see
  ``SOURCES``); what could not be observed is ``{"value": "unknown", "source": None}``.
  The one extra key ``_probes`` says what each endpoint answered.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

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

SOURCES = (
    "/version",
    "/v1/models",
    "/metrics cache_config_info",
    "/server_info",
    "server log",
    "operator label",
    "response system_fingerprint",
)
UNKNOWN: dict[str, Any] = {"value": "unknown", "source": None}


# ---------------------------------------------------------------- /metrics parsing


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


# ---------------------------------------------------------------- HTTP


def _get(
    base_url: str, path: str, api_key: str | None, timeout_s: float
) -> tuple[int | None, bytes | str]:
    """(status, body) on an HTTP answer, (None, reason) when nothing usable came back."""
    req = urllib.request.Request(base_url.rstrip("/") + path, method="GET")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return None, f"{type(e).__name__}: {reason}"


# ---------------------------------------------------------------- scraping


class MetricsScraper:
    """Samples /metrics every ``interval_s`` on a background thread and hands each to ``sink``.

    Uses ``threading`` only, so under gevent monkey-patching it runs as a greenlet and
    its blocking socket reads yield. ``start()`` takes a first sample at once and
    ``stop()`` a last one, so counter deltas span the run. Samples are also kept in
    ``samples`` for ``scrape_summary``.
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
    ) -> None:
        self.base_url = base_url
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
        status, body = _get(self.base_url, "/metrics", self._api_key, self.timeout_s)
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
        """Stop sampling (taking one last sample) and return all samples."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=self.timeout_s + self.interval_s + 1.0)
            self._thread = None
            if final_sample:
                self._emit(self.scrape_once())
        return self.samples


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


# ---------------------------------------------------------------- server log


_LINE = re.compile(
    r"^(?:\((?P<proc>[^)]*)\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d\d-\d\d\s+[\d:.]+\s+\[(?P<src>[^\]]+)\]\s+(?P<msg>.*)$"
)
_FALLBACK = re.compile(
    r"using the V1 model runner instead|Defaulting to V1 model runner|"
    r"fall(?:ing)?\s*back to (?:the )?(?:V1|MRV1)",
    re.I,
)
_PATTERNS = {
    "version": re.compile(r"Initializing a V\d LLM engine \(v(?P<v>[^)\s]+)\)"),
    "banner_version": re.compile(r"█\s+version\s+(?P<v>\d+\.\d+\S*)"),
    "architecture": re.compile(r"Resolved architecture: (?P<v>\w+)"),
    "max_model_len": re.compile(r"Using max model len (?P<v>\d+)"),
    "attention_backend": re.compile(
        r"Using (?:AttentionBackendEnum\.)?(?P<v>[A-Z][A-Z0-9_]+) backend\b"
    ),
    "weights": re.compile(
        r"Model loading took\s+(?P<gib>[\d.]+)\s*GiB(?:\s+memory)?(?:\s+and\s+(?P<s>[\d.]+)\s*s)?"
    ),
    # GPU: "Available KV cache memory: X GiB"; CPU: "Explicitly set (X/total) GiB for KV cache"
    "kv_memory": re.compile(
        r"(?:Available KV cache memory:\s*|Explicitly set \()(?P<v>-?[\d.]+)\s*(?:/[\d.]+\)\s*)?GiB"
    ),
    "kv_tokens": re.compile(r"\b[A-Z]PU KV cache size:\s*(?P<v>[\d,]+)\s*tokens"),
    "concurrency": re.compile(
        r"Maximum concurrency for\s*(?P<tok>[\d,]+)\s*tokens per request:\s*(?P<x>[\d.]+)x"
    ),
    "graph": re.compile(
        r"Graph capturing finished in\s+(?P<s>\d+)\s+secs?(?:,\s*took\s+(?P<gib>-?[\d.]+)\s*GiB)?"
    ),
    "graph_estimate": re.compile(r"Estimated CUDA graph memory:\s*(?P<v>[\d.]+)\s*GiB"),
}
_ENGINE_CONFIG = {
    "tensor_parallel_size": re.compile(r"\btensor_parallel_size=(\d+)"),
    "pipeline_parallel_size": re.compile(r"\bpipeline_parallel_size=(\d+)"),
    "data_parallel_size": re.compile(r"\bdata_parallel_size=(\d+)"),
    "quantization": re.compile(r"\bquantization=([\w-]+)"),
    "kv_cache_dtype": re.compile(r"\bkv_cache_dtype=([\w-]+)"),
    "enforce_eager": re.compile(r"\benforce_eager=(True|False)"),
}

LOG_FIELDS = (
    "model_runner",
    "model_runner_evidence",
    "fallback_warnings",
    "runner_notices",
    "version",
    "architecture",
    "max_model_len",
    "attention_backend",
    *_ENGINE_CONFIG,
    "weights_memory_gib",
    "weights_load_s",
    "kv_cache_memory_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "cuda_graph_memory_gib",
    "cuda_graph_capture_s",
    "estimated_cuda_graph_memory_gib",
)


def parse_server_log(text: str) -> dict[str, Any]:
    """Facts from vLLM start-up lines; every key of LOG_FIELDS present, None when not seen.

    The model runner is "V2" on "Using V2 Model Runner", else "V1" on a fallback warning
    ("...; using the V1 model runner instead.", "Defaulting to V1 model runner ...") or on
    lines logged from the V1 runner's module (gpu_model_runner.py); otherwise None.
    With several workers (TP/PP) the first value of each per-worker line is kept. Lines
    starting with '#' are ignored (notes added by hand, fixture provenance).
    """
    out: dict[str, Any] = dict.fromkeys(LOG_FIELDS)
    out["fallback_warnings"], out["runner_notices"] = [], []
    v2_line = v1_fallback = v1_source = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # operator notes, fixture provenance
            continue
        m = _LINE.match(line)
        msg, src = (m.group("msg"), m.group("src")) if m else (line, "")
        if "Using V2 Model Runner" in msg:
            v2_line = v2_line or msg
        elif _FALLBACK.search(msg):
            v1_fallback = v1_fallback or msg
            if msg not in out["fallback_warnings"]:
                out["fallback_warnings"].append(msg)
        elif "Model Runner V2 does not yet support" in msg and msg not in out["runner_notices"]:
            out["runner_notices"].append(msg)
        if src.startswith("gpu_model_runner.py") and v1_source is None:
            v1_source = f"[{src}] {msg}"
        _match_facts(msg, out)
    if v2_line:
        out["model_runner"], out["model_runner_evidence"] = "V2", v2_line
    elif v1_fallback:
        out["model_runner"], out["model_runner_evidence"] = "V1", v1_fallback
    elif v1_source:
        out["model_runner"], out["model_runner_evidence"] = "V1", v1_source
    return out


def _config_value(val: str) -> Any:
    if val.isdigit():
        return int(val)
    return {"None": None, "True": True, "False": False}.get(val, val)


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _match_facts(msg: str, out: dict[str, Any]) -> None:
    p = _PATTERNS
    if out["version"] is None:
        m = p["version"].search(msg) or p["banner_version"].search(msg)
        if m:
            out["version"] = m.group("v")
    if "Initializing a V" in msg and "LLM engine" in msg:
        for key, rx in _ENGINE_CONFIG.items():
            m = rx.search(msg)
            if m and out[key] is None:
                out[key] = _config_value(m.group(1))
        m = re.search(r"\bmax_seq_len=(\d+)", msg)
        if m and out["max_model_len"] is None:
            out["max_model_len"] = int(m.group(1))
    simple = (
        ("architecture", "architecture", str),
        ("max_model_len", "max_model_len", int),
        ("attention_backend", "attention_backend", str),
        ("kv_memory", "kv_cache_memory_gib", float),
        ("graph_estimate", "estimated_cuda_graph_memory_gib", float),
    )
    for pat, key, conv in simple:
        if out[key] is None:
            m = p[pat].search(msg)
            if m:
                out[key] = conv(m.group("v"))
    if out["kv_cache_tokens"] is None:
        m = p["kv_tokens"].search(msg)
        if m:
            out["kv_cache_tokens"] = int(_num(m.group("v")))
    if out["max_concurrency"] is None:
        m = p["concurrency"].search(msg)
        if m:
            out["max_concurrency"] = {
                "tokens_per_request": int(_num(m.group("tok"))),
                "factor": float(m.group("x")),
            }
    if out["weights_memory_gib"] is None:
        m = p["weights"].search(msg)
        if m:
            out["weights_memory_gib"] = float(m.group("gib"))
            out["weights_load_s"] = float(m.group("s")) if m.group("s") else None
    if out["cuda_graph_capture_s"] is None:
        m = p["graph"].search(msg)
        if m:
            out["cuda_graph_capture_s"] = float(m.group("s"))
            out["cuda_graph_memory_gib"] = float(m.group("gib")) if m.group("gib") else None


# ---------------------------------------------------------------- fingerprint


def _field(value: Any, source: str | None) -> dict[str, Any]:
    if value is None or value == "" or value == "None" or source is None:
        return dict(UNKNOWN)
    return {"value": value, "source": source}


def _first(*candidates: tuple[Any, str]) -> dict[str, Any]:
    """The first observed (value, source) pair, else unknown."""
    for value, source in candidates:
        if value is not None and value != "" and value != "None":
            return {"value": value, "source": source}
    return dict(UNKNOWN)


def _json(body: bytes | str) -> Any:
    if not isinstance(body, bytes):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _int(x: Any) -> int | None:
    try:
        return int(str(x))
    except (TypeError, ValueError):
        return None


def _float(x: Any) -> float | None:
    try:
        return float(str(x))
    except (TypeError, ValueError):
        return None


def _dig(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def fingerprint(
    base_url: str,
    *,
    api_key: str | None = None,
    labels: Mapping[str, str] | None = None,
    server_log_text: str | None = None,
    system_fingerprint: str | None = None,
    timeout_s: float = 5.0,
) -> dict[str, dict[str, Any]]:
    """What this deployment is, field by field, each with where it was observed.

    Probes /version, /v1/models, /metrics (cache_config_info) and /server_info (vLLM dev
    mode only); parses the optional server log; adds operator labels as ``label.<k>``.
    ``system_fingerprint`` is the value seen on responses, if the caller has one.
    Never raises for an unreachable or non-vLLM server: fields become unknown.
    """
    probes: dict[str, str] = {}

    def get(path: str) -> bytes | None:
        status, body = _get(base_url, path, api_key, timeout_s)
        probes[path.split("?")[0]] = "ok" if status == 200 else str(body)
        return body if status == 200 and isinstance(body, bytes) else None

    version = _json(get("/version") or b"")
    models = _json(get("/v1/models") or b"")
    metrics_body = get("/metrics")
    info = _json(get("/server_info?config_format=json") or b"")
    logf = parse_server_log(server_log_text) if server_log_text else dict.fromkeys(LOG_FIELDS)
    labels = dict(labels or {})

    cache: list[dict[str, str]] = []
    if metrics_body is not None:
        try:
            cache = parse_metrics(metrics_body.decode("utf-8", "replace"))["cache_config"]
        except Exception as e:
            probes["/metrics"] = f"unparseable: {type(e).__name__}"
    model0 = {}
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        model0 = models["data"][0] if isinstance(models["data"][0], dict) else {}
    vllm_env = _dig(info, "vllm_env") if isinstance(info, dict) else None
    vllm_config = _dig(info, "vllm_config")
    if not isinstance(vllm_config, dict):
        vllm_config = None  # text format: not parsed (we ask for json)

    fp: dict[str, dict[str, Any]] = {}
    fp["server_version"] = _first(
        (_dig(version, "version"), "/version"), (logf["version"], "server log")
    )
    fp["model_id"] = _field(model0.get("id"), "/v1/models")
    fp["model_root"] = _field(model0.get("root"), "/v1/models")
    fp["max_model_len"] = _first(
        (model0.get("max_model_len"), "/v1/models"),
        (_dig(vllm_config, "model_config", "max_model_len"), "/server_info"),
        (logf["max_model_len"], "server log"),
    )
    if isinstance(models, dict) and len(models.get("data") or []) > 1:
        fp["served_models"] = _field([m.get("id") for m in models["data"]], "/v1/models")
    fp["system_fingerprint"] = _field(system_fingerprint, "response system_fingerprint")

    src = "/metrics cache_config_info"
    c0 = cache[0] if cache else {}
    block_size = _int(c0.get("block_size"))
    blocks = [_int(c.get("num_gpu_blocks")) for c in cache]
    fp["kv_block_size"] = _field(block_size, src)
    known_blocks = bool(blocks) and all(b is not None for b in blocks)
    fp["kv_num_gpu_blocks"] = _field(
        (blocks[0] if len(set(blocks)) == 1 else blocks) if known_blocks else None, src
    )
    # Newer vLLM reports the pool size itself; otherwise block_size x num_gpu_blocks.
    reported = [_int(c.get("kv_cache_size_tokens")) for c in cache]
    fp["kv_capacity_tokens"] = _first(
        (sum(reported) if reported and None not in reported else None, src),  # type: ignore[arg-type]
        (block_size * sum(blocks) if block_size and known_blocks else None, src),  # type: ignore[arg-type]
        (logf["kv_cache_tokens"], "server log"),
    )
    mem_bytes = _int(c0.get("kv_cache_memory_bytes"))
    fp["kv_engines"] = _field(len(cache) if cache else None, src)
    fp["kv_cache_dtype"] = _first(
        (c0.get("cache_dtype"), src), (logf["kv_cache_dtype"], "server log")
    )
    fp["prefix_caching"] = _field(c0.get("enable_prefix_caching"), src)
    fp["gpu_memory_utilization"] = _field(c0.get("gpu_memory_utilization"), src)
    fp["cache_config"] = _field(c0 or None, src)

    env = vllm_env if isinstance(vllm_env, dict) else {}
    fp["vllm_env"] = _field(env or None, "/server_info")
    fp["vllm_use_v2_model_runner"] = _field(env.get("VLLM_USE_V2_MODEL_RUNNER"), "/server_info")
    fp["model_runner"] = _first(
        (logf["model_runner"], "server log"), (labels.get("runner"), "operator label")
    )
    fp["model_runner_evidence"] = _field(logf["model_runner_evidence"], "server log")
    fp["fallback_warnings"] = (
        _field(logf["fallback_warnings"], "server log") if server_log_text else dict(UNKNOWN)
    )
    if server_log_text and not logf["fallback_warnings"]:
        fp["fallback_warnings"] = {"value": [], "source": "server log"}
    fp["attention_backend"] = _first(
        (env.get("VLLM_ATTENTION_BACKEND"), "/server_info"),
        (_dig(vllm_config, "attention_config", "backend"), "/server_info"),
        (logf["attention_backend"], "server log"),
    )
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        fp[key] = _first(
            (_dig(vllm_config, "parallel_config", key), "/server_info"),
            (logf[key], "server log"),
        )
    fp["quantization"] = _first(
        (_dig(vllm_config, "model_config", "quantization"), "/server_info"),
        (logf["quantization"], "server log"),
        (labels.get("quantization"), "operator label"),
    )
    fp["kv_cache_memory_gib"] = _first(
        (round(mem_bytes / 2**30, 3) if mem_bytes else None, src),
        (logf["kv_cache_memory_gib"], "server log"),
    )
    fp["max_concurrency"] = _first(
        (_float(c0.get("kv_cache_max_concurrency")), src),
        ((logf["max_concurrency"] or {}).get("factor"), "server log"),
    )
    for key in (
        "architecture",
        "weights_memory_gib",
        "kv_cache_tokens",
        "cuda_graph_memory_gib",
        "estimated_cuda_graph_memory_gib",
    ):
        fp[key] = _field(logf[key], "server log")
    for k, v in labels.items():
        fp[f"label.{k}"] = _field(v, "operator label")
    fp["_probes"] = probes  # type: ignore[assignment]
    return fp


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields whose values differ between two fingerprints: {field: (value_a, value_b)}."""
    out = {}
    for key in sorted(set(a) | set(b)):
        if key.startswith("_"):
            continue
        va = (a.get(key) or UNKNOWN).get("value")
        vb = (b.get(key) or UNKNOWN).get("value")
        if va != vb:
            out[key] = (va, vb)
    return out
