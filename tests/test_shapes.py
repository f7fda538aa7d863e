"""Agent shapes in synthetic profiles: parallel tool calls, subagent fan-out, reasoning tokens."""

from __future__ import annotations

import orjson
import pytest

from tests.test_sessions import make, ok, play
from workload.plan.loading import ProfileError, validate_profile
from workload.plan.shapes import MAX_FANOUT, MAX_SUBAGENT_DEPTH

SLOW = {"latency_s": 3.0, "result_tokens": 50, "parameters": {"type": "object"}}
PARALLEL = {
    "tools": {"slow": SLOW},
    "classes": {"agent": {"tools": {"read": 1, "slow": 1}, "parallel_tools": 3}},
}
SUB = {
    "classes": {
        "agent": {"subagents": {"class_name": "explorer", "probability": 1.0, "count": 2}},
        "explorer": {
            "fixed_count": 0,
            "steps": 2,
            "system_prompt": {"tokens": 300, "share": "class"},
            "user_turn": 40,
        },
    }
}


def _calls(body: dict) -> list[list[str]]:
    """The tool names of each assistant tool-call message in a body's history."""
    return [
        [c["function"]["name"] for c in m["tool_calls"]]
        for m in body["messages"]
        if m.get("tool_calls")
    ]


# ---- parallel tool calls ------------------------------------------------------------------
def test_a_tool_step_emits_k_parallel_calls_and_the_next_step_waits_for_the_slowest():
    steps = play(make(PARALLEL).new_session("agent", 0, 0))
    last = steps[-1][1]
    calls = _calls(last)
    assert calls and all(len(c) == 3 for c in calls)
    # every call gets its own result, in the step after it
    results = [m for m in last["messages"] if m["role"] == "tool"]
    assert len(results) == 3 * len(calls)
    assert len({m["tool_call_id"] for m in results}) == len(results)
    for (st, _), (nxt, _) in zip(steps, steps[1:], strict=False):
        if st.planned_tool is not None:
            names = st.planned_calls
            assert len(names) == 3 and names[0] == st.planned_tool
            want = 3.0 if "slow" in names else 0.25  # the slowest of the three
            assert nxt.tool_pause_s == pytest.approx(want)


def test_parallel_calls_are_deterministic_and_distinct():
    a = [b for _, b in play(make(PARALLEL).new_session("agent", 0, 0))]
    b = [b for _, b in play(make(PARALLEL).new_session("agent", 0, 0))]
    assert a == b
    args = [c["function"]["arguments"] for c in a[-1]["messages"][2]["tool_calls"]]
    assert len(set(args)) == 3  # three calls, three argument sets


def test_a_profile_without_shapes_keeps_its_bytes():
    # parallel_tools 1 (the default) draws nothing: the bytes are those of before
    plain = [b for _, b in play(make().new_session("agent", 0, 0))]
    one = [b for _, b in play(make({"classes": {"agent": {"parallel_tools": 1}}}).new_session("agent", 0, 0))]  # fmt: skip
    assert plain == one


def test_parallel_tools_limits():
    for bad, msg in (
        ({"parallel_tools": 0}, "must be >= 1"),
        ({"parallel_tools": MAX_FANOUT + 1}, f"at most {MAX_FANOUT}"),
        ({"parallel_tools": {"dist": "lognormal", "mean": 40, "sigma": 1, "min": 1}}, "at most"),
    ):
        with pytest.raises(ProfileError) as e:
            make({"classes": {"agent": bad}})
        assert any(msg in p and "classes.agent.parallel_tools" in p for p in e.value.problems)


# ---- subagents ----------------------------------------------------------------------------
def _drive(session):
    """Play a session as the Locust player does: children start after the spawning answer."""
    out = []
    while (st := session.next_step()) is not None:
        starts, joins = session.children_due()
        out.append((st, orjson.loads(st.body), starts, joins))
        session.observe(ok(st))
    return out


