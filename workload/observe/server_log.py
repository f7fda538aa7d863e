"""Facts from a vLLM server's start-up log: version, model runner, KV sizing, parallelism."""

from __future__ import annotations

import re
from typing import Any

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
