"""The pure simulator engine, stepped on a fake clock (no sockets, no sleeping)."""

from __future__ import annotations

import random

import pytest

from workload.sim.config import build_config
from workload.sim.content import ContentModel
from workload.sim.engine import FINISHED, Engine, EngineRequest, QueueFull
from workload.sim.kvcache import block_hashes

MAX_STEPS = 20_000


def make_engine(preset: str = "fast", **overrides) -> Engine:
    sets = [f"{k}={v}" for k, v in overrides.items()]
    return Engine(build_config(preset, sets))


def make_req(prompt, output_len: int = 4, rid: str = "r", **kw) -> EngineRequest:
    return EngineRequest(request_id=rid, prompt=list(prompt), output_len=output_len, **kw)


def tokens(n: int, start: int = 1000) -> list[int]:
    return list(range(start, start + n))


class Clock:
    """Fake time: each step advances it by its modelled duration (at least 1 ms)."""

    def __init__(self) -> None:
        self.now = 0.0


def run(engine: Engine, clock: Clock | None = None, trace: list | None = None) -> int:
    """Step until idle; returns steps taken. Bounded."""
    clock = clock or Clock()
    for i in range(MAX_STEPS):
        if not engine.has_work():
            return i
        out = engine.step(clock.now)
        if trace is not None:
            trace.append(
                (
                    round(out.start, 9),
                    round(out.duration_s, 9),
                    [(r.request_id, n) for r, n in out.emitted],
                )
            )
        clock.now = out.end + 0.001
    raise AssertionError("engine did not go idle")


def submit(engine: Engine, req: EngineRequest, clock: Clock | None = None) -> EngineRequest:
    engine.add_request(req, clock.now if clock else 0.0)
    return req


# -- prefix cache ---------------------------------------------------------------------------------
def test_prefix_cache_hits_in_whole_blocks():
    eng = make_engine(block_size=16)
    a = submit(eng, make_req(tokens(100), rid="a"))
    run(eng)
    assert a.cached_tokens == 0
    # shares 70 tokens with a: 4 whole blocks (64 tokens) hit, the partial fifth does not
    b = submit(eng, make_req(tokens(70) + tokens(30, start=50_000), rid="b"))
    run(eng)
    assert b.cached_tokens == 64
    # an identical, block-aligned prompt still recomputes its last block (the last token)
    c = submit(eng, make_req(tokens(96), rid="c"))
    run(eng)
    assert c.cached_tokens == 80
    assert eng.stats.prefix_hits == 64 + 80
    assert eng.stats.prefix_queries == 100 + 100 + 96


def test_cache_salt_isolates_and_matches_itself():
    eng = make_engine()
    submit(eng, make_req(tokens(64), rid="plain"))
    run(eng)
    salted = submit(eng, make_req(tokens(64) + [7], rid="s1", cache_salt="tenant-a"))
    run(eng)
    assert salted.cached_tokens == 0
    again = submit(eng, make_req(tokens(64) + [8], rid="s2", cache_salt="tenant-a"))
    other = make_req(tokens(64) + [9], rid="s3", cache_salt="tenant-b")
    run(eng)
    submit(eng, other)
    run(eng)
    assert again.cached_tokens == 64
    assert other.cached_tokens == 0
    assert block_hashes(tokens(32), 16, "x") != block_hashes(tokens(32), 16, None)


def test_lru_eviction_under_kv_capacity():
    eng = make_engine(num_gpu_blocks=8, block_size=16, max_model_len=128, spec_k=0)
    a = tokens(64, start=1)
    b = tokens(64, start=10_000)
    c = tokens(64, start=20_000)
    for rid, prompt in (("a", a), ("b", b), ("c", c)):
        submit(eng, make_req(prompt, output_len=1, rid=rid))
        run(eng)  # one at a time: a's blocks are freed first, so they are evicted first
    b_ext = submit(eng, make_req(b + tokens(16, start=30_000), output_len=1, rid="b2"))
    run(eng)
    assert b_ext.cached_tokens == 64  # b survived c's allocation
    a_again = submit(eng, make_req(a + [5], output_len=1, rid="a2"))
    run(eng)
    assert a_again.cached_tokens == 0  # a was the least recently used
    assert eng.kv.evictions > 0


def test_no_prefix_caching_means_no_hits():
    eng = make_engine(enable_prefix_caching="false")
    submit(eng, make_req(tokens(64), rid="a"))
    run(eng)
    b = submit(eng, make_req(tokens(64), rid="b"))
    run(eng)
    assert b.cached_tokens == 0 and eng.stats.prefix_hits == 0


