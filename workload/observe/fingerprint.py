"""What a deployment is, field by field, each with where it was observed.

``fingerprint(...)`` -> ``{field: {"value": ..., "source": SOURCE | None}}`` (see
``SOURCES``); what could not be observed is ``{"value": "unknown", "source": None}``.
The one extra key ``_probes`` says what each endpoint answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from workload.observe.http_get import http_get
from workload.observe.metrics import parse_metrics
from workload.observe.server_log import LOG_FIELDS, parse_server_log

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
        status, body = http_get(base_url, path, api_key, timeout_s)
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

    fp: dict[str, dict[str, Any]] = {}  # field order: as the report lists them
    fp.update(_model_fields(version, models, model0, vllm_config, logf, system_fingerprint))
    fp.update(_cache_fields(cache, logf))
    fp.update(_engine_fields(vllm_env, vllm_config, logf, labels, server_log_text))
    fp.update(_memory_fields(cache, logf))
    for k, v in labels.items():
        fp[f"label.{k}"] = _field(v, "operator label")
    fp["_probes"] = probes  # type: ignore[assignment]
    return fp


def _model_fields(
    version: Any,
    models: Any,
    model0: dict[str, Any],
    vllm_config: Any,
    logf: dict[str, Any],
    system_fingerprint: str | None,
) -> dict[str, dict[str, Any]]:
    """Server version, the served model(s), max_model_len, the responses' fingerprint."""
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
    return fp


def _cache_fields(cache: list[dict[str, str]], logf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The KV cache as /metrics cache_config_info (else the server log) reports it."""
    fp: dict[str, dict[str, Any]] = {}
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
    fp["kv_engines"] = _field(len(cache) if cache else None, src)
    fp["kv_cache_dtype"] = _first(
        (c0.get("cache_dtype"), src), (logf["kv_cache_dtype"], "server log")
    )
    fp["prefix_caching"] = _field(c0.get("enable_prefix_caching"), src)
    fp["gpu_memory_utilization"] = _field(c0.get("gpu_memory_utilization"), src)
    fp["cache_config"] = _field(c0 or None, src)

    return fp


def _engine_fields(
    vllm_env: Any,
    vllm_config: Any,
    logf: dict[str, Any],
    labels: dict[str, str],
    server_log_text: str | None,
) -> dict[str, dict[str, Any]]:
    """vLLM's environment, model runner, fallbacks, attention backend, parallelism."""
    fp: dict[str, dict[str, Any]] = {}
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
    return fp


def _memory_fields(cache: list[dict[str, str]], logf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """KV memory, max concurrency, and what only the server log says."""
    src = "/metrics cache_config_info"
    c0 = cache[0] if cache else {}
    mem_bytes = _int(c0.get("kv_cache_memory_bytes"))
    fp: dict[str, dict[str, Any]] = {}
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
    return fp


def flatten_fingerprint(d: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Fingerprint leaves: dotted path -> (value, source); a dict value shows as its fields."""
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
            out.update(flatten_fingerprint(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = (d, None)
    return out


def fingerprint_diff(run_a: Mapping[str, Any], run_b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{field, a, b, source_a, source_b}`` for what differs between two run.json
    dicts: their `fingerprint` and `labels` leaves (see ``flatten_fingerprint``) and the
    target's model and max_model_len."""
    rows = []
    for section in ("fingerprint", "labels"):
        fa = flatten_fingerprint(run_a.get(section) or {})
        fb = flatten_fingerprint(run_b.get(section) or {})
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
