"""How much of a server's API path is serial: fitted by replaying a burst on the engine.

A lone request's TTFT carries the whole API path (HTTP, chat template, tokenising, the hop to
the engine and back) as one constant; it cannot say how much of it holds the single API
process, so that requests arriving together queue for it (`api_ms_per_request`), and how
much overlaps other requests (`api_latency_ms`). A burst of B requests sent together can:
with a serial path their TTFTs spread out by about that much each, with an overlapping one
they share steps and finish together. The calibration sends such bursts, then replays the
same burst on the pure engine with the fitted step cost for each split of the constant
(0 %, 5 %, ... 100 % serial) and keeps the split whose mean TTFT is closest to the measured.
"""

from __future__ import annotations

import dataclasses

from workload.sim.config import SimConfig
from workload.sim.engine import Engine, EngineRequest

SPLITS = tuple(i / 20 for i in range(21))


def burst_ttft_ms(cfg: SimConfig, burst: int, prompt_tokens: int) -> float:
    """Mean TTFT (ms) of `burst` one-token requests of `prompt_tokens` arriving at t=0."""
    eng = Engine(cfg)
    reqs = []
    for i in range(burst):
        prompt = [(i * 7919 + j) % 50_000 + 1 for j in range(prompt_tokens)]
        req = EngineRequest(request_id=f"b{i}", prompt=prompt, output_len=1, spec_enabled=False)
        eng.add_request(req, 0.0)
        reqs.append(req)
    now = 0.0
    for _ in range(10 * burst + 100):  # bounded: every request needs a step or two
        if not eng.has_work():
            break
        if not eng.has_runnable():
            ready = eng.next_ready()
            now = max(now, ready if ready is not None else now)
        out = eng.step(now)
        now = out.end if out.duration_s > 0 else now + 1e-4
    return 1000.0 * sum(r.first_token_time - r.arrival_time for r in reqs) / burst


def split_api(
    cfg: SimConfig, api_ms: float, burst: int, prompt_tokens: int, measured_ms: float
) -> tuple[float, float]:
    """(api_ms_per_request, api_latency_ms) adding up to `api_ms` whose replayed burst mean
    TTFT is nearest `measured_ms` (the more overlapping split on a tie)."""
    best: tuple[float, float, float] | None = None
    for share in SPLITS:
        trial = dataclasses.replace(
            cfg, api_ms_per_request=api_ms * share, api_latency_ms=api_ms * (1 - share)
        )
        err = abs(burst_ttft_ms(trial, burst, prompt_tokens) - measured_ms)
        if best is None or err < best[0] - 1e-9:
            best = (err, trial.api_ms_per_request, trial.api_latency_ms)
    assert best is not None
    return round(best[1], 6), round(best[2], 6)
