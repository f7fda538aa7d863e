"""Simulator configuration: one flat dataclass, named presets, `--set` and `--fault` parsing.

A preset is a set of overrides on `SimConfig` defaults. The two version presets
(`vllm-0.28-v1`, `vllm-0.29-v2`) are illustrative, not measured: they differ by a
KV pool size, a step overhead and a draft acceptance that nobody measured on
those versions, and they claim no behaviour nobody documented. A measured twin
comes from `agentload sim calibrate`; a candidate with a stated mechanism is a
named scenario (SCENARIOS, e.g. `larger-batch-budget`, `spec-off-for-structured`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field

from workload.errors import SimConfigError

FAULT_KINDS = ("429", "500", "503", "reset", "malformed", "stall", "slow")
SCHEDULING_POLICIES = ("fcfs", "priority")
SPEC_METRICS_MODES = ("none", "summary", "detailed")
REASONING_FIELDS = ("", "reasoning", "reasoning_content")


@dataclass
class SimConfig:
    """Everything the simulator can be told; units are in the field names."""

    preset: str = "default"
    # identity, as /version, /v1/models and cache_config_info show it
    model: str = "agentload/sim-8b"
    model_root: str = "agentload/sim-8b"
    version: str = "0.33.0"
    # "" = vLLM's format, `vllm-<version>-<8 hex of a hash of this config>`
    system_fingerprint: str = ""
    max_model_len: int = 32768
    # scheduler
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_waiting: int = 2048  # admission limit; past it requests get 503
    enable_chunked_prefill: bool = True  # off: a prompt over the step budget waits
    long_prefill_token_threshold: int = 0  # cap per prefill chunk when >1 request (0 = none)
    async_scheduling: bool = False  # host work overlaps the device: step = max(host, device)
    api_ms_per_request: float = 0.0  # API-server time per request, served one at a time
    api_latency_ms: float = 0.0  # further API-path delay per request that overlaps others
    scheduling_policy: str = "priority"
    # KV cache
    block_size: int = 16
    num_gpu_blocks: int = 16384
    kv_bytes_per_token: int = 131072  # cache_config_info kv_cache_memory_bytes (8B, bf16, GQA)
    gpu_memory_utilization: float = 0.9
    cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    # latency model (milliseconds)
    step_overhead_ms: float = 4.0
    prefill_ms_per_token: float = 0.06
    decode_ms_base: float = 7.0
    decode_ms_per_seq: float = 0.04
    attn_ms_per_kctx: float = 0.004  # attention reads, per 1k context tokens in the batch
    attn_ms_per_mpair: float = 0.0  # attention compute, per 1M (query, key) pairs
    draft_ms_per_token: float = 0.02
    ttft_scale: float = 1.0  # multiplies steps that carry prefill (canary regressions)
    itl_scale: float = 1.0  # multiplies decode work
    # outputs
    output_len_mean: int = 160  # natural (EOS) length, log-normal around this mean
    output_len_sigma: float = 0.6
    tool_call_prob: float = 0.7  # tool_choice "auto" with tools offered
    malformed_tool_rate: float = 0.0
    # speculative decoding
    spec_k: int = 3
    spec_accept_base: float = 0.55
    spec_accept_rep_gain: float = 0.4  # extra acceptance for fully repetitive content
    spec_metrics: str = "summary"  # none | summary | detailed (per-request object)
    spec_propose_rate: float = 1.0  # share of decode steps the proposer has drafts for
    # a request's first decode steps without drafts (an n-gram proposer finds no match
    # before the answer repeats itself); spec_propose_rate applies after them
    spec_cold_steps: int = 0
    # measured conditional acceptance per draft position, comma-separated ("0.9,0.8,0.7"),
    # from a server's vllm:spec_decode_* counters (`agentload sim calibrate`); when set it
    # replaces spec_accept_base and the content model (spec_accept_rep_gain)
    spec_accept_by_pos: str = ""
    spec_fallback_structured: bool = False  # no drafts for structured outputs (a scenario)
    # API features (vLLM flags)
    enable_prompt_tokens_details: bool = True
    enable_per_request_metrics: bool = True
    dev_mode: bool = False  # VLLM_SERVER_DEV_MODE=1: /server_info exists
    model_runner: str = "v1"
    # vLLM --reasoning-parser: "" none (thinking_token_budget is ignored, no reasoning streams);
    # else the delta field reasoning streams in ("reasoning": vLLM 0.32; "reasoning_content":
    # older vLLM and DeepSeek's API). A request's thinking_token_budget tokens come first.
    reasoning_field: str = ""
    # instance noise (costmodel.InstanceNoise): sized to the per-block spread of real vLLM-CPU
    # A/A pairs measured one server at a time (docs/simulator.md, "Instance noise";
    # bench/results/real-5). Off here so the engine and its tests stay deterministic;
    # `python -m workload.sim` turns it on unless --no-instance-noise. (A busy shared host,
    # bench/results/real-1: noise_instance_sigma=0.4, noise_drift_sigma=0.5, step 0.05.)
    instance_noise: bool = False
    instance_seed: int = 0  # which instance this is; the traffic seed is separate
    noise_instance_sigma: float = 0.03  # log-sd of the per-instance speed factor (mean 1)
    noise_drift_sigma: float = 0.06  # log-sd of the slow speed drift (host load that moves)
    noise_drift_tau_s: float = 15.0  # correlation time of the drift
    noise_step_sigma: float = 0.01  # log-sd of per-step jitter (mean 1)
    noise_stall_rate_hz: float = 0.1  # freezes per second of engine time, busy or idle
    noise_stall_ms: float = 150.0  # mean freeze length (exponential)
    # the API server's own freezes (a process of its own in vLLM): new requests wait them out.
    # Sized (bench_sim_noise.py --real real-5) to real-5's TTFT p95 spread, which the engine's
    # noise alone left at 0.2-0.5x: 12 % of the time frozen, in 60 ms spells.
    noise_api_stall_rate_hz: float = 2.0
    noise_api_stall_ms: float = 60.0
    # the API server's slow spells: stretches (Poisson starts, exponential lengths) in which
    # every new request waits a little longer before the engine sees it -- a spell's own
    # level (log-normal, mean noise_api_spell_ms) times a per-request log-normal factor. On
    # real-5 the client's TTFT minus vLLM's own time_to_first_token, in 1 s windows, was over
    # 30 ms in 21 % of the windows, in runs of ~1.6 s (rate and length from there); the level
    # is sized to the TTFT shift and p50 spread of its A/A blocks on the virtual clock
    # (bench_sim_noise.py --no-think --blocks 4 --real real-5: 12, 15, 18 ms gave TTFT shift
    # 0.86x, 0.76x, 1.21x and p50 0.57x, 0.59x, 0.86x; the real-time canary adds host jitter).
    noise_api_spell_rate_hz: float = 0.2
    noise_api_spell_s: float = 1.5
    noise_api_spell_ms: float = 15.0
    noise_api_spell_sigma: float = 0.6
    noise_api_spell_request_sigma: float = 0.5
    # fault injection: kind -> rate; stall and drip parameters
    faults: dict[str, float] = field(default_factory=dict)
    fault_stall_s: float = 30.0
    fault_drip_ms: float = 250.0

    def fingerprint(self) -> str:
        """The `system_fingerprint` replies carry: the configured one, else vLLM's format with
        a hash of everything that shapes the server (not the injected faults)."""
        if self.system_fingerprint:
            return self.system_fingerprint
        # not the injected faults, nor which instance this is (two instances of one config
        # report one fingerprint, as two real servers of one build do)
        skip = {"system_fingerprint", "faults", "fault_stall_s", "fault_drip_ms", "instance_seed"}
        ident = sorted(
            (f.name, repr(getattr(self, f.name)))
            for f in dataclasses.fields(self)
            if f.name not in skip
        )
        return f"vllm-{self.version}-{hashlib.sha256(repr(ident).encode()).hexdigest()[:8]}"

    def accept_by_pos(self) -> tuple[float, ...]:
        """spec_accept_by_pos as numbers (empty when unset); ValueError on a bad one."""
        text = self.spec_accept_by_pos.strip()
        if not text:
            return ()
        out = tuple(float(x) for x in text.split(","))
        if not all(math.isfinite(a) for a in out):
            raise ValueError(text)
        return out

    def validate(self) -> None:
        """Raise SimConfigError on values the engine cannot run with."""
        problems = []
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            problems.append(f"scheduling_policy must be one of {SCHEDULING_POLICIES}")
        if self.spec_metrics not in SPEC_METRICS_MODES:
            problems.append(f"spec_metrics must be one of {SPEC_METRICS_MODES}")
        if self.reasoning_field not in REASONING_FIELDS:
            problems.append(f"reasoning_field must be one of {REASONING_FIELDS}")
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if self.num_gpu_blocks * self.block_size < self.max_model_len:
            problems.append(
                f"KV capacity {self.num_gpu_blocks * self.block_size} tokens is below "
                f"max_model_len {self.max_model_len}"
            )
        if not 0 <= self.spec_k <= 16:
            problems.append("spec_k must be in 0..16")
        for name in (
            "tool_call_prob",
            "malformed_tool_rate",
            "spec_accept_base",
            "spec_propose_rate",
        ):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.append(f"{name} must be in [0, 1]")
        try:
            by_pos = self.accept_by_pos()
        except ValueError:
            by_pos = (-1.0,)
        if len(by_pos) > 16 or not all(0.0 <= a <= 1.0 for a in by_pos):
            problems.append("spec_accept_by_pos must be up to 16 comma-separated numbers in [0, 1]")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            problems.append(
                "without chunked prefill max_num_batched_tokens must be >= max_model_len "
                "(vLLM's rule: a whole prompt must fit one step)"
            )
        if self.spec_cold_steps < 0:
            problems.append("spec_cold_steps must be >= 0")
        if self.long_prefill_token_threshold < 0:
            problems.append("long_prefill_token_threshold must be >= 0")
        if self.instance_seed < 0:
            problems.append("instance_seed must be >= 0")
        for name in (
            "step_overhead_ms",
            "prefill_ms_per_token",
            "decode_ms_base",
            "decode_ms_per_seq",
            "attn_ms_per_kctx",
            "attn_ms_per_mpair",
            "draft_ms_per_token",
            "api_ms_per_request",
            "api_latency_ms",
            "noise_instance_sigma",
            "noise_drift_sigma",
            "noise_step_sigma",
            "noise_stall_rate_hz",
            "noise_stall_ms",
            "noise_api_stall_rate_hz",
            "noise_api_stall_ms",
            "noise_api_spell_rate_hz",
            "noise_api_spell_s",
            "noise_api_spell_ms",
            "noise_api_spell_sigma",
            "noise_api_spell_request_sigma",
        ):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if self.ttft_scale <= 0 or self.itl_scale <= 0:
            problems.append("ttft_scale and itl_scale must be > 0")
        for kind, rate in self.faults.items():
            if kind not in FAULT_KINDS:
                problems.append(f"unknown fault kind {kind!r}; kinds: {', '.join(FAULT_KINDS)}")
            elif not 0.0 <= rate <= 1.0:
                problems.append(f"fault rate for {kind} must be in [0, 1]")
        if sum(self.faults.values()) > 1.0:
            problems.append("fault rates add up to more than 1")
        if problems:
            raise SimConfigError("; ".join(problems))


PRESETS: dict[str, tuple[str, dict[str, object]]] = {
    "default": (
        "vLLM 0.33 with prefix caching, prompt-token details, per-request and spec-decode metrics",
        {},
    ),
    "vllm-0.28-v1": (
        "illustrative (not measured): reports vLLM 0.28 and the V1 model runner; smaller KV"
        " pool, more step overhead, lower acceptance than vllm-0.29-v2",
        {
            "version": "0.28.0",
            "num_gpu_blocks": 11264,
            "gpu_memory_utilization": 0.9,
            "step_overhead_ms": 5.0,
            "decode_ms_base": 7.5,
            "spec_accept_base": 0.50,
            "spec_accept_rep_gain": 0.35,
            "model_runner": "v1",
        },
    ),
    "vllm-0.29-v2": (
        "illustrative (not measured): reports vLLM 0.29 and the V2 model runner; larger KV"
        " pool, less step overhead, better drafts (no documented fallback is modelled: use"
        " --scenario spec-off-for-structured to test one)",
        {
            "version": "0.29.0",
            "num_gpu_blocks": 13824,
            "gpu_memory_utilization": 0.9,
            "step_overhead_ms": 3.5,
            "decode_ms_base": 6.8,
            "spec_accept_base": 0.58,
            "spec_accept_rep_gain": 0.38,
            "model_runner": "v2",
            "dev_mode": True,
        },
    ),
    "fast": (
        "no latency model: steps cost nothing (plumbing tests, benchmarks)",
        {
            "step_overhead_ms": 0.0,
            "prefill_ms_per_token": 0.0,
            "decode_ms_base": 0.0,
            "decode_ms_per_seq": 0.0,
            "attn_ms_per_kctx": 0.0,
            "draft_ms_per_token": 0.0,
            "output_len_mean": 32,
        },
    ),
}


# Scenarios: named changes applied on top of a preset (`--scenario NAME`, repeatable). A
# float in a ("x", f) pair multiplies the preset's value; anything else replaces it. Each says
# what it changes and why such a candidate is plausible; none claims to be a vLLM release.
SCENARIOS: dict[str, tuple[str, dict[str, object]]] = {
    "larger-batch-budget": (
        "max_num_batched_tokens x2 and max_num_seqs x2 (what raising --max-num-batched-tokens"
        " / --max-num-seqs does): more admitted per step, so better TTFT and throughput under"
        " load, but bigger steps, so the slowest streams decode slower (a tail trade-off)",
        {"max_num_batched_tokens": ("x", 2.0), "max_num_seqs": ("x", 2.0)},
    ),
    "smaller-batch-budget": (
        "max_num_batched_tokens x0.5 and max_num_seqs x0.5: the opposite trade-off",
        {"max_num_batched_tokens": ("x", 0.5), "max_num_seqs": ("x", 0.5)},
    ),
    "kv-pool+20%": (
        "num_gpu_blocks x1.2 (e.g. a higher --gpu-memory-utilization): fewer preemptions",
        {"num_gpu_blocks": ("x", 1.2)},
    ),
    "kv-pool-20%": (
        "num_gpu_blocks x0.8 (a smaller KV cache): more preemptions and recompute",
        {"num_gpu_blocks": ("x", 0.8)},
    ),
    "spec-off": ("spec_k=0: speculative decoding off", {"spec_k": 0}),
    "spec-off-for-structured": (
        "structured-output requests decode without drafts (a hypothesis to test a canary"
        " against, not a documented vLLM behaviour)",
        {"spec_fallback_structured": True},
    ),
    "prefix-caching-off": (
        "enable_prefix_caching=false (--no-enable-prefix-caching)",
        {"enable_prefix_caching": False},
    ),
    "async-scheduling": (
        "async_scheduling=true (--async-scheduling): host work hides behind the device step",
        {"async_scheduling": True},
    ),
    "noisy-instance": (
        "instance noise on (speed factor, drift, step jitter, stalls; see docs/simulator.md)",
        {"instance_noise": True},
    ),
}


def apply_scenario(cfg: SimConfig, name: str) -> None:
    """Apply one named scenario to `cfg` in place; SimConfigError names the known ones."""
    if name not in SCENARIOS:
        raise SimConfigError(f"unknown scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")
    for key, change in SCENARIOS[name][1].items():
        if isinstance(change, tuple):
            old = getattr(cfg, key)
            setattr(cfg, key, type(old)(max(1, round(old * change[1]))))
        else:
            setattr(cfg, key, change)


def _coerce(name: str, raw: str) -> object:
    fields = {f.name: f for f in dataclasses.fields(SimConfig)}
    if name not in fields or name in ("faults", "preset"):
        raise SimConfigError(
            f"unknown setting {name!r}; see the README section 'Embedded simulator'"
        )
    kind = fields[name].type
    try:
        if kind == "bool":
            low = raw.lower()
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(raw)
            return low in ("1", "true", "yes", "on")
        if kind == "int":
            return int(raw)
        if kind == "float":
            x = float(raw)
            if not math.isfinite(x):  # nan passes every `< 0` check below
                raise ValueError(raw)
            return x
    except ValueError:
        raise SimConfigError(f"setting {name}: {raw!r} is not a valid {kind}") from None
    return raw


def parse_assignments(items: list[str], flag: str) -> list[tuple[str, str]]:
    """Split 'key=value' items; SimConfigError names the flag on a bad one."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SimConfigError(f"{flag} expects key=value, got {item!r}")
        out.append((key.strip(), value.strip()))
    return out