# -- scheduling ------------------------------------------------------------------------------------
def test_preemption_when_kv_exhausted_and_everyone_finishes():
    eng = make_engine(num_gpu_blocks=8, block_size=16, max_model_len=128, spec_k=0)
    first = submit(eng, make_req(tokens(48, start=1), output_len=40, rid="first"))
    second = submit(eng, make_req(tokens(48, start=5000), output_len=40, rid="second"))
    run(eng)
    assert eng.stats.preemptions >= 1
    assert first.num_preemptions == 0  # FCFS preempts the newest running request
    assert second.num_preemptions >= 1
    for r in (first, second):
        assert r.status == FINISHED and r.num_output == 40
    assert eng.kv.usage == 0.0


def test_priority_scheduling_orders_admission():
    eng = make_engine(max_num_seqs=1, scheduling_policy="priority")
    low = submit(eng, make_req(tokens(20), output_len=2, rid="low", priority=5))
    hi1 = submit(eng, make_req(tokens(20, 3000), output_len=2, rid="hi1", priority=0))
    hi2 = submit(eng, make_req(tokens(20, 6000), output_len=2, rid="hi2", priority=0))
    run(eng)
    order = sorted((r.finished_time, r.request_id) for r in (low, hi1, hi2))
    assert [rid for _, rid in order] == ["hi1", "hi2", "low"]


def test_fcfs_keeps_arrival_order():
    eng = make_engine(max_num_seqs=1, scheduling_policy="fcfs")
    reqs = [
        submit(eng, make_req(tokens(20, 1000 * i), output_len=2, rid=f"r{i}")) for i in range(3)
    ]
    run(eng)
    assert [r.finished_time for r in reqs] == sorted(r.finished_time for r in reqs)


def test_chunked_prefill_spreads_a_long_prompt_over_steps():
    eng = make_engine(max_num_batched_tokens=1000, max_model_len=8192, spec_k=0)
    r = submit(eng, make_req(tokens(2500), output_len=1, rid="long"))
    steps = run(eng)
    assert steps == 3 and r.num_output == 1


def test_queue_limit_rejects():
    eng = make_engine(max_waiting=2)
    submit(eng, make_req(tokens(8), rid="a"))
    submit(eng, make_req(tokens(8), rid="b"))
    with pytest.raises(QueueFull):
        submit(eng, make_req(tokens(8), rid="c"))


def test_decode_step_cost_grows_with_batch_size():
    def decode_cost(batch: int) -> float:
        eng = make_engine("default", spec_k=0)
        for i in range(batch):
            submit(eng, make_req(tokens(16, 100 * i), output_len=5, rid=f"r{i}"))
        eng.step(0.0)  # prefill step
        return eng.step(1.0).duration_s

    assert decode_cost(64) > decode_cost(1) > 0


def test_ttft_scale_scales_prefill_steps():
    def ttft(scale: str) -> float:
        eng = make_engine("default", ttft_scale=scale)
        r = submit(eng, make_req(tokens(500), output_len=1, rid="r"))
        run(eng)
        return r.first_token_time - r.arrival_time

    assert ttft("1.1") == pytest.approx(1.1 * ttft("1.0"))


def test_abort_frees_blocks():
    eng = make_engine()
    r = submit(eng, make_req(tokens(100), output_len=50, rid="r"))
    eng.step(0.0)
    assert eng.kv.usage > 0
    eng.abort(r, 0.1)
    assert eng.kv.usage == 0.0 and not eng.has_work()
    assert eng.stats.success["abort"] == 1


# -- speculative decoding --------------------------------------------------------------------------
def spec_workload(eng: Engine, n: int = 40, seed: int = 3) -> list[EngineRequest]:
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        reqs.append(
            submit(
                eng,
                make_req(
                    tokens(rng.randint(10, 300), start=i * 1000),
                    output_len=rng.randint(1, 120),
                    rid=f"r{i}",
                    accept_rate=rng.random(),
                    seed=i,
                ),
            )
        )
    return reqs


