"""Subagent spawns that also call tools (a Task beside a Bash), and a weighted choice of
child classes: the profile, the planner's step shapes, and the player's join."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import gevent
import pytest

from tests.test_sessions import make
from tests.test_shapes import SLOW, SUB, _drive
from workload.plan.loading import ProfileError

EXPLORER = SUB["classes"]["explorer"]
MIXED = {
    "tools": {"slow": SLOW},
    "classes": {
        "agent": {
            "tools": {"read": 1, "slow": 1},
            "subagents": {
                "class_name": "explorer", "probability": 1.0, "count": 2,
                "tool_calls_probability": 1.0, "tool_calls": 2,
            },
        },
        "explorer": EXPLORER,
    },
}  # fmt: skip
CHOICE = {
    "classes": {
        "agent": {"subagents": {"classes": {"explorer": 3, "coder": 1}, "probability": 1.0}},
        "explorer": EXPLORER,
        "coder": {**EXPLORER, "system_prompt": {"tokens": 500, "share": "class"}},
    }
}


def test_a_spawning_step_also_calls_tools_and_the_next_step_joins_both():
    steps = _drive(make(MIXED).new_session("agent", 0, 0))
    (first, _, _, _), (second, body2, starts, joins) = steps[0], steps[1]
    spawns = [c for c in first.planned_calls if c == "task"]
    tools = [c for c in first.planned_calls if c != "task"]
    assert len(spawns) == 2 and len(tools) == 2 and set(tools) <= {"read", "slow"}
    assert first.planned_tool == "task"
    # the next step: two children to join, and the slowest ordinary tool as its pause
    assert len(starts) == 2 and joins == [s.session.session_id for s in starts]
    want = 3.0 if "slow" in tools else 0.25
    assert second.tool_pause_s == pytest.approx(want)
    assert sorted(n for n, _ in second.tool_waits) == sorted(tools)  # the spawns are not waits
    results = [m for m in body2["messages"] if m["role"] == "tool"]
    assert len(results) == 4  # one per call: two reports, two tool results


def test_tools_beside_a_spawn_are_drawn_only_when_asked_so_other_profiles_keep_their_bytes():
    plain = [b for _, b, _, _ in _drive(make(SUB).new_session("agent", 0, 0))]
    zero = {**SUB, "classes": {**SUB["classes"], "agent": {"subagents": {
        **SUB["classes"]["agent"]["subagents"], "tool_calls_probability": 0.0}}}}  # fmt: skip
    assert plain == [b for _, b, _, _ in _drive(make(zero).new_session("agent", 0, 0))]


def test_a_spawn_draws_each_child_class_by_weight_deterministically():
    p = make(CHOICE)
    seen: Counter[str] = Counter()
    for u in range(150):
        for _st, _, starts, _ in _drive(p.new_session("agent", u, 0)):
            seen.update(s.session.class_name for s in starts)
    total = sum(seen.values())
    assert set(seen) == {"explorer", "coder"} and total > 150
    assert 0.65 < seen["explorer"] / total < 0.85  # weight 3 of 4
    again = [
        s.session.session_id
        for _st, _, starts, _ in _drive(make(CHOICE).new_session("agent", 7, 0))
        for s in starts
    ]
    first = [
        s.session.session_id for _st, _, starts, _ in _drive(p.new_session("agent", 7, 0))
        for s in starts
    ]  # fmt: skip
    assert again == first


def _sub(**kw):
    return {"agent": {"subagents": {"probability": 0.5, **kw}}, "explorer": EXPLORER}


@pytest.mark.parametrize(
    "classes, msg",
    [
        (_sub(classes={"explorer": 0}), "classes.agent.subagents.classes.explorer: weight 0; must be > 0"),
        (_sub(classes={"explorer": -1.5}), "weight -1.5; must be > 0"),
        (_sub(classes={"explorer": 1, "nope": 1}), "classes.agent.subagents.classes: unknown class 'nope'"),
        (_sub(classes={}), "classes.agent.subagents.classes: empty"),
        (_sub(), "give class_name or classes"),
        (_sub(class_name="explorer", classes={"explorer": 1}), "give class_name or classes"),
        (
            {"solo": {"subagents": {"class_name": "explorer", "tool_calls_probability": 0.5}}, "explorer": EXPLORER},
            "classes.solo.subagents.tool_calls_probability: the class has no tools",
        ),
        (
            {"agent": {"subagents": {"class_name": "explorer", "tool_calls": 0}}, "explorer": EXPLORER},
            "classes.agent.subagents.tool_calls: samples can be 0; must be >= 1",
        ),
    ],
)  # fmt: skip
def test_nonsense_in_a_weighted_spawn_is_one_clear_line(classes, msg):
    with pytest.raises(ProfileError) as e:
        make({"classes": classes})
    assert any(msg in p for p in e.value.problems), e.value.problems


def test_the_cycle_check_walks_every_edge_of_a_weighted_choice():
    # agent's first choice is acyclic; its second closes a cycle through helper
    classes = {
        "agent": {"subagents": {"classes": {"explorer": 5, "helper": 1}}},
        "explorer": EXPLORER,
        "helper": {**EXPLORER, "subagents": {"class_name": "agent"}},
    }
    with pytest.raises(ProfileError) as e:
        make({"classes": classes})
    assert [p for p in e.value.problems if "cycle" in p] == [
        "<profile>: classes.helper.subagents.class_name: subagent classes spawn in a cycle "
        "(agent -> helper -> agent); a class may not spawn itself, directly or through its "
        "subagents"
    ]


def test_a_weighted_choice_nests_no_deeper_than_its_longest_branch_allows():
    from workload.plan.shapes import MAX_SUBAGENT_DEPTH

    names = [f"c{i}" for i in range(MAX_SUBAGENT_DEPTH + 2)]
    classes = {n: {"fixed_count": 0, "steps": 2} for n in names[1:]}
    for a, b in zip(names, names[1:], strict=False):
        classes.setdefault(a, {})["subagents"] = {"classes": {b: 1, "leaf": 1}}
    classes["leaf"] = {"fixed_count": 0}
    with pytest.raises(ProfileError) as e:
        make({"classes": classes})
    assert e.value.problems == [
        f"<profile>: classes.c0.subagents: subagents nest {MAX_SUBAGENT_DEPTH + 1} levels deep "
        f"({' -> '.join(names)}); at most {MAX_SUBAGENT_DEPTH}"
    ]


class _Pacer:
    def wait(self) -> None:
        pass


class _Rt:
    pacer = _Pacer()


def _player_pause(step, joins: list[str]) -> tuple[list[str], list[float]]:
    """Run users._pause on ``step`` with one child per join that outlasts the tools' pause:
    (the order of events, the pauses the player slept). Ordering only, no timing claim."""
    from workload.locust import users

    events: list[str] = []
    real = gevent.sleep
    sleeps: list[float] = []
    main = gevent.getcurrent()

    def child() -> None:
        events.append("child start")
        real(0.2)
        events.append("child end")

    def sleep(d: float = 0) -> None:
        real(d)
        if gevent.getcurrent() is main:
            sleeps.append(d)
            events.append("tool pause over")

    step.tool_pause_s, step.think_s = 0.01, 0.0
    children = {j: gevent.spawn(child) for j in joins}
    gevent.sleep = sleep  # the player's module reads gevent.sleep at call time
    try:
        users._pause(_Rt(), step, joins, children)
    finally:
        gevent.sleep = real
    assert children == {}  # every child joined
    return events, sleeps


def _in_own_process(check: str, *args: str) -> None:
    """Run ``check`` (a function of this module) in its own interpreter: the player lives
    beside Locust's users, and `import locust` monkey-patches the interpreter it runs in (an
    xdist worker's own threads then end in gevent's LoopExit, as tests/test_pacing.py says)."""
    root = Path(__file__).resolve().parents[1]
    code = f"import sys, tests.test_spawn_choice as t; t.{check}(*sys.argv[1:])"
    p = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=root, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]


def test_the_player_runs_the_tools_beside_the_children_and_joins_the_slowest():
    """The tools' pause runs while the children do: the join waits for the slowest of
    both, not their sum."""
    _in_own_process("player_joins_the_slowest_check")


def player_joins_the_slowest_check() -> None:
    second, _, _, joins = _drive(make(MIXED).new_session("agent", 0, 0))[1]
    events, sleeps = _player_pause(second, joins)
    assert events == ["child start", "child start", "tool pause over", "child end", "child end"]
    assert sleeps == [0.01]  # one pause for the tools; the children are joined, not slept


def test_a_replayed_task_beside_a_bash_waits_for_both(tmp_path):
    """Closed-loop replay of a Claude Code round with a Task and a Bash: the next round's
    pause is the Bash's recorded wait, it joins the sidechain, and the player overlaps them."""
    _in_own_process("replayed_task_beside_a_bash_check", str(tmp_path))


def replayed_task_beside_a_bash_check(folder: str) -> None:
    tmp_path = Path(folder)
    from tests.test_agent_replay import _play
    from tests.test_agent_traces import _task_session, _write
    from workload.plan.prompts import synth_for
    from workload.plan.tokens import get_tokenizer
    from workload.plan.traces import ReplayOptions, read_agent_trace, root_sessions

    recs, _ = _task_session(agent_in_file=True)
    trace = read_agent_trace(_write(tmp_path / "S.jsonl", recs))
    synth = synth_for(get_tokenizer("tiktoken:cl100k_base"))
    steps = _play(root_sessions(trace, synth, ReplayOptions("m", 1))(0))
    step, (starts, joins) = steps[1]
    assert [t.name for t in trace.sessions["S"][0].tools] == ["Task", "Bash"]
    assert step.tool_pause_s == pytest.approx(0.5) and joins == ["S/agent-a1"]
    assert [c.session.session_id for c in starts] == joins
    events, sleeps = _player_pause(step, joins)
    assert events == ["child start", "tool pause over", "child end"] and sleeps == [0.01]
