"""vLLM V1 scheduler semantics and the step cost model, on the pure engine (fake clock)."""

from __future__ import annotations

import pytest

from workload.errors import SimConfigError
from workload.sim.config import build_config
from workload.sim.costmodel import InstanceNoise, StepShape, step_cost_ms
from workload.sim.engine import Engine, EngineRequest

MAX_STEPS = 20_000


def engine(preset: str = "fast", **overrides: object) -> Engine:
    return Engine(build_config(preset, [f"{k}={v}" for k, v in overrides.items()]))


def req(n_prompt: int, out: int = 4, rid: str = "r", start: int = 1000) -> EngineRequest:
    return EngineRequest(
        request_id=rid, prompt=list(range(start, start + n_prompt)), output_len=out
    )


def drain(eng: Engine, now: float = 0.0) -> list:
    """Step until idle (bounded); returns every StepOutput."""
    outs = []
    for _ in range(MAX_STEPS):
        if not eng.has_work():
            return outs
        out = eng.step(now)
        outs.append(out)
        now = out.end + 0.001
    raise AssertionError("engine did not go idle")


def test_no_step_schedules_more_tokens_than_the_budget():
    eng = engine(max_num_batched_tokens=64, spec_k=0)
    for i in range(5):
        eng.add_request(req(150, rid=f"r{i}", start=i * 10_000), 0.0)
    outs = drain(eng)
    for out in outs:
        assert out.shape.prefill_tokens + out.shape.decode_seqs <= 64
    assert not eng.has_work() and eng.kv.num_free == eng.kv.num_blocks


def test_a_long_prompt_is_chunked_and_shares_steps_with_decodes():
    eng = engine(max_num_batched_tokens=64, spec_k=0)
    a = req(10, out=50, rid="a")
    eng.add_request(a, 0.0)
    eng.step(0.0)  # a prefilled, now decoding
    b = req(300, out=2, rid="b", start=50_000)
    eng.add_request(b, 0.0)
    mixed = eng.step(0.0)
    assert mixed.shape.decode_seqs == 1  # a's decode ran first
    assert mixed.shape.prefill_tokens == 63  # b got the rest of the budget as a chunk
    assert b.num_computed == 63 and b.num_output == 0


def test_running_sequences_never_exceed_max_num_seqs():
    eng = engine(max_num_seqs=3, spec_k=0)
    for i in range(10):
        eng.add_request(req(20, out=8, rid=f"r{i}", start=i * 1000), 0.0)
    now = 0.0
    for _ in range(200):
        if not eng.has_work():
            break
        out = eng.step(now)
        assert len(eng.running) <= 3
        now = out.end
    assert not eng.has_work()


def test_long_prefill_threshold_caps_chunks_only_when_others_are_eligible():
    alone = engine(long_prefill_token_threshold=32, spec_k=0)
    alone.add_request(req(100), 0.0)
    assert alone.step(0.0).shape.prefill_tokens == 100
    pair = engine(long_prefill_token_threshold=32, spec_k=0)
    pair.add_request(req(100, rid="a"), 0.0)
    pair.add_request(req(100, rid="b", start=9000), 0.0)
    assert pair.step(0.0).shape.prefill_tokens == 64


def test_without_chunked_prefill_a_prompt_over_the_remaining_budget_waits():
    eng = engine(
        max_num_batched_tokens=128,
        enable_chunked_prefill=False,
        max_model_len=128,
        num_gpu_blocks=64,
        spec_k=0,
    )
    eng.add_request(req(100, rid="a"), 0.0)
    eng.add_request(req(100, rid="b", start=9000), 0.0)
    first = eng.step(0.0)
    assert first.shape.prefill_tokens == 100  # b does not fit the 28 tokens left


def test_chunked_prefill_off_needs_a_budget_of_max_model_len():
    with pytest.raises(SimConfigError, match="max_num_batched_tokens"):
        build_config("fast", ["enable_chunked_prefill=false", "max_num_batched_tokens=512"])


