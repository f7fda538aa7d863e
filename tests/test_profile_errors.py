"""One clear line per profile problem: file, field path, what is allowed."""

from __future__ import annotations

import pytest

from tests.profile_builders import problems, write


# ---- one line per problem: file, field path, what is allowed -------------------------
@pytest.mark.parametrize(
    "text, needles",
    [
        ("classes: {a: [1, 2}\n", ["YAML syntax error", "line"]),
        ("", ["empty file"]),
        ("- a\n- b\n", ["top level is a list", "mapping"]),
        ("classes: {a: {bogus: 1}}\n", ["classes.a: unknown key 'bogus'", "allowed:", "user_turn"]),
        (
            "classes: {a: {system_prompt: {tokens: -5}}}\n",
            ["classes.a.system_prompt.tokens", ">= 0"],
        ),
        (
            "classes: {a: {user_turn: {dist: uniform, low: 1, high: 9, min: 8, max: 2}}}\n",
            ["classes.a.user_turn", "min 8 > max 2"],
        ),
        (
            "classes: {a: {tools: [nope], tool_call_probability: 0.5}}\n",
            ["classes.a.tools.nope: unknown tool", "catalog"],
        ),
        (
            "classes: {a: {user_turn: {dist: lognormal, mean: 300}}}\n",
            ["classes.a.user_turn.sigma: required field missing", "lognormal needs sigma"],
        ),
        ("classes: {a: {user_turn: {dist: gamma}}}\n", ["unknown distribution", "lognormal"]),
        ("classes: {}\n", ["at least one traffic class"]),
        ("classes: {a: {weight: 1, fixed_count: 2}}\n", ["weight or fixed_count"]),
        ("classes: {a: {context: {policy: compact}}}\n", ["compact_at_tokens"]),
        ("classes: {a: {context: {policy: zap}}}\n", ["classes.a.context.policy", "'append'"]),
        ("classes: {a: {}}\nschema_version: 0\n", ["schema_version: 0", "migrate"]),
        ("classes: {a: {}}\nschema_version: 9\n", ["newer", "upgrade"]),
        (
            "history: actual\ntools: {t: {}}\nclasses: {a: {tools: [t], request: {endpoint: completions}}}\n",
            ["endpoint"],
        ),
        (
            "classes:\n  a: {subagents: {class_name: b}}\n  b: {fixed_count: 0, subagents: {class_name: a}}\n",
            ["classes.b.subagents.class_name", "cycle (a -> b -> a)"],
        ),
    ],
)
def test_error_lines(tmp_path, text, needles):
    path = write(tmp_path, text)
    lines = problems(path)
    assert lines, "expected problems"
    for line in lines:
        assert line.startswith(path), line
        assert "Traceback" not in line and "\n" not in line
    joined = " | ".join(lines)
    for n in needles:
        assert n in joined, joined


def test_all_problems_collected(tmp_path):
    path = write(
        tmp_path,
        "classes:\n  a: {bogus: 1, system_prompt: {tokens: -1}}\n  b: {user_turn: {dist: normal}}\n",
    )
    lines = problems(path)
    assert len(lines) >= 4  # bogus, tokens, normal.mean, normal.std