def test_a_step_spawns_k_subagents_of_another_class_and_the_next_step_joins_them():
    p = make(SUB)
    steps = _drive(p.new_session("agent", 0, 0))
    first, second = steps[0], steps[1]
    assert first[2] == [] and first[0].planned_calls == ("task", "task")
    starts, joins = second[2], second[3]
    assert len(starts) == 2 and joins == [s.session.session_id for s in starts]
    kid = starts[0].session
    assert kid.class_name == "explorer" and kid.parent_session == steps[0][0].session_id
    assert kid.session_id.startswith(steps[0][0].session_id + "/explorer-1.")
    kid_steps = _drive(kid)
    assert len(kid_steps) == 2 and kid_steps[0][0].think_s == 0.0  # starts at once
    # the child has its own system prompt (class explorer), not the parent's
    assert kid_steps[0][1]["messages"][0]["content"] != first[1]["messages"][0]["content"]
    assert p.new_session("agent", 0, 0).session_id == steps[0][0].session_id
    # the join step carries one result per child, for the spawn calls
    results = [m for m in second[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 2
    assert second[0].tool_pause_s == 0.0  # the wait is the children's run, joined by the player
    # the spawn tool is in the schemas the parent sends
    assert "task" in [t["function"]["name"] for t in first[1]["tools"]]


def test_subagents_are_deterministic_per_parent_step_and_place():
    def ids():
        out = []
        for _st, _, starts, _ in _drive(make(SUB).new_session("agent", 1, 2)):
            out += [(s.session.session_id, s.session.next_step().body) for s in starts]
        return out

    a, b = ids(), ids()
    assert a == b and len({i for i, _ in a}) == len(a) > 2


def test_a_subagent_class_plays_no_users_of_its_own():
    from workload.plan.load_model import closed_classes

    prof = validate_profile(
        {**SUB, "tools": {}, "classes": {**SUB["classes"], "agent": SUB["classes"]["agent"]}}
    )
    table = dict((n, (w, c)) for n, w, c in closed_classes(prof))
    assert table["explorer"] == (0.0, 0)


@pytest.mark.parametrize(
    "over, msg",
    [
        ({"agent": {"subagents": {"class_name": "nope"}}}, "unknown class 'nope'"),
        (
            {
                "agent": {"subagents": {"class_name": "chat"}},
                "chat": {"subagents": {"class_name": "agent"}},
            },
            "spawn in a cycle (agent -> chat -> agent)",
        ),
        ({"agent": {"subagents": {"class_name": "agent"}}}, "cycle (agent -> agent)"),
        ({"agent": {"subagents": {"class_name": "chat", "tool": "read"}}}, "also in tools"),
        ({"agent": {"subagents": {"class_name": "chat", "count": 0}}}, "must be >= 1"),
    ],
)
def test_subagent_problems_name_the_field(over, msg):
    with pytest.raises(ProfileError) as e:
        make({"classes": over})
    assert any(msg in p and ".subagents" in p for p in e.value.problems), e.value.problems


def test_a_cycle_is_one_line_however_many_classes_it_passes():
    over = {n: {"subagents": {"class_name": m}} for n, m in (("agent", "chat"), ("chat", "x"), ("x", "agent"))}  # fmt: skip
    with pytest.raises(ProfileError) as e:
        make({"classes": {**over, "x": {**over["x"], "fixed_count": 0}}})
    assert [p for p in e.value.problems if "cycle" in p] == [
        "<profile>: classes.x.subagents.class_name: subagent classes spawn in a cycle (agent -> chat -> x "
        "-> agent); a class may not spawn itself, directly or through its subagents"
    ]


def test_subagents_nest_at_most_max_depth_levels():
    def chain(levels):
        names = [f"c{i}" for i in range(levels + 1)]
        classes = {n: {"fixed_count": 0, "steps": 2} for n in names[1:]}
        for a, b in zip(names, names[1:], strict=False):
            classes.setdefault(a, {})["subagents"] = {"class_name": b, "probability": 0.5}
        return {"classes": classes}

    make(chain(MAX_SUBAGENT_DEPTH))
    with pytest.raises(ProfileError) as e:
        make(chain(MAX_SUBAGENT_DEPTH + 1))
    assert e.value.problems == [
        f"<profile>: classes.c0.subagents: subagents nest {MAX_SUBAGENT_DEPTH + 1} levels deep "
        f"({' -> '.join(f'c{i}' for i in range(MAX_SUBAGENT_DEPTH + 2))}); "
        f"at most {MAX_SUBAGENT_DEPTH}"
    ]


def test_a_subagent_spawns_its_own_and_joins_them_before_its_parent_does():
    nested = {"classes": {**SUB["classes"], "explorer": {
        **SUB["classes"]["explorer"], "steps": 3,
        "subagents": {"class_name": "reader", "probability": 1.0, "count": 1}},
        "reader": {"fixed_count": 0, "steps": 2, "system_prompt": {"tokens": 200}},
    }}  # fmt: skip
    p = make(nested)
    root = _drive(p.new_session("agent", 0, 0))
    kid = root[1][2][0].session
    kid_steps = _drive(kid)
    assert kid_steps[0][0].planned_calls == ("task",)  # the explorer spawns a reader
    (grand,) = kid_steps[1][2]
    assert grand.session.class_name == "reader" and grand.session.parent_session == kid.session_id
    assert kid_steps[1][3] == [grand.session.session_id]  # the explorer's join
    assert grand.session.session_id.startswith(kid.session_id + "/reader-1.0")
    assert len(_drive(grand.session)) == 2 and grand.session.children_due() == ([], [])
    # deterministic: the same grandchild bytes again
    again = _drive(p.new_session("agent", 0, 0))[1][2][0].session
    g2 = _drive(again)[1][2][0].session
    assert g2.session_id == grand.session.session_id
    assert g2.next_step().body == p.new_child(kid, 1, 0).next_step().body


# ---- reasoning ------------------------------------------------------------------------------
def test_reasoning_asks_for_a_budget_and_grows_max_tokens():
    p = make({"classes": {"agent": {"reasoning": {"tokens": 300}}}})
    for st, body in play(p.new_session("agent", 0, 0)):
        assert body["thinking_token_budget"] == 300 and st.reasoning_tokens == 300
        assert body["max_tokens"] == 40 + 300 or st.expects_tool_call
    # the history keeps the visible answer only (scripted): hidden reasoning is not replayed
    p2 = make({"classes": {"chat": {"reasoning": {"tokens": 300}, "output": {"tokens": 40}}}})
    last = play(p2.new_session("chat", 0, 0))[-1][1]
    answers = [m for m in last["messages"] if m["role"] == "assistant"]
    assert answers and all(30 < len(m["content"].split()) <= 60 for m in answers)


def test_reasoning_effort_and_none():
    eff = make({"classes": {"agent": {"reasoning": {"tokens": 100, "request": "reasoning_effort", "effort": "high"}}}})  # fmt: skip
    body = play(eff.new_session("agent", 0, 0))[0][1]
    assert body["reasoning_effort"] == "high" and "thinking_token_budget" not in body
    none = make({"classes": {"agent": {"reasoning": {"tokens": 100, "request": "none"}}}})
    body = play(none.new_session("agent", 0, 0))[0][1]
    assert "reasoning_effort" not in body and "thinking_token_budget" not in body
    assert body["max_tokens"] == 140


def test_reasoning_counts_in_the_context_fit():
    with pytest.raises(ProfileError):
        make({"classes": {"agent": {"reasoning": {"tokens": -1}}}})
    p = make({"classes": {"agent": {"reasoning": {"tokens": 5000}}}}, max_model_len=4096)
    assert any("output of up to 5040" in w for w in p.warnings)
    for st, body in play(p.new_session("agent", 0, 0)):
        assert st.prompt_tokens_est + body["max_tokens"] <= 4096