def test_kv_exhaustion_preempts_the_newest_and_it_recomputes():
    # 12 blocks of 16 tokens; two requests that each grow to 100 tokens cannot both fit
    eng = engine(
        num_gpu_blocks=12, block_size=16, max_model_len=192, spec_k=0, enable_prefix_caching=False
    )
    a, b = req(40, out=60, rid="a"), req(40, out=60, rid="b", start=9000)
    eng.add_request(a, 0.0)
    eng.add_request(b, 0.0)
    outs = drain(eng)
    assert sum(len(o.preempted) for o in outs) >= 1
    assert b.num_preemptions >= 1 and a.num_preemptions == 0
    assert a.num_output == 60 and b.num_output == 60
    # b's prompt and its outputs so far were prefilled again
    assert sum(o.shape.prefill_tokens for o in outs) > 80
    assert eng.kv.num_free == 12


def test_prefix_cache_evicts_least_recently_freed_blocks_first():
    eng = engine(num_gpu_blocks=16, block_size=16, max_model_len=128, spec_k=0)
    old, new = req(64, out=1, rid="old"), req(64, out=1, rid="new", start=5000)
    eng.add_request(old, 0.0)
    drain(eng)
    eng.add_request(new, 1.0)
    drain(eng, 1.0)
    # a third prompt needs 11 blocks: the 8 never-used ones go, then 3 of old's cached
    # blocks (the least recently freed; a request's tail is freed before its head)
    eng.add_request(req(160, out=1, rid="big", start=20_000), 2.0)
    drain(eng, 2.0)
    again_new = req(64, out=1, rid="n2", start=5000)
    again_old = req(64, out=1, rid="o2", start=1000)
    eng.add_request(again_new, 3.0)
    drain(eng, 3.0)
    eng.add_request(again_old, 4.0)
    drain(eng, 4.0)
    assert again_new.cached_tokens == 48
    assert again_old.cached_tokens == 16  # only old's head block survived


def cost_cfg(**overrides: object):
    base = dict(
        step_overhead_ms=2.0,
        prefill_ms_per_token=0.1,
        decode_ms_base=3.0,
        decode_ms_per_seq=0.5,
        attn_ms_per_kctx=1.0,
        attn_ms_per_mpair=0.0,
        draft_ms_per_token=0.2,
    )
    base.update(overrides)
    return build_config("default", [f"{k}={v}" for k, v in base.items()])


def test_step_cost_adds_overhead_prefill_decode_and_attention():
    shape = StepShape()
    shape.add(0, 100, prefill=True)  # 100 prompt tokens
    shape.add(900, 1, prefill=False)  # one decode over 900 cached tokens
    # 2 + 0.1*100 + 3 + 0.5*1 + 1.0 * (100 + 901) / 1000
    assert step_cost_ms(cost_cfg(), shape) == pytest.approx(2 + 10 + 3 + 0.5 + 1.001)


def test_async_scheduling_hides_host_time_behind_device_time():
    shape = StepShape()
    shape.add(0, 100, prefill=True)
    assert step_cost_ms(cost_cfg(async_scheduling=True, attn_ms_per_kctx=0), shape) == 10.0
    assert step_cost_ms(cost_cfg(attn_ms_per_kctx=0), shape) == 12.0


def test_an_empty_step_costs_nothing():
    assert step_cost_ms(cost_cfg(), StepShape()) == 0.0


def noise(seed: int, **overrides: object) -> InstanceNoise:
    return InstanceNoise(cost_cfg(instance_noise=True, **overrides), seed)


def test_instance_noise_is_reproducible_per_instance_seed_and_differs_across_seeds():
    a = [noise(1).apply(t * 0.01, 10.0) for t in range(50)]
    b = [noise(1).apply(t * 0.01, 10.0) for t in range(50)]
    assert a == b
    speeds = {round(noise(s).speed, 6) for s in range(20)}
    assert len(speeds) == 20


