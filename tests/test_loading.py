"""Loading profiles: built-ins, extends/--set, schema versions and migrations."""

from __future__ import annotations

from tests.profile_builders import BUILTINS, ROOT, problems, write
from workload.plan import loading
from workload.plan.loading import _builtin_dir, list_profiles, load_profile, profile_schema


def test_builtins_listed_and_valid():
    names = [n for n, _ in list_profiles()]
    assert names == BUILTINS
    for n in names:
        p = load_profile(n)
        assert p.name == n and p.classes and p.description


def test_default_is_quickstart():
    assert load_profile().name == "quickstart"


def test_builtin_profiles_are_read_from_the_one_copy_in_profiles():
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


def test_old_schema_version_migrates(monkeypatch, tmp_path):
    def v0_to_v1(raw):
        raw["classes"] = raw.pop("users")
        return raw

    monkeypatch.setitem(loading.MIGRATIONS, 0, v0_to_v1)
    p = load_profile(write(tmp_path, "schema_version: 0\nusers: {a: {weight: 2}}\n"))
    assert p.schema_version == 1 and p.classes["a"].weight == 2