def build_config(
    preset: str = "default",
    sets: list[str] = (),  # type: ignore[assignment]
    faults: list[str] = (),  # type: ignore[assignment]
    file_settings: tuple[str, dict[str, object]] | None = None,
    scenarios: list[str] = (),  # type: ignore[assignment]
    **overrides: object,
) -> SimConfig:
    """Resolve preset (-> a preset file's settings) -> scenarios -> `--set` overrides -> `--fault` rates -> keyword overrides; validate."""
    if preset not in PRESETS:
        raise SimConfigError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    cfg = SimConfig(preset=preset)
    for key, value in PRESETS[preset][1].items():
        setattr(cfg, key, value)
    if file_settings is not None:
        cfg.preset = file_settings[0]
        for key, value in file_settings[1].items():
            setattr(cfg, key, _coerce(key, str(value)))
    for name in scenarios:
        apply_scenario(cfg, name)
    for key, raw in parse_assignments(list(sets), "--set"):
        setattr(cfg, key, _coerce(key, raw))
    fault_rates = dict(cfg.faults)
    for kind, raw in parse_assignments(list(faults), "--fault"):
        if kind not in FAULT_KINDS:
            raise SimConfigError(f"unknown fault kind {kind!r}; kinds: {', '.join(FAULT_KINDS)}")
        try:
            fault_rates[kind] = float(raw)
            if not math.isfinite(fault_rates[kind]):
                raise ValueError(raw)
        except ValueError:
            raise SimConfigError(f"--fault {kind}: rate {raw!r} is not a number") from None
    cfg.faults = fault_rates
    for key, value in overrides.items():
        if value is not None:
            setattr(cfg, key, value)
    cfg.validate()
    return cfg
