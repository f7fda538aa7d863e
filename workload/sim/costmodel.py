"""What one forward pass costs, and how one simulated instance differs from another.

A step's *shape* is what the scheduler put in it (prefill tokens, decoding sequences, draft
tokens, attention work); its cost is a small linear model of that shape, with coefficients
fitted from a real server by ``agentload sim calibrate``::

    host_ms   = step_overhead_ms                        (schedule, prepare inputs, outputs)
    device_ms = prefill_ms_per_token * prefill_tokens
              + decode_ms_base       * (1 if decode_seqs else 0)
              + decode_ms_per_seq    * decode_seqs
              + draft_ms_per_token   * draft_tokens     (verifying speculative drafts)
              + attn_ms_per_kctx     * kv_tokens / 1e3   (context tokens read: memory-bound)
              + attn_ms_per_mpair    * attn_pairs / 1e6  (query x key pairs: compute-bound)
    step_ms   = host_ms + device_ms,  or max(host_ms, device_ms) with async scheduling

With async scheduling vLLM prepares step N+1 on the host while the device runs step N
(vllm/v1/core/sched/async_scheduler.py), so the host part hides behind the device part.

``attn_pairs`` counts, per scheduled sequence, its new tokens times the context each of them
attends to (``new * (computed + (new + 1) / 2)``): a prefill chunk's attention grows with the
square of its length, and a late chunk of a long prompt costs more than the first one.

Instance noise (``InstanceNoise``) makes two simulators of one preset differ the way two real
instances do: a speed factor drawn once per instance, a slow drift of that speed (an
Ornstein-Uhlenbeck process on log speed: host load that comes and goes), a per-step jitter,
occasional freezes of the instance's clock, and the API server's own freezes and slow spells
(new requests late). It draws from RNGs seeded by the *instance* seed, never the traffic
seed, so the same traffic meets a different instance.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

# Names of the fitted coefficients, in the order of StepShape.features().
COEFFICIENTS = (
    "step_overhead_ms",
    "prefill_ms_per_token",
    "decode_ms_base",
    "decode_ms_per_seq",
    "draft_ms_per_token",
    "attn_ms_per_kctx",
    "attn_ms_per_mpair",
)


class CostConfig(Protocol):
    """The SimConfig fields the cost model reads."""

    step_overhead_ms: float
    prefill_ms_per_token: float
    decode_ms_base: float
    decode_ms_per_seq: float
    draft_ms_per_token: float
    attn_ms_per_kctx: float
    attn_ms_per_mpair: float
    async_scheduling: bool
    ttft_scale: float
    itl_scale: float


@dataclass(slots=True)
class StepShape:
    """What one step computes, split by phase (prefill work vs decode work)."""

    prefill_tokens: int = 0
    prefill_kv: int = 0  # context tokens read by prefill chunks
    prefill_pairs: float = 0.0
    decode_seqs: int = 0
    draft_tokens: int = 0
    decode_kv: int = 0  # context tokens read by decoding sequences
    decode_pairs: float = 0.0

    def add(self, computed: int, new: int, prefill: bool, drafts: int = 0) -> None:
        """Account one scheduled sequence: `new` tokens on top of `computed` cached ones."""
        kv = computed + new
        pairs = new * (computed + (new + 1) / 2.0)
        if prefill:
            self.prefill_tokens += new
            self.prefill_kv += kv
            self.prefill_pairs += pairs
        else:
            self.decode_seqs += 1
            self.draft_tokens += drafts
            self.decode_kv += kv
            self.decode_pairs += pairs

    @property
    def empty(self) -> bool:
        return not (self.prefill_tokens or self.decode_seqs)

    def features(self) -> tuple[float, ...]:
        """The regressors of one step, in COEFFICIENTS order (for fitting)."""
        return (
            1.0,
            float(self.prefill_tokens),
            1.0 if self.decode_seqs else 0.0,
            float(self.decode_seqs),
            float(self.draft_tokens),
            (self.prefill_kv + self.decode_kv) / 1e3,
            (self.prefill_pairs + self.decode_pairs) / 1e6,
        )


def step_cost_ms(cfg: CostConfig, shape: StepShape) -> float:
    """Modelled duration of one step in ms (0 for an empty step).

    `ttft_scale` multiplies the prefill part (and the host part of a step that carries
    prefill), `itl_scale` the decode part (and the host part of a decode-only step): a
    canary's "10 % slower prefill" or "10 % slower decode" candidate.
    """
    if shape.empty:
        return 0.0
    ts, its = cfg.ttft_scale, cfg.itl_scale
    prefill = (
        cfg.prefill_ms_per_token * shape.prefill_tokens
        + cfg.attn_ms_per_kctx * shape.prefill_kv / 1e3
        + cfg.attn_ms_per_mpair * shape.prefill_pairs / 1e6
    )
    decode = (
        (cfg.decode_ms_base if shape.decode_seqs else 0.0)
        + cfg.decode_ms_per_seq * shape.decode_seqs
        + cfg.draft_ms_per_token * shape.draft_tokens
        + cfg.attn_ms_per_kctx * shape.decode_kv / 1e3
        + cfg.attn_ms_per_mpair * shape.decode_pairs / 1e6
    )
    host = cfg.step_overhead_ms * (ts if shape.prefill_tokens else its)
    device = prefill * ts + decode * its
    return max(host, device) if cfg.async_scheduling else host + device


class NoiseConfig(Protocol):
    """The SimConfig fields instance noise reads."""

    instance_noise: bool
    noise_instance_sigma: float
    noise_drift_sigma: float
    noise_drift_tau_s: float
    noise_step_sigma: float
    noise_stall_rate_hz: float
    noise_stall_ms: float
    noise_api_stall_rate_hz: float
    noise_api_stall_ms: float
    noise_api_spell_rate_hz: float
    noise_api_spell_s: float
    noise_api_spell_ms: float
    noise_api_spell_sigma: float
    noise_api_spell_request_sigma: float


def next_freeze(
    rng: random.Random, rate: float, mean_s: float, at: float, idle: bool = True
) -> tuple[float, float]:
    """A freeze schedule from `at` on, as (start, length): Poisson freezes at `rate` per
    second, each exponential with mean `mean_s`. After an idle spell (`idle`) nothing
    recorded the freezes that passed, so `at` falls inside one with the stationary
    probability rate*mean/(1 + rate*mean), its rest again exponential (memoryless: an idle
    spell of any length costs one draw); otherwise the next one starts after an
    exponential gap."""
    busy = rate * mean_s
    if idle and rng.random() < busy / (1.0 + busy):
        return (at, rng.expovariate(1.0 / mean_s))
    return (at + rng.expovariate(rate), rng.expovariate(1.0 / mean_s))


class InstanceNoise:
    """One instance's speed: a factor drawn at start, a slow drift, step jitter, freezes.

    Two real instances on a busy host differ the way their host's load does: for seconds at
    a time every phase of a request is slower at once (bench/results/real-1: a block's TTFT,
    TPOT and E2E shifts move together). So the speed factor and the drift multiply every
    step alike, and a **freeze** (the process not scheduled) is a stretch of the instance's
    clock in which nothing runs: it stretches whatever step it overlaps, a request that
    arrives during it waits for its end, and one that falls while the instance is idle
    delays nothing. Freezes hit prefill and decode in proportion to the time each takes
    (a freeze counted per step landed mostly on the first step after an idle spell, the
    prefill of a new request: TTFT too loud, TPOT too quiet). Speed and drift are log-normal
    with mean 1, so the mean modelled cost stays the fitted one.
    """

    def __init__(self, cfg: NoiseConfig, seed: int) -> None:
        self.on = bool(cfg.instance_noise)
        self.rng = random.Random(seed * 2_654_435_761 + 0x5EED)
        rng = self.rng
        self.sigma_step = max(0.0, cfg.noise_step_sigma)
        self.sigma_drift = max(0.0, cfg.noise_drift_sigma)
        self.tau = max(1e-3, cfg.noise_drift_tau_s)
        self.stall_rate = max(0.0, cfg.noise_stall_rate_hz)
        self.stall_s = max(0.0, cfg.noise_stall_ms) / 1000.0
        si = max(0.0, cfg.noise_instance_sigma)
        # the instance's own speed: > 1 is a slower instance
        self.speed = math.exp(rng.gauss(-si * si / 2.0, si)) if self.on else 1.0
        self.log_drift = rng.gauss(0.0, self.sigma_drift) if self.on else 0.0
        self._t = 0.0
        self.stalls = 0
        self.stalled_s = 0.0
        # the next freeze [start, start + length) on the engine clock
        self._freeze = (math.inf, 0.0)
        if self.on and self.stall_rate > 0.0 and self.stall_s > 0.0:
            self._freeze = next_freeze(rng, self.stall_rate, self.stall_s, 0.0, idle=False)
        # the API server's own freezes (its own RNG: the engine's draws stay as they were)
        self.api_rng = random.Random(seed * 2_654_435_761 + 0xA91)
        self.api_rate = max(0.0, cfg.noise_api_stall_rate_hz) if self.on else 0.0
        self.api_stall_s = max(0.0, cfg.noise_api_stall_ms) / 1000.0
        self.api_stalls = 0
        self._api_freeze = (math.inf, 0.0)
        if self.api_rate > 0.0 and self.api_stall_s > 0.0:
            self._api_freeze = next_freeze(
                self.api_rng, self.api_rate, self.api_stall_s, 0.0, idle=False
            )
        # the API server's slow spells (api_spell_delay; their own RNG again)
        self.spell_rng = random.Random(seed * 2_654_435_761 + 0x5BE11)
        self.spell_rate = max(0.0, cfg.noise_api_spell_rate_hz) if self.on else 0.0
        self.spell_s = max(0.0, cfg.noise_api_spell_s)
        self.spell_ms = max(0.0, cfg.noise_api_spell_ms)
        self.spell_sigma = max(0.0, cfg.noise_api_spell_sigma)
        self.spell_request_sigma = max(0.0, cfg.noise_api_spell_request_sigma)
        self.api_spells = 0
        self._spell = (math.inf, 0.0)
        self._spell_at = 0.0
        if self.spell_rate > 0.0 and self.spell_s > 0.0 and self.spell_ms > 0.0:
            self._spell = next_freeze(self.spell_rng, self.spell_rate, self.spell_s, 0.0, False)
            self._spell_at = self._spell_level()

    def _spell_level(self) -> float:
        s = self.spell_sigma
        return self.spell_ms * math.exp(self.spell_rng.gauss(-s * s / 2.0, s)) / 1000.0

    def _next_spell(self, end: float, now: float) -> tuple[float, float]:
        """The spell schedule at `now`, the last spell having ended at `end`: gaps and
        lengths drawn in turn (an arrival just after a spell is less likely in the next
        than a random one); after a long quiet time, the stationary draw (next_freeze)."""
        rng, cycle = self.spell_rng, 1.0 / self.spell_rate + self.spell_s
        if now - end > 20.0 * cycle:
            return next_freeze(rng, self.spell_rate, self.spell_s, now)
        start, length = end, 0.0
        while start + length <= now:
            start += length + rng.expovariate(self.spell_rate)
            length = rng.expovariate(1.0 / self.spell_s)
        return start, length

    def api_spell_delay(self, now: float) -> float:
        """Seconds a request that reaches the API server at `now` waits on top during a slow
        spell (the server busy but not frozen: every new request a little late, for a second
        or two): the spell's level times a per-request log-normal factor (mean 1). 0 outside
        a spell and with noise off. Its own RNG: the other draws stay as they were."""
        start, length = self._spell
        if start == math.inf:
            return 0.0
        if start + length <= now:  # past it: the spells since, and a new level
            self._spell = self._next_spell(start + length, now)
            start, length = self._spell
            self._spell_at = self._spell_level()
        if start > now:
            return 0.0
        self.api_spells += 1
        s = self.spell_request_sigma
        return self._spell_at * math.exp(self.spell_rng.gauss(-s * s / 2.0, s))

    def api_delay(self, now: float) -> float:
        """Seconds a request that reaches the API server at `now` waits for it to be scheduled
        again: vLLM's API server (HTTP, chat template, tokenizing, streaming) is a process of
        its own, descheduled apart from the engine on a busy host, which only new requests
        (their TTFT) feel. 0 outside a freeze and with noise off."""
        start, length = self._api_freeze
        if start == math.inf:
            return 0.0
        if start + length <= now:  # the API server was idle past it
            start, length = self._api_freeze = next_freeze(
                self.api_rng, self.api_rate, self.api_stall_s, now
            )
        if start <= now:
            self.api_stalls += 1
            return start + length - now
        return 0.0

    def _draw_freeze(self, after: float) -> None:
        self._freeze = next_freeze(self.rng, self.stall_rate, self.stall_s, after, idle=False)

    def _resume(self, t: float) -> None:
        """The freeze schedule after an idle spell that passed `t` (next_freeze)."""
        self._freeze = next_freeze(self.rng, self.stall_rate, self.stall_s, t)

    def _run(self, now: float, work_s: float) -> float:
        """Seconds from `now` until `work_s` of unfrozen time has passed (bounded: every
        pass consumes one freeze, and freezes are at most rate x duration apart)."""
        t, left = now, work_s
        for _ in range(100_000):
            start, length = self._freeze
            if start + length <= t and start != math.inf:
                self._resume(t)  # the instance was idle past it
                continue
            if start <= t:  # inside a freeze: wait for its end
                self.stalls += 1
                self.stalled_s += start + length - t
                t = start + length
                self._draw_freeze(t)
                continue
            if start < t + left:  # a freeze starts before the work is done
                self.stalls += 1
                self.stalled_s += length
                left -= start - t
                t = start + length
                self._draw_freeze(t)
                continue
            break
        return t + left - now

    def apply(self, now: float, ms: float) -> float:
        """The noisy duration of a step of modelled cost `ms` starting at engine time `now`."""
        if not self.on or ms <= 0.0:
            return ms
        rng = self.rng
        if self.sigma_drift > 0.0:
            dt = max(0.0, now - self._t)
            rho = math.exp(-dt / self.tau)
            self.log_drift = rho * self.log_drift + math.sqrt(
                1.0 - rho * rho
            ) * self.sigma_drift * rng.gauss(0.0, 1.0)
        self._t = now
        sd = self.sigma_drift
        factor = self.speed * math.exp(self.log_drift - sd * sd / 2.0)
        if self.sigma_step > 0.0:
            s = self.sigma_step
            factor *= math.exp(rng.gauss(-s * s / 2.0, s))  # mean 1
        out = ms * factor
        if self._freeze[0] == math.inf:
            return out
        return 1000.0 * self._run(now, out / 1000.0)
