"""Small builders of request/session records and aggregates for the stats and console tests."""

from __future__ import annotations

import random

from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.stats import Aggregate


def req(**kw) -> RequestRecord:
    d = dict(
        user_class="chat",
        session_id="s1",
        step=1,
        t_start=1_000.0,
        ttft_ms=120.0,
        e2e_ms=900.0,
        tpot_ms=12.5,
        prompt_tokens=1000,
        completion_tokens=64,
        itl_gaps_ms=[10.0, 12.0, 11.5],
    )
    d.update(kw)
    return RequestRecord(**d)


def sess(**kw) -> SessionRecord:
    d = dict(user_class="chat", session_id="s1", outcome="completed", duration_ms=5_000.0)
    d.update(kw)
    return SessionRecord(**d)


def random_records(seed: int, n: int = 300) -> tuple[list[RequestRecord], list[SessionRecord]]:
    rng = random.Random(seed)
    reqs, sessions = [], []
    for i in range(n):
        cls = rng.choice(["chat", "agent", "batch"])
        status = rng.choices(["ok", "error", "cancelled"], [8, 1, 1])[0]
        spec = None
        if rng.random() < 0.7:
            k = rng.choice([2, 3, 4])
            steps = rng.randint(1, 50)
            hist = [0] * (k + 1)
            for _ in range(steps):
                hist[rng.randint(0, k)] += 1
            acc = sum(i * c for i, c in enumerate(hist))
            spec = {
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": acc,
                "num_draft_tokens": steps * k,
                "acceptance_histogram": hist,
                "mean_acceptance_length": 1 + acc / steps,
            }
        reqs.append(
            req(
                user_class=cls,
                session_id=f"s{i % 40}",
                step=rng.randint(1, 6),
                t_start=1_000.0 + rng.random() * 100,
                status=status,
                error_kind=rng.choice(["timeout", "tool_loop", "http_status"])
                if status == "error"
                else None,
                ttft_ms=rng.lognormvariate(5, 1),
                e2e_ms=rng.lognormvariate(8, 1),
                tpot_ms=rng.uniform(0.2, 40),
                itl_gaps_ms=[rng.expovariate(1 / 15) for _ in range(rng.randint(0, 30))],
                cached_tokens=rng.randint(0, 900) if rng.random() < 0.5 else None,
                tool_calls=[{"name": "x"}] * rng.randint(0, 2),
                spec_decode=spec,
            )
        )
    for i in range(40):
        sessions.append(
            sess(
                user_class=rng.choice(["chat", "agent", "batch"]),
                session_id=f"s{i}",
                outcome=rng.choice(["completed", "failed", "tool_loop_failure", "cancelled"]),
                duration_ms=rng.uniform(1000, 600_000),
            )
        )
    return reqs, sessions


def build(reqs, sessions) -> Aggregate:
    agg = Aggregate()
    for r in reqs:
        agg.add_request(r)
    for s in sessions:
        agg.add_session(s)
    return agg