def test_instance_noise_off_returns_the_modelled_cost():
    off = InstanceNoise(cost_cfg(), 7)
    assert [off.apply(t * 0.1, 5.0) for t in range(10)] == [5.0] * 10


def test_stalls_arrive_at_the_configured_rate():
    n = noise(
        3,
        noise_stall_rate_hz=2.0,
        noise_stall_ms=100.0,
        noise_step_sigma=0.0,
        noise_drift_sigma=0.0,
        noise_instance_sigma=0.0,
    )
    for t in range(10_000):  # 100 s of back-to-back 10 ms steps
        n.apply(t * 0.01, 10.0)
    assert 150 <= n.stalls <= 250


def test_the_api_server_stage_delays_admission_one_request_at_a_time():
    eng = engine(api_ms_per_request=10.0, spec_k=0)
    for i in range(3):
        eng.add_request(req(8, out=1, rid=f"r{i}", start=i * 100), 0.0)
    assert eng.num_waiting == 3 and not eng.has_runnable()
    assert eng.next_ready() == pytest.approx(0.010)
    out = eng.step(0.015)
    assert [r.request_id for r, _ in out.emitted] == ["r0"]
    out = eng.step(0.030)
    assert [r.request_id for r, _ in out.emitted] == ["r1", "r2"]


# -- scenarios -------------------------------------------------------------------------------
def overload(scenarios: list[str]) -> tuple[float, float]:
    """(mean TTFT s, slowest stream's mean ITL s) of 48 simultaneous requests."""
    base = {"spec_k": 0, "max_num_seqs": 8, "max_num_batched_tokens": 1024}
    # a file's settings come before scenarios (a --set would override the scenario)
    cfg = build_config("default", file_settings=("base", base), scenarios=scenarios)
    eng = Engine(cfg)
    reqs = [req(400, out=64, rid=f"r{i}", start=i * 1000) for i in range(48)]
    for r in reqs:
        eng.add_request(r, 0.0)
    drain(eng)
    ttft = sum(r.first_token_time - r.arrival_time for r in reqs) / len(reqs)
    itl = max((r.finished_time - r.first_token_time) / (r.output_len - 1) for r in reqs)
    return ttft, itl


def test_a_larger_batch_budget_trades_per_token_speed_for_ttft():
    base_ttft, base_itl = overload([])
    big_ttft, big_itl = overload(["larger-batch-budget"])
    assert big_ttft < base_ttft * 0.9
    assert big_itl > base_itl * 1.05


def test_a_scenario_scales_the_preset_value_and_unknown_ones_are_refused():
    cfg = build_config("default", scenarios=["kv-pool+20%"])
    assert cfg.num_gpu_blocks == round(16384 * 1.2)
    with pytest.raises(SimConfigError, match="scenarios: larger-batch-budget"):
        build_config("default", scenarios=["warp"])


# -- noise through the engine, generated blocks ------------------------------------------------
def step_times(instance_seed: int) -> list[float]:
    cfg = build_config("default", ["spec_k=0", "instance_noise=true"])
    eng = Engine(cfg, instance_seed=instance_seed)
    eng.add_request(req(64, out=30), 0.0)
    return [o.duration_s for o in drain(eng)]


def test_two_instances_of_one_preset_differ_and_one_instance_repeats_itself():
    assert step_times(1) == step_times(1)
    assert step_times(1) != step_times(2)


def test_generated_blocks_enter_the_prefix_cache_when_the_request_carries_its_outputs():
    eng = engine(block_size=16, spec_k=0)
    prompt = list(range(1000, 1040))
    first = EngineRequest(
        request_id="a", prompt=prompt, output_len=40, output_ids=list(range(5000, 5040))
    )
    eng.add_request(first, 0.0)
    drain(eng)
    follow = req(0)
    follow.prompt = prompt + list(range(5000, 5040)) + list(range(9000, 9010))
    eng.add_request(follow, 10.0)
    drain(eng, 10.0)
    assert follow.cached_tokens == 64  # 4 whole blocks of prompt + output (80 tokens, 79 done)