def test_spec_counters_equal_sums_over_requests():
    eng = make_engine(spec_k=3)
    reqs = spec_workload(eng)
    run(eng)
    st = eng.stats
    assert st.spec_drafts == sum(r.spec_steps for r in reqs)
    assert st.spec_draft_tokens == sum(r.spec_draft_tokens for r in reqs)
    assert st.spec_accepted == sum(r.spec_accepted for r in reqs)
    for pos in range(3):
        assert st.spec_accepted_per_pos[pos] == sum(sum(r.spec_hist[pos + 1 :]) for r in reqs)
    for r in reqs:
        s = r.spec_summary(3)
        assert len(s["acceptance_histogram"]) == 4
        assert sum(s["acceptance_histogram"]) == s["num_spec_steps"]
        assert s["num_draft_tokens"] == 3 * s["num_spec_steps"]
        # one token from prefill, then one per step plus the accepted drafts
        assert r.num_output == 1 + r.spec_steps + r.spec_accepted
        if r.spec_steps:
            assert s["mean_acceptance_length"] == pytest.approx(1 + r.spec_accepted / r.spec_steps)
    assert st.generation_tokens == sum(r.num_output for r in reqs)


def test_repetitive_content_accepts_more():
    content = ContentModel()
    rep = content.repetitiveness(content.text_prompt("def f(x): return x\n" * 200))
    words = random.Random(5).choices(content.words, k=600)
    varied = content.repetitiveness(content.text_prompt("".join(words)))
    assert rep > 0.8 > 0.3 > varied
    cfg = build_config("fast")
    eng = Engine(cfg)
    rates = [min(0.97, cfg.spec_accept_base + cfg.spec_accept_rep_gain * x) for x in (rep, varied)]
    a = submit(eng, make_req(tokens(50), output_len=400, rid="rep", accept_rate=rates[0], seed=1))
    b = submit(
        eng, make_req(tokens(50, 9000), output_len=400, rid="var", accept_rate=rates[1], seed=1)
    )
    run(eng)
    assert a.spec_accepted / a.spec_draft_tokens > b.spec_accepted / b.spec_draft_tokens
    assert a.spec_steps < b.spec_steps  # more tokens per step -> fewer steps


def test_spec_disabled_request_has_no_spec_steps():
    eng = make_engine(spec_k=3)
    r = submit(
        eng, make_req(tokens(20), output_len=10, rid="r", spec_enabled=False, accept_rate=0.9)
    )
    run(eng)
    assert r.spec_steps == 0 and r.num_output == 10


# -- determinism -----------------------------------------------------------------------------------
def test_same_seed_and_arrivals_give_identical_runs():
    def once() -> tuple:
        eng = make_engine("default", num_gpu_blocks=64, max_model_len=1024, max_num_seqs=8)
        clock = Clock()
        trace: list = []
        reqs = spec_workload(eng, n=30, seed=11)
        run(eng, clock, trace)
        snap = [(r.first_token_time, r.finished_time, r.cached_tokens, r.spec_hist) for r in reqs]
        return trace, snap, eng.stats.preemptions, eng.stats.spec_accepted_per_pos

    assert once() == once()


# -- invariants under random load ------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(
            st.integers(1, 200), st.integers(1, 80), st.integers(0, 3), st.sampled_from([None, "a"])
        ),
        min_size=1,
        max_size=12,
    ),
    policy=st.sampled_from(["fcfs", "priority"]),
    k=st.integers(0, 3),
)
def test_every_request_finishes_and_all_blocks_come_back(reqs, policy, k):
    eng = make_engine(
        num_gpu_blocks=24, block_size=16, max_model_len=384, max_num_batched_tokens=128,
        scheduling_policy=policy, spec_k=k,
    )  # fmt: skip
    made = []
    for i, (plen, out, prio, salt) in enumerate(reqs):
        prompt = tokens(plen, start=(i % 3) * 50)  # overlapping prefixes
        made.append(submit(eng, make_req(prompt, out, f"r{i}", priority=prio, cache_salt=salt, accept_rate=0.6, seed=i)))  # fmt: skip
    run(eng)
    assert all(r.status == FINISHED and r.num_output == r.output_len for r in made)
    assert eng.kv.num_free == eng.kv.num_blocks and eng.kv.usage == 0.0
    assert all(v == 0 for v in eng.kv.ref.values())
    assert eng.stats.generation_tokens == sum(r.output_len for r in made)


def test_segment_token_cache_is_bounded_by_tokens():
    # Long one-off segments (100k-token documents) must not pile up in the simulator.
    content = ContentModel(cache_tokens=5000)
    texts = ["".join(random.Random(i).choices(content.words, k=1000)) for i in range(20)]
    for t in texts:
        ids = content.encode(t)
        assert len(ids) == 1000 and list(ids) == content.tok.encode(t)
    assert content._cache_tokens <= 5000 and len(content._cache) == 5
    assert list(content._cache) == texts[-5:]  # least recently used go first
    content.encode(texts[15])
    content.encode(texts[0])
    assert texts[15] in content._cache and texts[16] not in content._cache
