"""Session planner figures: prompt build time, idle-session memory, profile shapes.

    python bench/bench_sessions.py            # 100k-token build time + RSS of 10,000 idle sessions
    python bench/bench_sessions.py --shapes   # per built-in class: calls, tools, tokens, cacheable share

Idle sessions are advanced a few steps into a coding-agent task (so they hold
history) and then kept, as a worker holds users in think time or a tool pause. For the whole
process (Locust users, gevent, client) see `python bench/bench_generator.py --sessions N`.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time

from workload.measure.records import RequestRecord
from workload.plan.loading import list_profiles, load_profile, validate_profile
from workload.plan.prompts import synth_for
from workload.plan.sessions import SessionPlanner
from workload.plan.tokens import get_tokenizer


def rss_mib() -> float:
    """Current RSS (MiB) from /proc (Linux); falls back to the peak."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_build(tok) -> None:
    synth = synth_for(tok)
    prof = validate_profile(
        {
            "classes": {
                "big": {"system_prompt": {"tokens": 8000, "share": "global"}, "user_turn": 92000}
            }
        }
    )
    planner = SessionPlanner(prof, tok, model="m", max_model_len=None, synth=synth)
    for i in range(20):  # warm-up: caches, allocator
        _ = planner.new_session("big", i, 0).next_step().body
    text_ms, body_ms = [], []
    for i in range(200):
        t0 = time.perf_counter_ns()
        synth.text(i * 7919 + 1, 100_000)
        text_ms.append((time.perf_counter_ns() - t0) / 1e6)
        st = planner.new_session("big", 1000 + i, 0).next_step()
        t0 = time.perf_counter_ns()
        _ = st.body
        body_ms.append((time.perf_counter_ns() - t0) / 1e6)
    n = tok.count(synth.text(1, 100_000))
    print(
        f"100k-token text ({n} tokens, exact): median {statistics.median(text_ms):.3f} ms, "
        f"p99 {sorted(text_ms)[197]:.3f} ms"
    )
    print(
        f"100k-token chat body (system 8k + user 92k, JSON bytes): median "
        f"{statistics.median(body_ms):.3f} ms, p99 {sorted(body_ms)[197]:.3f} ms"
    )


def bench_idle(tok, n: int, steps: int) -> None:
    synth_for(tok)
    planner = SessionPlanner(load_profile("coding-agent"), tok, model="m", max_model_len=131072)
    gc.collect()
    before = rss_mib()
    t0 = time.perf_counter()
    sessions = []
    ctx = []
    for u in range(n):
        s = planner.new_session("coding-agent", u, 0)
        for _ in range(steps):
            st = s.next_step()
            if st is None:
                break
            s.observe(RequestRecord(step=st.step))
        nxt = s.next_step()  # now "sleeping" before this step: its body is not built yet
        ctx.append(nxt.prompt_tokens_est if nxt else 0)
        sessions.append((s, nxt))
    gc.collect()
    after = rss_mib()
    print(
        f"{n} idle coding-agent sessions, {steps} steps in (mean context "
        f"{statistics.mean(ctx):.0f} tokens): RSS {after:.0f} MiB total, "
        f"+{after - before:.0f} MiB for the sessions ({(after - before) * 2**20 / n / 1024:.1f} KiB each); "
        f"planned in {time.perf_counter() - t0:.1f} s"
    )


def shapes(tok) -> None:
    print(
        f"{'profile':15s} {'class':15s} {'LLM/sess':>8s} {'tools/sess':>10s} {'in/req':>8s} "
        f"{'out/req':>8s} {'cacheable':>9s}"
    )
    for name, _ in list_profiles():
        planner = SessionPlanner(load_profile(name), tok, model="m", max_model_len=131072)
        for cls in planner.class_names():
            n = 20 if cls == "background" else 300
            calls = tools = prompt = cache = out = reqs = 0
            for u in range(n):
                s = planner.new_session(cls, u, 0)
                while (st := s.next_step()) is not None:
                    reqs += 1
                    prompt += st.prompt_tokens_est
                    cache += st.cacheable_tokens_est
                    out += st.max_tokens
                    s.observe(RequestRecord(step=st.step))
                calls += s.steps_done
                tools += s.tool_calls
            print(
                f"{name:15s} {cls:15s} {calls / n:8.1f} {tools / n:10.1f} {prompt / reqs:8.0f} "
                f"{out / reqs:8.0f} {cache / prompt:9.1%}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=10, help="steps each idle session has done")
    ap.add_argument("--shapes", action="store_true", help="print built-in profile shapes instead")
    a = ap.parse_args()
    tok = get_tokenizer("tiktoken:cl100k_base")
    if a.shapes:
        shapes(tok)
        return
    bench_build(tok)
    bench_idle(tok, a.sessions, a.steps)


if __name__ == "__main__":
    main()
