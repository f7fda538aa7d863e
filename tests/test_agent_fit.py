"""`agentload trace fit` on agent-session traces: a profile with agent shapes, and its check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.test_agent_traces import _task_session, _write
from workload.cli.trace import main_trace
from workload.plan.loading import load_profile, validate_profile
from workload.plan.traces import (
    agent_stats,
    compare_stats,
    fit_agent_profile,
    profile_stats,
    read_agent_trace,
)

FIX = Path(__file__).parent / "fixtures" / "traces"
ROUNDS = FIX / "tracelab_round_trace.jsonl"
NESTED = FIX / "nested_subagents.jsonl"  # make_nested_subagents.py: subagents 2 levels deep
MIXED = FIX / "mixed_subagents.jsonl"  # --mixed: two subagent models, a Bash beside the Tasks


def _rows(trace):
    prof = fit_agent_profile(trace)
    return prof, {r["statistic"]: r for r in compare_stats(agent_stats(trace), profile_stats(prof))}


def test_the_normalized_sample_fits_one_class_per_agent_with_its_shapes():
    trace = read_agent_trace(ROUNDS)
    prof, rows = _rows(trace)
    assert sorted(prof["classes"]) == ["claude-opus-4-8", "gpt-5.4"]
    codex = prof["classes"]["gpt-5.4"]
    assert codex["parallel_tools"]["values"] == [1.0, 2.0, 3.0]  # Codex ran up to 3 at once
    assert "reasoning" in codex and "reasoning" not in prof["classes"]["claude-opus-4-8"]
    assert prof["tools"]["WebSearch"]["latency_s"]["values"] == pytest.approx(
        [12.688, 16.113, 19.291], abs=1e-3
    )
    # the provider cache's misses, fitted per round (Claude's cache stops at the previous
    # prompt: 2 tokens short; Codex's lost 6.6k once and reached into the answer 3 times)
    claude = prof["classes"]["claude-opus-4-8"]
    assert claude["context"]["cache_loss_tokens"]["values"] == [2.0, 131.0, 2892.0]
    assert min(codex["context"]["cache_loss_tokens"]["values"]) == -276.0
    assert claude["first_user_turn"] == 5055 - 8  # the first round's appended, less its header
    # the generated sessions follow the trace (the bench prints every figure)
    for stat in (
        "rounds per session",
        "input per round (tokens)",
        "prefix per round (tokens)",
        "appended per round (tokens)",
        "output per round (tokens)",
        "reasoning per round (tokens)",
        "tool calls per tool round",
        "tool wait WebSearch (s)",
    ):
        assert rows[stat]["met"], rows[stat]


def test_subagents_fit_a_child_class_the_parent_spawns_and_joins(tmp_path: Path):
    recs, _ = _task_session(agent_in_file=True)
    trace = read_agent_trace(_write(tmp_path / "S.jsonl", recs))
    prof, rows = _rows(trace)
    (parent,) = [c for c in prof["classes"].values() if "subagents" in c]
    child = prof["classes"][parent["subagents"]["class_name"]]
    assert child["fixed_count"] == 0 and parent["subagents"]["tool"] == "Task"
    assert parent["subagents"]["probability"] == 1.0
    assert rows["subagents per session"]["trace"] == 1.0
    assert rows["subagents per session"]["met"] and rows["rounds per subagent"]["met"]


def test_nested_subagents_fit_one_class_per_depth_and_generate_each_depth():
    trace = read_agent_trace(NESTED)
    prof, rows = _rows(trace)
    top, sub, grand = (prof["classes"][n] for n in (
        "claude-opus-4-8", "claude-sonnet-4-6-subagent", "claude-sonnet-4-6-subagent-depth2"))  # fmt: skip
    assert top["subagents"]["class_name"] == "claude-sonnet-4-6-subagent"
    assert top["subagents"]["count"] == 2.0  # two Task calls in one round
    assert sub["subagents"]["class_name"] == "claude-sonnet-4-6-subagent-depth2"
    assert sub["fixed_count"] == grand["fixed_count"] == 0 and "subagents" not in grand
    # the depth-1 class spawns in 5 of its 8 sessions' 24 non-last rounds
    assert sub["subagents"]["probability"] == pytest.approx(5 / 24, abs=1e-6)
    assert (sub["steps"], grand["steps"]) == (4.0, 3.0)
    assert rows["subagents per session, depth 1"]["trace"] == 2.0
    assert rows["subagents per session, depth 2"]["trace"] == 1.25
    for stat in (
        "subagents per session",
        "subagents per session, depth 1",
        "subagents per session, depth 2",
        "rounds per subagent, depth 1",
        "rounds per subagent, depth 2",
        "appended per round (tokens)",
    ):
        assert rows[stat]["met"], rows[stat]
    # the generated sessions reach depth 2 and no deeper (the deepest class spawns none)
    assert set(profile_stats(prof, 40)["by_depth"]) == {1, 2}


def test_cli_fit_writes_a_loadable_profile_and_prints_both_sides(tmp_path: Path, capsys):
    out = tmp_path / "fit.yaml"
    assert main_trace(["fit", str(ROUNDS), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "statistic" in text and "within 10 %" in text and "tool wait Bash (s)" in text
    assert "statistics within 10 %" in text.splitlines()[-1]
    prof = load_profile(str(out))
    assert prof.name == "fit" and set(prof.classes) == set(
        yaml.safe_load(out.read_text())["classes"]
    )


def test_a_task_beside_a_bash_fits_a_spawn_that_also_calls_the_tool(tmp_path: Path):
    recs, _ = _task_session(agent_in_file=True)
    trace = read_agent_trace(_write(tmp_path / "S.jsonl", recs))
    prof, rows = _rows(trace)
    (parent,) = [c for c in prof["classes"].values() if "subagents" in c]
    sub = parent["subagents"]
    assert sub["tool_calls_probability"] == 1.0 and sub["tool_calls"] == 1.0
    assert "Bash" in parent["tools"]  # the call beside the Task picks its tool by weight
    assert rows["tool calls per tool round"]["trace"] == 1.0
    for stat in ("tool calls per tool round", "tool wait Bash (s)", "subagents per session"):
        assert rows[stat]["met"], rows[stat]


def test_subagents_of_several_models_fit_a_weighted_choice_of_child_classes():
    trace = read_agent_trace(MIXED)
    prof, rows = _rows(trace)
    top = prof["classes"]["claude-opus-4-8"]["subagents"]
    assert top["classes"] == {"claude-haiku-4-5-subagent": 3.0, "claude-sonnet-4-6-subagent": 5.0}
    assert "class_name" not in top
    assert top["tool_calls_probability"] == 0.5 and top["tool_calls"] == 1.0
    assert "subagents" not in prof["classes"]["claude-haiku-4-5-subagent"]  # spawned none
    sonnet = prof["classes"]["claude-sonnet-4-6-subagent"]["subagents"]
    assert sonnet["class_name"] == "claude-sonnet-4-6-subagent-depth2"
    validate_profile(prof, "fit")  # the weighted choice loads
    for stat in (
        "subagents per session",
        "subagents per session, depth 1",
        "subagents per session, depth 2",
        "rounds per subagent, depth 1",
        "tool wait Bash (s)",
        "tool calls per round",
        "share of depth-1 subagents, claude-haiku-4-5-subagent",
        "share of depth-1 subagents, claude-sonnet-4-6-subagent",
    ):
        assert rows[stat]["met"], rows[stat]
    assert rows["share of depth-1 subagents, claude-haiku-4-5-subagent"]["trace"] == 3 / 8
