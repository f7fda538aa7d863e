"""Profiles: built-ins, extends/--set, schema versions, and one clear line per problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from workload.plan import profile as prof
from workload.plan.profile import (
    ProfileError,
    list_profiles,
    load_profile,
    profile_schema,
    validate_profile,
)

ROOT = Path(__file__).resolve().parents[1]
BUILTINS = ["chat", "coding-agent", "mixed", "quickstart", "research-agent"]


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def problems(path_or_name: str, overrides=()) -> list[str]:
    with pytest.raises(ProfileError) as e:
        load_profile(path_or_name, list(overrides))
    return e.value.problems


def test_builtins_listed_and_valid():
    names = [n for n, _ in list_profiles()]
    assert names == BUILTINS
    for n in names:
        p = load_profile(n)
        assert p.name == n and p.classes and p.description


def test_default_is_quickstart():
    assert load_profile().name == "quickstart"


def test_builtin_profiles_are_read_from_the_one_copy_in_profiles():
    from workload.plan.profile import _builtin_dir

    assert _builtin_dir() == ROOT / "profiles"
    assert not (ROOT / "workload" / "builtin_profiles").exists()


def test_builtins_document_their_numbers():
    for n in BUILTINS:
        head = (ROOT / "profiles" / f"{n}.yaml").read_text().split("schema_version")[0]
        assert "Where the numbers come from" in head, n


def test_extends_builtin_and_file(tmp_path):
    base = write(
        tmp_path,
        "extends: quickstart\nseed: 99\nclasses: {agent: {weight: 7}}\n",
        "base.yaml",
    )
    p = load_profile(base)
    assert p.seed == 99 and p.classes["agent"].weight == 7
    # deep merge kept the rest of the class
    assert p.classes["agent"].tools == {"read_file": 3.0, "run_tests": 1.0}
    assert "chat" in p.classes
    child = write(
        tmp_path, "extends: base.yaml\nclasses: {chat: {fixed_count: 2, weight: null}}\n", "c.yaml"
    )
    p2 = load_profile(child)
    assert p2.seed == 99 and p2.classes["chat"].fixed_count == 2


def test_extends_cycle(tmp_path):
    write(tmp_path, "extends: b.yaml\nclasses: {a: {}}\n", "a.yaml")
    write(tmp_path, "extends: a.yaml\n", "b.yaml")
    (line,) = problems(str(tmp_path / "a.yaml"))
    assert "cycle" in line


def test_set_overrides_are_yaml_typed():
    p = load_profile(
        "quickstart",
        [
            "seed=11",
            "classes.agent.request.stream=false",
            "classes.agent.user_turn={dist: uniform, low: 5, high: 9}",
            "classes.agent.slo.ttft_p95_ms=750",
        ],
    )
    assert p.seed == 11 and p.classes["agent"].request.stream is False
    assert p.classes["agent"].user_turn.dist == "uniform"
    assert p.classes["agent"].slo.ttft_p95_ms == 750


def test_set_bad_syntax():
    assert "expected path.to.field=value" in problems("quickstart", ["seed"])[0]
    (line,) = problems("quickstart", ["classes.agent.bogus=1"])
    assert "unknown key 'bogus'" in line and "allowed:" in line


def test_schema_is_json_schema():
    s = profile_schema()
    assert s["type"] == "object" and "classes" in s["properties"]
    assert "TrafficClass" in s["$defs"]


def test_unknown_profile_name():
    (line,) = problems("no-such-profile")
    assert "no-such-profile" in line and "quickstart" in line


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


def test_old_schema_version_migrates(monkeypatch, tmp_path):
    def v0_to_v1(raw):
        raw["classes"] = raw.pop("users")
        return raw

    monkeypatch.setitem(prof.MIGRATIONS, 0, v0_to_v1)
    p = load_profile(write(tmp_path, "schema_version: 0\nusers: {a: {weight: 2}}\n"))
    assert p.schema_version == 1 and p.classes["a"].weight == 2


def test_validate_profile_dict():
    p = validate_profile({"classes": {"x": {}}})
    c = p.classes["x"]
    assert c.weight == 1 and c.context.policy == "append" and c.request.endpoint == "chat"
    assert p.compare.ttft_p95_pct == 10 and p.max_error_ratio == 0.05


def test_docs_reference_is_generated_from_the_models():
    from workload.plan.profile import REF_BEGIN, REF_END, reference_markdown

    page = "docs/profiles-reference.md"
    text = (ROOT / page).read_text()
    got = text[text.index(REF_BEGIN) + len(REF_BEGIN) : text.index(REF_END)].strip()
    assert got == reference_markdown().strip(), (
        f'{page} is stale: python -c "from workload.plan.profile import write_reference; '
        f"write_reference('{page}')\""
    )
