"""Instance noise (costmodel.InstanceNoise): freezes of the instance's clock, mean-1 speed."""

from __future__ import annotations

import random
import statistics

import pytest

from workload.sim.config import build_config
from workload.sim.costmodel import InstanceNoise


def noise(seed: int, **overrides: object) -> InstanceNoise:
    sets = {"instance_noise": True, **overrides}
    return InstanceNoise(build_config("default", [f"{k}={v}" for k, v in sets.items()]), seed)


def freezes_only(seed: int, rate: float = 0.5, ms: float = 200.0) -> InstanceNoise:
    """Noise with freezes and nothing else (speed 1, no drift, no jitter)."""
    return noise(seed, noise_stall_rate_hz=rate, noise_stall_ms=ms, noise_step_sigma=0.0,
                 noise_drift_sigma=0.0, noise_instance_sigma=0.0)  # fmt: skip


def test_a_freeze_stretches_the_step_it_overlaps_by_its_length():
    n = freezes_only(1)
    n._freeze = (1.005, 0.3)  # a 300 ms freeze 5 ms into a 10 ms step at t=1
    assert n.apply(1.0, 10.0) == pytest.approx(310.0)
    assert n.stalls == 1


def test_a_request_arriving_during_a_freeze_waits_for_its_end():
    n = freezes_only(1)
    n._freeze = (2.0, 0.5)
    assert n.apply(2.2, 10.0) == pytest.approx(300.0 + 10.0)  # 0.3 s of the freeze left


def test_a_freeze_while_idle_delays_nothing():
    # The old model kept a stall that fell during an idle spell for the next step, which is
    # usually a new request's prefill: TTFT took the stalls and TPOT did not. Now the first
    # step after a long idle spell is stretched only as often as any other moment is frozen.
    rate, ms = 0.1, 150.0
    stretched = 0
    for seed in range(400):
        n = freezes_only(seed, rate=rate, ms=ms)
        n.apply(0.0, 10.0)
        if n.apply(100.0, 10.0) > 10.0 + 1e-9:
            stretched += 1
    busy = rate * ms / 1000.0
    expected = busy / (1 + busy) + rate * 0.010  # inside a freeze, or one starts in the step
    assert stretched / 400 < 4 * expected + 0.01  # about 1.6 %; it was about 100 %


def test_freezes_take_the_same_share_of_short_and_long_steps():
    # prefill (long steps) and decode (many short ones) lose the same share of their time
    def stretch(step_ms: float, seconds: float = 2000.0) -> float:
        n, t, work = freezes_only(7), 0.0, 0.0
        while t < seconds:
            d = n.apply(t, step_ms) / 1000.0
            t, work = t + d, work + step_ms / 1000.0
        return t / work

    short, long = stretch(5.0), stretch(200.0)
    assert short == pytest.approx(1.1, abs=0.03)  # 0.5 /s x 0.2 s frozen per second worked
    assert long == pytest.approx(short, rel=0.05)


def test_speed_and_drift_have_mean_one():
    speeds = [noise(s).speed for s in range(3000)]
    assert statistics.fmean(speeds) == pytest.approx(1.0, abs=0.04)
    n = noise(5, noise_stall_rate_hz=0.0, noise_step_sigma=0.0, noise_instance_sigma=0.0)
    factors = [n.apply(t * 1.0, 1.0) for t in range(20_000)]  # 20,000 s, tau 15 s
    assert statistics.fmean(factors) == pytest.approx(1.0, abs=0.08)


def test_noise_stays_off_by_default_and_in_a_zero_cost_step():
    off = InstanceNoise(build_config("default"), 3)
    assert [off.apply(t * 0.1, 7.0) for t in range(20)] == [7.0] * 20
    assert noise(3).apply(1.0, 0.0) == 0.0


def api_only(seed: int, rate: float = 2.0, ms: float = 60.0) -> InstanceNoise:
    """Noise with API-server freezes and nothing else."""
    return noise(seed, noise_api_stall_rate_hz=rate, noise_api_stall_ms=ms,
                 noise_stall_rate_hz=0.0, noise_step_sigma=0.0, noise_drift_sigma=0.0,
                 noise_instance_sigma=0.0)  # fmt: skip


def test_an_api_freeze_delays_a_new_request_to_its_end_and_nothing_else():
    n = api_only(1)
    n._api_freeze = (3.0, 0.2)
    assert n.api_delay(3.05) == pytest.approx(0.15)  # arrives inside: waits out the rest
    assert n.api_stalls == 1
    assert n.apply(3.05, 10.0) == 10.0  # the engine's steps are not the API server's
    n._api_freeze = (5.0, 0.2)
    assert n.api_delay(4.9) == 0.0  # before it


