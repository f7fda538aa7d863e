"""Scripted structured-output steps: tool_choice required / named on every N-th tool step."""

from __future__ import annotations

from tests.test_sessions import make, play


def _choices(over):
    return [
        (st.step, body.get("tool_choice"))
        for st, body in play(make(over).new_session("agent", 0, 0))
    ]


def test_structured_every_sends_named_tool_choice_on_those_steps_only():
    got = _choices({"classes": {"agent": {"request": {"structured_every": 2}}}})
    named = {"type": "function", "function": {"name": "read"}}
    # Steps 1-5 plan a tool call (probability 1); step 6 is the last and does not.
    assert got == [(1, "none"), (2, named), (3, "none"), (4, named), (5, "none"), (6, "none")]


def test_structured_required_and_default_off():
    got = _choices(
        {
            "classes": {
                "agent": {"request": {"structured_every": 3, "structured_choice": "required"}}
            }
        }
    )
    assert [c for _, c in got] == ["none", "none", "required", "none", "none", "none"]
    assert {c for _, c in _choices(None)} == {"none"}
