"""A calibrated twin's speculative decoding and API path: acceptance per draft position read
from vLLM's counters, the engine drawing from it, and the serial / overlapping API split."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from workload.errors import SimConfigError
from workload.sim.apisplit import burst_ttft_ms, split_api
from workload.sim.calibrate import calibrate
from workload.sim.config import build_config
from workload.sim.engine import Engine, EngineRequest
from workload.sim.inprocess import SimThread
from workload.sim.promtext import render
from workload.sim.specfit import SpecCounters, fit_acceptance, fit_cold, read_counters

FIXTURE = Path(__file__).parent / "fixtures/vllm_real/metrics.txt"


def test_the_counters_of_a_real_vllm_metrics_page_are_read():
    got = read_counters(FIXTURE.read_text())
    # the captured vLLM-CPU page (n-gram, k=3): _total lines, not _created timestamps
    assert (got.drafts, got.draft_tokens, got.accepted) == (21.0, 49.0, 47.0)
    assert got.accepted_per_pos == [21.0, 13.0, 13.0]
    assert got.generation_tokens == 161.0 and got.requests == 13.0


def test_per_position_rates_multiply_to_the_accepted_share_of_each_position():
    delta = SpecCounters(100, 290, 180, [90, 60, 30], generation_tokens=420, requests=10)
    fit = fit_acceptance(delta)
    assert fit is not None
    rates = [float(x) for x in str(fit["spec_accept_by_pos"]).split(",")]
    assert rates == pytest.approx([0.9, 60 / 90, 0.5], abs=1e-4)
    # a_0 * ... * a_i is acc_i / drafts: the twin accepts as many tokens per draft step
    prod, expect = 1.0, []
    for a in rates:
        prod *= a
        expect.append(prod)
    assert expect == pytest.approx([0.9, 0.6, 0.3], abs=1e-4)
    assert fit["spec_k"] == 3 and fit["spec_accept_rep_gain"] == 0.0
    # decode steps = 420 generated - 10 first tokens - 180 accepted = 230, 100 with drafts
    assert fit["spec_propose_rate"] == pytest.approx(100 / 230, abs=1e-4)


def test_decode_steps_the_client_counted_win_over_the_counters():
    # vLLM counts drafts accepted past max_tokens, so generation - requests - accepted
    # undercounts decode steps: a 48-token request with 12 draft steps (34 accepted, 32
    # delivered) and 3 without drafts is seen as 13 steps by the counters, 15 by the client
    delta = SpecCounters(12, 34, 34, [12, 11, 11], generation_tokens=48, requests=1)
    assert fit_acceptance(delta)["spec_propose_rate"] == pytest.approx(12 / 13, abs=1e-4)
    assert fit_acceptance(delta, 15.0)["spec_propose_rate"] == pytest.approx(0.8)


def test_no_drafts_in_the_sweep_fits_nothing():
    assert fit_acceptance(SpecCounters(generation_tokens=100, requests=4)) is None


def test_the_difference_of_two_reads_is_what_the_sweep_did():
    a = SpecCounters(10, 30, 20, [10, 6, 4], 100, 5)
    b = SpecCounters(25, 75, 50, [25, 15, 10], 260, 9)
    d = b.minus(a)
    assert (d.drafts, d.accepted, d.accepted_per_pos, d.requests) == (15, 30, [15, 9, 6], 4)


def _spec_engine(by_pos: str, propose: float = 1.0) -> Engine:
    cfg = build_config(
        "fast", [f"spec_accept_by_pos={by_pos}", f"spec_propose_rate={propose}", "spec_k=3"]
    )
    return Engine(cfg)


def _run(eng: Engine, n: int, out_len: int) -> list[EngineRequest]:
    by_pos = eng.cfg.accept_by_pos()
    reqs = []
    for i in range(n):
        req = EngineRequest(
            request_id=f"r{i}",
            prompt=list(range(1000 + i * 100, 1064 + i * 100)),
            output_len=out_len,
            accept_by_pos=by_pos,
            seed=i,
        )
        eng.add_request(req, 0.0)
        reqs.append(req)
    now = 0.0
    for _ in range(50_000):
        if not eng.has_work():
            return reqs
        now = eng.step(now).end + 0.001
    raise AssertionError("engine did not go idle")


def test_the_engine_accepts_by_position_and_stops_at_the_first_rejection():
    eng = _spec_engine("1.0,0.0")
    reqs = _run(eng, 2, 41)
    for r in reqs:
        # every draft step accepts exactly its first draft: two tokens a step after the first
        assert r.spec_hist[1] == r.spec_steps and r.spec_accepted == r.spec_steps
        assert r.num_output == 41


def test_measured_rates_come_back_from_the_twins_own_counters():
    eng = _spec_engine("0.8,0.6,0.5", propose=0.7)
    before = read_counters(_metrics(eng))
    _run(eng, 40, 400)
    fit = fit_acceptance(read_counters(_metrics(eng)).minus(before))
    assert fit is not None
    rates = [float(x) for x in str(fit["spec_accept_by_pos"]).split(",")]
    # long outputs: the cap at the last token hardly shows
    assert rates == pytest.approx([0.8, 0.6, 0.5], abs=0.04)
    assert fit["spec_propose_rate"] == pytest.approx(0.7, abs=0.04)


def _metrics(eng: Engine) -> str:
    return render(eng.stats, labels='engine="0"', running=0, waiting=0, kv_usage=0.0, cache_info={})


def test_a_cold_proposer_drafts_nothing_for_a_requests_first_decode_steps():
    cfg = build_config("fast", ["spec_k=3", "spec_accept_by_pos=1.0", "spec_cold_steps=3"])
    eng = Engine(cfg)
    (req,) = _run(eng, 1, 48)
    # the test vLLM-CPU server's pattern: 1 (prefill), 1, 1, 1, then 4 tokens a step
    assert req.spec_steps == 11 and req.spec_hist[3] == 11
    assert req.num_output == 48


def test_a_cold_start_is_told_from_random_misses_by_two_lengths():
    # the test server: 3 decode steps without drafts whatever the length
    assert fit_cold((7.0, 4.0), (19.0, 16.0)) == (3, 1.0)
    # a proposer that misses 20 % of steps at random, no cold start
    assert fit_cold((10.0, 8.0), (40.0, 32.0)) == (0, 0.8)
    # both: 2 cold steps, then 10 % misses
    cold, p = fit_cold((12.0, 12 - (2 + 0.1 * 10)), (42.0, 42 - (2 + 0.1 * 40)))
    assert cold == 2 and p == pytest.approx(0.9)


@pytest.mark.parametrize("bad", ["1.2", "a,b", "0.5,nan", ",".join(["0.5"] * 17)])
def test_a_bad_acceptance_list_is_refused_in_one_message(bad):
    with pytest.raises(SimConfigError, match="spec_accept_by_pos"):
        build_config("fast", [f"spec_accept_by_pos={bad}"])


def _ingress(**sets: float) -> list[float]:
    cfg = build_config("fast", [f"{k}={v}" for k, v in sets.items()])
    eng = Engine(cfg)
    reqs = [EngineRequest(request_id=f"r{i}", prompt=[1, 2, 3], output_len=1) for i in range(3)]
    for r in reqs:
        eng.add_request(r, 0.0)
    return [round(r.queued_time * 1000, 6) for r in reqs]


def test_the_serial_api_part_queues_and_the_overlapping_part_does_not():
    assert _ingress(api_ms_per_request=10) == [10, 20, 30]
    assert _ingress(api_latency_ms=10) == [10, 10, 10]
    assert _ingress(api_ms_per_request=4, api_latency_ms=6) == [10, 14, 18]


def test_the_split_of_the_api_path_is_recovered_from_a_burst():
    cfg = build_config("default", ["spec_k=0", "step_overhead_ms=5", "prefill_ms_per_token=0.01"])
    truth = dataclasses.replace(cfg, api_ms_per_request=6.0, api_latency_ms=14.0)
    measured = burst_ttft_ms(truth, 8, 80)
    serial, overlap = split_api(cfg, 20.0, 8, 80, measured)
    assert serial == pytest.approx(6.0, abs=1.01) and serial + overlap == pytest.approx(20.0)
    # all overlapping: the burst finishes together, as a lone request would
    serial, _ = split_api(cfg, 20.0, 8, 80, burst_ttft_ms(truth := cfg, 8, 80) + 20.0)
    assert serial == 0.0 and truth is cfg


@pytest.mark.slow
def test_calibrating_a_speculating_simulator_recovers_its_proposer_and_keeps_given_flags():
    sets = [
        "spec_k=3",
        "spec_accept_by_pos=0.9,0.7,0.6",
        "spec_propose_rate=1.0",
        "spec_cold_steps=2",
        "max_model_len=4096",
        "num_gpu_blocks=2048",
        "step_overhead_ms=4",
        "decode_ms_per_seq=1",
    ]
    with SimThread("default", sets=sets) as sim:
        doc = calibrate(sim.url, given=["max_num_batched_tokens=2048"])
    got = doc["settings"]
    assert got["spec_k"] == 3
    rates = [float(x) for x in got["spec_accept_by_pos"].split(",")]
    # 64-token streams: the twin's cap at the last token lowers the later positions a little
    assert rates == pytest.approx([0.9, 0.7, 0.6], abs=0.08)
    assert got["spec_cold_steps"] == 2 and got["spec_propose_rate"] > 0.9
    assert got["max_num_batched_tokens"] == 2048
    assert doc["source"]["given"] == {"max_num_batched_tokens": "2048"}
    assert doc["source"]["spec_decode"]["decode_sample_drafts"] == 3
    assert build_config("default", file_settings=(doc["name"], got)).spec_k == 3
