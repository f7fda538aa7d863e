"""Small builders that write synthetic run directories for tests.

A built run looks like what `agentload run` leaves behind (docs/artifacts.md,
"Files"): run.json, requests.jsonl, sessions.jsonl and, optionally,
metrics.jsonl. Latencies come from a per-(session, step) base value that
depends only on `traffic_seed`, times independent noise from `noise_seed`, so
two runs with the same traffic seed pair the way seeded agentload traffic does.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workload.measure.artifacts import JsonlWriter, write_json
from workload.measure.records import RequestRecord, SessionRecord


@dataclass
class ClassSpec:
    """One traffic class of a synthetic run."""

    sessions: int = 60
    steps: int = 4
    ttft_ms: float = 200.0  # median of the base TTFT
    itl_ms: float = 20.0
    completion_tokens: int = 64
    prompt_tokens: int = 2000
    cached_ratio: float = 0.6
    spec_decode: bool = True


def _default_classes() -> dict[str, ClassSpec]:
    return {
        "interactive": ClassSpec(),
        "background": ClassSpec(sessions=20, steps=2, ttft_ms=800.0),
    }


@dataclass
class RunSpec:
    """Everything a synthetic run varies; defaults give a small healthy run."""

    run_id: str = "run-a"
    classes: dict[str, ClassSpec] = field(default_factory=_default_classes)
    traffic_seed: int = 7
    noise_seed: int = 1
    noise_sigma: float = 0.05  # lognormal sigma of per-request noise around the base
    ttft_scale: float = 1.0  # multiply every TTFT (inject a regression)
    itl_scale: float = 1.0
    failed_sessions: float = 0.0  # share of sessions that fail (last step errors)
    tool_loop_failures: float = 0.0  # share of sessions ending in a tool-loop failure
    session_share: float = 1.0  # share of planned sessions that ran (fewer = slower run)
    duration_s: float = 120.0
    model: str = "sim-model"
    fingerprint: dict[str, Any] = field(
        default_factory=lambda: {
            "version": {"value": "0.28.0", "source": "/version"},
            "num_gpu_blocks": {"value": 4096, "source": "/metrics cache_config_info"},
            "model_runner": {"value": "unknown", "source": "unobservable"},
        }
    )
    labels: dict[str, str] = field(default_factory=dict)
    compare: dict[str, Any] | None = None  # profile compare section
    metrics: bool = True  # write metrics.jsonl
    seed: int = 42


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


def write_run(path: Path, spec: RunSpec | None = None, **overrides: Any) -> Path:
    """Write a synthetic run directory at `path` and return it."""
    spec = spec or RunSpec()
    for k, v in overrides.items():
        setattr(spec, k, v)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    traffic = np.random.default_rng(spec.traffic_seed)
    noise = np.random.default_rng(spec.noise_seed)
    t0 = 1_700_000_000.0
    reqs = JsonlWriter(path / "requests.jsonl")
    sess = JsonlWriter(path / "sessions.jsonl")
    for cname, cs in spec.classes.items():
        # Base values depend on the traffic seed only, so runs pair by session id.
        base = traffic.lognormal(np.log(cs.ttft_ms), 0.5, size=(cs.sessions, cs.steps))
        base_itl = traffic.lognormal(np.log(cs.itl_ms), 0.3, size=(cs.sessions, cs.steps))
        starts = np.sort(traffic.uniform(0, spec.duration_s * 0.8, size=cs.sessions))
        fate = traffic.uniform(size=cs.sessions)
        ran = int(round(cs.sessions * spec.session_share))
        for i in range(ran):
            sid = f"{cname}-{i:05d}"
            t = t0 + float(starts[i])
            outcome, reason = "completed", None
            fail_at = None
            if fate[i] < spec.failed_sessions:
                outcome, reason, fail_at = "failed", "http_status", cs.steps
            elif fate[i] < spec.failed_sessions + spec.tool_loop_failures:
                outcome, reason, fail_at = "tool_loop_failure", "malformed tool call", cs.steps
            srec = SessionRecord(
                run_id=spec.run_id, user_class=cname, session_id=sid, t_start=t,
                steps_planned=cs.steps, outcome=outcome, reason=reason,
            )  # fmt: skip
            for step in range(1, cs.steps + 1):
                n = noise.lognormal(0.0, spec.noise_sigma, size=2)
                ttft = float(base[i, step - 1] * n[0] * spec.ttft_scale)
                itl = float(base_itl[i, step - 1] * n[1] * spec.itl_scale)
                comp = cs.completion_tokens
                e2e = ttft + itl * (comp - 1)
                rec = RequestRecord(
                    run_id=spec.run_id, target="http://127.0.0.1:8000", user_class=cname,
                    session_id=sid, step=step, request_id=f"{sid}-{step}", model=spec.model,
                    t_start=t, ttft_ms=ttft, e2e_ms=e2e, tpot_ms=(e2e - ttft) / (comp - 1),
                    itl_ms={"mean": itl, "p50": itl, "p99": itl * 2, "max": itl * 3},
                    chunks=comp, prompt_tokens=cs.prompt_tokens, completion_tokens=comp,
                    cached_tokens=int(cs.prompt_tokens * cs.cached_ratio), finish_reason="length",
                )  # fmt: skip
                if cs.spec_decode:
                    acc = int(comp * 0.6)
                    rec.spec_decode = {
                        "mean_acceptance_length": 1.0 + acc / max(1, comp - acc),
                        "draft_acceptance_rate": acc / (comp * 1.5),
                        "acceptance_histogram": [comp - acc, acc // 2, acc - acc // 2],
                        "num_spec_steps": comp - acc,
                        "num_accepted_draft_tokens": acc,
                        "num_draft_tokens": int(comp * 1.5),
                        "num_spec_tokens": 2,
                    }
                if step == fail_at:
                    rec.status = "error"
                    rec.error_kind = "http_status" if outcome == "failed" else "tool_loop"
                    rec.http_status = 500 if outcome == "failed" else 200
                    rec.ttft_ms = rec.e2e_ms = rec.tpot_ms = rec.itl_ms = None
                reqs.write(rec.to_json())
                srec.requests += 1
                srec.errors += 0 if rec.ok else 1
                srec.steps_done += 1
                srec.prompt_tokens += cs.prompt_tokens
                srec.cached_tokens += rec.cached_tokens or 0
                srec.completion_tokens += comp
                t += (e2e if rec.ok else 50.0) / 1000.0 + 1.0
            srec.duration_ms = (t - srec.t_start) * 1000.0
            sess.write(srec.to_json())
    reqs.close()
    sess.close()
    if spec.metrics:
        mw = JsonlWriter(path / "metrics.jsonl")
        for k in range(int(spec.duration_s // 5) + 1):
            mw.write(
                {
                    "t": t0 + 5 * k,
                    # workload.observe.metrics.MetricsScraper sample shape
                    "values": {
                        "gauges": {
                            "vllm:kv_cache_usage_perc": 0.3 + 0.4 * k / (spec.duration_s / 5),
                            "vllm:num_requests_running": 8.0 + k % 3,
                            "vllm:num_requests_waiting": float(k % 4),
                        },
                        "counters": {
                            "vllm:num_preemptions_total": float(k // 10),
                            "vllm:prefix_cache_queries_total": 1000.0 * k,
                            "vllm:prefix_cache_hits_total": 600.0 * k,
                        },
                        "labelled": {},
                        "histograms": {},
                        "cache_config": [{"block_size": "16", "num_gpu_blocks": "4096"}],
                        "engines": ["0"],
                    },
                }
            )
        mw.close()
    profile: dict[str, Any] = {"name": "synthetic", "seed": spec.seed}
    if spec.compare is not None:
        profile["compare"] = spec.compare
    write_json(
        path / "run.json",
        {
            "schema_version": 1,
            "run_id": spec.run_id,
            "started_at": _iso(t0),
            "ended_at": _iso(t0 + spec.duration_s),
            "argv": ["agentload", "run"],
            "profile": profile,
            "seed": spec.seed,
            "labels": spec.labels,
            "target": {"url": "http://127.0.0.1:8000", "model": spec.model, "max_model_len": 32768},
            "fingerprint": spec.fingerprint,
            "summary": {},
            "slo_results": [],
            "exit_code": 0,
            "workers": 1,
        },
    )
    return path