def test_api_freezes_hold_new_requests_their_share_of_the_time():
    # arrivals at random moments wait with probability rate*mean/(1 + rate*mean), and the
    # wait they meet is the rest of an exponential spell: mean `ms` again (memoryless)
    rate, ms = 2.0, 60.0
    waits = []
    for seed in range(40):
        n, t = api_only(seed, rate, ms), 0.0
        rng = random.Random(seed)
        for _ in range(500):
            t += rng.expovariate(5.0)  # 5 arrivals a second
            waits.append(n.api_delay(t))
    hit = [w for w in waits if w > 0]
    busy = rate * ms / 1000.0
    assert len(hit) / len(waits) == pytest.approx(busy / (1 + busy), abs=0.02)
    assert statistics.fmean(hit) * 1000.0 == pytest.approx(ms, rel=0.1)


def test_api_freezes_are_off_with_noise_and_leave_the_engine_draws_as_they_were():
    off = InstanceNoise(build_config("default", ["noise_api_stall_rate_hz=2"]), 3)
    assert [off.api_delay(t * 0.1) for t in range(50)] == [0.0] * 50
    with_api, without = noise(9), noise(9, noise_api_stall_rate_hz=0.0)
    for t in range(200):
        with_api.api_delay(t * 0.05)
    assert [with_api.apply(t * 0.05, 5.0) for t in range(200)] == [
        without.apply(t * 0.05, 5.0) for t in range(200)
    ]


def test_a_request_meets_the_api_freeze_before_the_scheduler_sees_it():
    from workload.sim.engine import Engine, EngineRequest

    cfg = build_config("fast", ["instance_noise=true", "noise_api_stall_rate_hz=2",
                                "noise_api_stall_ms=60"])  # fmt: skip
    eng = Engine(cfg, instance_seed=4)
    eng.noise._api_freeze = (1.0, 0.25)
    req = EngineRequest(request_id="r", prompt=list(range(16)), output_len=4, seed=1)
    eng.add_request(req, 1.1)
    assert req.queued_time == pytest.approx(1.25)  # the freeze's end, not its arrival
    assert eng.next_ready() == pytest.approx(1.25)


def spells_only(seed: int, rate: float = 0.2, s: float = 1.5, ms: float = 12.0) -> InstanceNoise:
    """Noise with the API server's slow spells and nothing else."""
    return noise(seed, noise_api_spell_rate_hz=rate, noise_api_spell_s=s,
                 noise_api_spell_ms=ms, noise_api_stall_rate_hz=0.0)  # fmt: skip


def test_a_slow_spell_delays_the_requests_inside_it_by_about_its_level():
    n = spells_only(2, ms=12.0)
    n._spell, n._spell_at = (4.0, 1.0), 0.012
    waits = [n.api_spell_delay(4.0 + i / 1000.0) for i in range(1, 999)]
    assert all(w > 0 for w in waits) and n.api_spells == 998
    assert statistics.fmean(waits) == pytest.approx(0.012, rel=0.1)  # mean-1 request factor
    assert statistics.stdev(waits) > 0.003  # each request its own draw
    n._spell = (7.0, 1.0)
    assert n.api_spell_delay(6.5) == 0.0  # before the next one


def test_slow_spells_take_their_share_of_arrivals_and_vary_in_level():
    rate, s = 0.2, 1.5
    hits, n_all, levels = 0, 0, set()
    for seed in range(40):
        n, t = spells_only(seed, rate, s), 0.0
        rng = random.Random(seed)
        for _ in range(400):
            t += rng.expovariate(5.0)
            w = n.api_spell_delay(t)
            hits += w > 0
            n_all += 1
            levels.add(round(n._spell_at, 6))
    busy = rate * s
    assert hits / n_all == pytest.approx(busy / (1 + busy), abs=0.03)
    assert len(levels) > 100  # a level per spell


def test_slow_spells_are_off_without_noise_and_leave_the_other_draws_as_they_were():
    off = InstanceNoise(build_config("default", ["noise_api_spell_rate_hz=1"]), 3)
    assert [off.api_spell_delay(t * 0.1) for t in range(50)] == [0.0] * 50
    with_spells, without = noise(9), noise(9, noise_api_spell_rate_hz=0.0)
    for t in range(200):
        with_spells.api_spell_delay(t * 0.05)
    assert [
        (with_spells.api_delay(t * 0.05), with_spells.apply(t * 0.05, 5.0)) for t in range(200)
    ] == [(without.api_delay(t * 0.05), without.apply(t * 0.05, 5.0)) for t in range(200)]


def test_a_request_in_a_slow_spell_reaches_the_scheduler_late():
    from workload.sim.engine import Engine, EngineRequest

    cfg = build_config("fast", ["instance_noise=true", "noise_api_stall_rate_hz=0",
                                "noise_api_spell_rate_hz=0.2", "noise_api_spell_ms=12",
                                "noise_api_spell_request_sigma=0"])  # fmt: skip
    eng = Engine(cfg, instance_seed=4)
    eng.noise._spell, eng.noise._spell_at = (1.0, 1.0), 0.012
    req = EngineRequest(request_id="r", prompt=list(range(16)), output_len=4, seed=1)
    eng.add_request(req, 1.1)
    assert req.queued_time == pytest.approx(1.112)
