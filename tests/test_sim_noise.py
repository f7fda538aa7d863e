"""Instance noise (costmodel.InstanceNoise): freezes of the instance's clock, mean-1 speed."""

from __future__ import annotations

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
