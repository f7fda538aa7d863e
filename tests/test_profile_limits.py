"""Profiles validated as data (issue 14): finite bounded numbers, YAML limits, bad files,
did-you-mean, and the file:line / --set each problem came from."""

from __future__ import annotations

import os
import time

import pytest

from tests.profile_builders import problems, write
from workload.plan.loading import ProfileError, load_profile, validate_profile

BASE = """\
schema_version: 1
classes:
  agent:
    weight: 1
{extra}"""


def one(tmp_path, extra: str) -> str:
    [line] = problems(write(tmp_path, BASE.format(extra=extra)))
    return line


@pytest.mark.parametrize(
    "extra, line_no, words",
    [
        ("    output: {tokens: .nan}\n", 5, "finite"),
        ("    think_time_s: -3\n", 5, "must be >= 0"),
        ("    steps: 0\n", 5, "must be >= 1"),
        ("    user_turn: -5\n", 5, "must be >= 0"),
        ("    steps: 2.5\n", 5, "whole number"),
        ("    weight: .inf\n", 5, "finite"),
        ("    think_time_s: {dist: uniform, low: -2, high: 3}\n", 5, "samples can be -2"),
        ("    timeouts: {request_s: 1e12}\n", 5, "<="),
        ("    fixed_count: 1e9\n", 5, ""),
    ],
)
def test_bad_numbers_fail_with_one_line_naming_file_and_line(tmp_path, extra, line_no, words):
    if "weight: .inf" in extra or "fixed_count" in extra:
        text = BASE.replace("    weight: 1\n", "").format(extra=extra)
        [line] = problems(write(tmp_path, text))
        line_no = 4
    else:
        line = one(tmp_path, extra)
    assert f"p.yaml:{line_no}: " in line and words in line, line
    assert "\n" not in line


def test_nan_in_a_mixture_component_is_refused(tmp_path):
    extra = (
        "    user_turn: {dist: mixture, components: [{weight: .nan, dist: constant, value: 3}]}\n"
    )
    assert "finite" in one(tmp_path, extra)


def test_clamped_distribution_is_fine(tmp_path):
    text = BASE.format(extra="    think_time_s: {dist: normal, mean: 1, std: 3, min: 0}\n")
    assert load_profile(write(tmp_path, text)).classes["agent"].think_time_s.floor() == 0


def test_unknown_key_did_you_mean_with_line(tmp_path):
    line = one(tmp_path, "    tool_cal_probability: 0.5\n")
    assert "p.yaml:5:" in line and "did you mean 'tool_call_probability'?" in line


def test_unknown_tool_did_you_mean(tmp_path):
    text = BASE.format(extra="    tools: [red_file]\n") + "tools:\n  read_file: {}\n"
    [line] = problems(write(tmp_path, text))
    assert "did you mean 'read_file'?" in line and "p.yaml:5:" in line


def test_alias_bomb_fails_fast(tmp_path):
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for n in "bcdefghi":
        text += f"{n}: &{n} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = n
    assert len(text) < 800
    t0 = time.monotonic()
    [line] = problems(write(tmp_path, text))
    assert time.monotonic() - t0 < 5
    assert "alias" in line


def test_many_aliases_refused(tmp_path):
    text = "x: &x 1\nl: [" + ", ".join(["*x"] * 150) + "]\n"
    [line] = problems(write(tmp_path, text))
    assert "aliases" in line


def test_deep_nesting_refused(tmp_path):
    [line] = problems(write(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n"))
    assert "nested deeper" in line


def test_size_cap(tmp_path):
    [line] = problems(write(tmp_path, "# pad\n" * 200_000 + BASE.format(extra="")))
    assert "larger than 1024 KiB" in line


def test_non_utf8_refused(tmp_path):
    p = tmp_path / "latin.yaml"
    p.write_bytes(BASE.format(extra="").encode() + b"description: caf\xe9\n")
    [line] = problems(str(p))
    assert "not UTF-8" in line and "line 5" in line


def test_directory_and_devices_refused(tmp_path):
    [line] = problems(str(tmp_path))
    assert "is a directory" in line
    [line] = problems("/dev/null")
    assert "is a device" in line


def test_fifo_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    [line] = problems(str(fifo))
    assert "is a FIFO" in line


def test_set_cannot_create_a_class_and_says_did_you_mean():
    [line] = problems("coding-agent", ["classes.codingagent.weight=3"])
    assert line.startswith("--set classes.codingagent.weight=3: ")
    assert "unknown class 'codingagent' (did you mean 'coding-agent'?)" in line


def test_set_errors_name_the_flag_not_the_builtin_file():
    [line] = problems("quickstart", ["classes.agent.think_time_s=-3"])
    assert line.startswith("--set classes.agent.think_time_s=-3: "), line
    assert "quickstart.yaml" not in line
    [line] = problems("quickstart", ["classes.agent.wieght=3"])
    assert line.startswith("--set classes.agent.wieght=3: ") and "did you mean 'weight'?" in line
    [line] = problems("quickstart", ["classes.agent.output.tokens=.nan"])
    assert line.startswith("--set ") and "finite" in line


def test_set_may_still_change_known_fields():
    p = load_profile("quickstart", ["classes.agent.weight=5", "classes.agent.timeouts.stall_s=30"])
    assert p.classes["agent"].weight == 5 and p.classes["agent"].timeouts.stall_s == 30


def test_extends_lines_point_at_the_child(tmp_path):
    write(tmp_path, BASE.format(extra=""), "base.yaml")
    child = write(tmp_path, "extends: base.yaml\nclasses:\n  agent:\n    steps: 0\n", "child.yaml")
    [line] = problems(child)
    assert "child.yaml:4:" in line


def test_validate_profile_without_origins_uses_label():
    with pytest.raises(ProfileError) as e:
        validate_profile({"classes": {"a": {"steps": 0}}}, label="x")
    assert e.value.problems[0].startswith("x: classes.a.steps")


def test_priority_and_tool_schema_are_bounded(tmp_path):
    with pytest.raises(ProfileError, match="priority: must be <="):
        validate_profile({"classes": {"a": {"request": {"priority": 10**30}}}})
    raw = {
        "tools": {"r": {"parameters": {"type": "object", "x": float("nan")}}},
        "classes": {"a": {}},
    }
    with pytest.raises(ProfileError, match="finite numbers only"):
        validate_profile(raw)
