"""The run option table, the RunSpec it resolves to, the error edge and the child-process helper."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workload.cli.main import main, resolve_run
from workload.errors import EXIT_BAD_INPUT, AgentloadError, ProfileError, SetupError, UsageError
from workload.locust.options import add_arguments, form_changed, reresolve, spec_from_options
from workload.orchestrate.locust_child import locust_argv
from workload.run.options import CANARY_FORBIDDEN, OPTIONS, build_run_parser, raw_values
from workload.run.spec import RunSpec, read_spec, write_spec
from workload.stopping import die_with_parent, stop_child

ROOT = Path(__file__).resolve().parent.parent
CHAT = str(ROOT / "tests" / "fixtures" / "e2e_chat.yaml")


class LocustLikeParser(argparse.ArgumentParser):
    """Stands in for Locust's configargparse parser: it also takes include_in_web_ui."""

    def __init__(self) -> None:
        self.web: dict[str, bool] = {}
        super().__init__(prog="locust", add_help=False)

    def add_argument(self, *flags, include_in_web_ui=True, **kw):  # type: ignore[override]
        action = super().add_argument(*flags, **kw)
        self.web[action.dest] = include_in_web_ui
        return action


def _actions(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in p._actions if a.option_strings}


def test_the_table_feeds_both_parsers_with_the_same_help_and_defaults():
    run = _actions(build_run_parser())
    lp = LocustLikeParser()
    add_arguments(lp)
    loc = _actions(lp)
    both = 0
    for o in OPTIONS:
        if o.flags:
            assert run[o.key].help == o.help and set(o.flags) <= set(run[o.key].option_strings)
        if o.locust_flags:
            assert loc[o.key].help == o.help
            assert set(loc[o.key].option_strings) == set(o.locust_flags)
            assert lp.web[o.key] == o.web
        if o.flags and o.locust_flags:
            both += 1
            assert run[o.key].default == loc[o.key].default
    assert both >= 10
    # Locust owns --profile, --users, --spawn-rate, --host: never registered there.
    flags = {f for a in loc.values() for f in a.option_strings}
    assert not flags & {"--profile", "--users", "--spawn-rate", "--host", "--run-time"}
    assert {"--agent-profile", "--seed", "--set", "--label", "--slo", "--agent-spec-file"} <= flags
    # The start form shows these, under the field names the web UI posts.
    assert {k for k, v in lp.web.items() if v} >= {"agent_profile", "seed", "out"}
    assert {"--host", "--out", "--server-log"} <= set(CANARY_FORBIDDEN)


def test_run_accepts_profile_and_agent_profile():
    a = build_run_parser().parse_args(["--profile", "x"])
    b = build_run_parser().parse_args(["--agent-profile", "x"])
    assert raw_values(a)["profile"] == raw_values(b)["profile"] == "x"


def test_resolution_applies_the_profile_once(monkeypatch, tmp_path):
    import workload.plan.loading as profile_mod

    calls = []
    real = profile_mod.load_profile

    def counting(name, overrides=()):
        calls.append((name, list(overrides)))
        return real(name, overrides)

    monkeypatch.setattr(profile_mod, "load_profile", counting)
    spec = resolve_run(
        ["--profile", CHAT, "--set", "seed=5", "--label", "a=b", "--slo", "ttft_p95_ms=9"]
    )
    assert calls == [(CHAT, ["seed=5"])]
    assert spec.seed == 5 and spec.labels == {"a": "b"}
    assert spec.users == int(spec.profile.run.users)
    assert spec.duration_s == float(spec.profile.run.duration_s)
    assert spec.max_error_ratio == spec.profile.max_error_ratio
    assert all(v["ttft_p95_ms"] == 9 for v in spec.slos().values())
    # What Locust receives: the spec as a file in the run directory, no second load.
    spec = spec.replace(host="http://127.0.0.1:9", run_id="r", out=str(tmp_path))
    cmd = locust_argv(spec, write_spec(spec, tmp_path))
    path = cmd[cmd.index("--agent-spec-file") + 1]
    assert path == str(tmp_path / "spec.json") and not any("{" in a for a in cmd)
    opts = argparse.Namespace(agent_spec_file=path, progress_interval="5")
    again = spec_from_options(opts, "http://127.0.0.1:9", 1)
    assert again.run_id == "r" and again.profile == spec.profile
    assert len(calls) == 1
    # ... and what the master sends its workers inside the spawn message.
    worker = spec_from_options(
        argparse.Namespace(agent_spec=again.to_json(), progress_interval="5"), "", 2
    )
    assert worker == again


def test_a_spec_file_gives_back_the_run_exactly(tmp_path):
    spec = resolve_run(["--profile", CHAT, "--seed", "7", "--duration", "90.4s"])
    spec = spec.replace(host="http://h:1", run_id="r", out=str(tmp_path))
    back = read_spec(write_spec(spec, tmp_path))
    assert back == spec and back.duration_s == 90.4
    assert read_spec(tmp_path) == spec  # a run directory names its spec.json


@pytest.mark.parametrize(
    "content, msg",
    [
        ("{not json", "is not JSON"),
        ('{"schema_version": 1, "profile": {"classes": {}}}', "at least one traffic class"),
        ('{"schema_version": 99}', "not a spec.json"),
        ('{"schema_version": 1, "profile": {}, "bogus": 1}', "unknown fields bogus"),
    ],
)
def test_a_bad_spec_file_is_one_line(tmp_path, content, msg):
    f = tmp_path / "spec.json"
    f.write_text(content)
    with pytest.raises(UsageError, match=msg):
        read_spec(f)


def test_run_with_a_spec_takes_only_out_and_overwrite(tmp_path):
    spec = resolve_run(["--profile", CHAT, "--seed", "7"]).replace(out=str(tmp_path / "a"))
    f = write_spec(spec, tmp_path)
    again = resolve_run(["--spec", str(f), "--out", str(tmp_path / "b")])
    assert again.seed == 7 and again.out == str(tmp_path / "b") and again.run_id == ""
    with pytest.raises(UsageError, match="drop --seed"):
        resolve_run(["--spec", str(f), "--seed", "8"])
    assert resolve_run(["--spec", str(f)]).out == ""  # an earlier run's spec: a new directory


def test_a_spec_on_stdin_keeps_its_run_directory(tmp_path, monkeypatch):
    """A resolved run handed on standard input: the JSON, the run directory in it."""
    spec = resolve_run(["--profile", CHAT, "--seed", "7"]).replace(out=str(tmp_path / "blk"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(spec.to_json()))
    again = resolve_run(["--spec", "-"])
    assert again.out == str(tmp_path / "blk") and again.seed == 7
    monkeypatch.setattr(sys, "stdin", io.StringIO(spec.to_json()))
    assert resolve_run(["--spec", "-", "--out", str(tmp_path / "x")]).out == str(tmp_path / "x")


def test_runspec_round_trips_through_json():
    spec = resolve_run(
        ["--profile", CHAT, "--seed", "7", "--slo", "chat.e2e_p95_ms=100", "--workers", "2"]
    )
    spec = spec.replace(model="m", max_model_len=2048, run_id="r1", out="/tmp/x", host="http://h:1")
    text = spec.to_json()
    json.loads(text)  # one JSON value
    back = RunSpec.from_json(text)
    assert back == spec
    assert back.options == spec.options
    assert back.slos() == spec.slos()


def test_explicit_values_win_over_the_profile():
    spec = resolve_run(
        ["--profile", CHAT, "--users", "3", "--spawn-rate", "0.5", "--duration", "1m30s",
         "--max-error-ratio", "0.2", "--sessions-per-user", "2", "--scrape-interval", "0"]
    )  # fmt: skip
    assert (spec.users, spec.spawn_rate, spec.duration_s) == (3, 0.5, 90.0)
    assert (spec.max_error_ratio, spec.sessions_per_user, spec.scrape_interval) == (0.2, 2, 0.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "x"], "bad --seed 'x': it must be an integer"),
        (["--users", "0"], "bad --users 0: it must be at least 1"),
        (["--duration", "soon"], "bad --duration 'soon'"),
        (["--label", "novalue"], "bad --label 'novalue': expected KEY=VALUE"),
        (["--slo", "ttft_p95_ms=fast"], "bad --slo ttft_p95_ms='fast'"),
        (["--host", "localhost:8000"], "bad --host 'localhost:8000'"),
        (["--profile", "no-such-profile"], "no-such-profile"),
        (["--tokenizer", "x"], "invalid choice"),
        (["--host", "http://[::1"], "bad --host 'http://[::1'"),
        (["--host", "http://user:pw@127.0.0.1:9"], "bad --host 'http://***@127.0.0.1:9': credent"),
        (["--users", "1000000000"], "bad --users 1000000000: it must be at most 100000"),
        (["--max-in-flight", "1000000000"], "bad --max-in-flight 1000000000: it must be at most"),
        (["--max-error-ratio", "nan"], "bad --max-error-ratio nan: it must be a ratio between"),
        (["--max-error-ratio", "2"], "bad --max-error-ratio 2: it must be a ratio between"),
        (["--spawn-rate", "inf"], "bad --spawn-rate inf: it must be a finite number"),
        (["--speedup", "nan"], "bad --speedup nan: it must be a finite number"),
        (["--sim-set", "ttft_scale=nan"], "--sim-set/--sim-fault: setting ttft_scale: 'nan'"),
        (["--sim-fault", "500=nan"], "--sim-fault: --fault 500: rate 'nan' is not a number"),
        (["--sim-preset", "nope"], "unknown preset 'nope'"),
    ],
)
def test_bad_run_options_are_one_usage_error(argv, message):
    with pytest.raises(UsageError, match=None) as e:
        resolve_run(argv)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_plain_locust_values_resolve_with_the_same_resolver():
    lp = LocustLikeParser()
    add_arguments(lp)
    opts = lp.parse_args(["--agent-profile", CHAT, "--seed", "4", "--set", "seed=9"])
    opts.num_users, opts.spawn_rate, opts.run_time = 2, 1.0, 20
    spec = spec_from_options(opts, "http://127.0.0.1:9/", 1)
    assert spec.seed == 4 and spec.users == 2 and spec.duration_s == 20.0
    assert spec.host == "http://127.0.0.1:9" and spec.sets == ("seed=9",)
    # The start form: unchanged values reuse the spec, a new seed re-resolves it.
    assert not form_changed(opts, spec)
    opts.seed = "11"
    assert form_changed(opts, spec)
    assert reresolve(opts, spec.replace(run_id="r")).seed == 11


def test_plain_locust_parser_takes_our_options(tmp_path):
    """Locust's real parser (in a child: importing locust patches this process with gevent)."""
    code = textwrap.dedent(
        f"""
        import json
        from locust import argument_parser
        from workload.locust.options import add_arguments, spec_from_options
        p = argument_parser.get_empty_argument_parser()
        argument_parser.setup_parser_arguments(p)
        add_arguments(p)
        o = p.parse_args(["-f", "x.py", "--agent-profile", {CHAT!r}, "--seed", "8",
                          "--label", "k=v", "--users", "3", "--run-time", "10s"])
        s = spec_from_options(o, "http://127.0.0.1:9", 1)
        print(json.dumps([s.seed, s.labels, s.users, s.duration_s, s.profile.name]))
        """
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [8, {"k": "v"}, 3, 10.0, "e2e_chat"]


def test_locust_argv_web_mode_shows_the_form_values():
    spec = resolve_run(["--profile", CHAT, "--seed", "3", "--web", "--web-port", "8123"])
    cmd = locust_argv(spec.replace(host="http://127.0.0.1:9", out="o", run_id="r"), Path("s"))
    assert "--headless" not in cmd and cmd[cmd.index("--web-port") + 1] == "8123"
    assert cmd[cmd.index("--agent-profile") + 1] == CHAT and cmd[cmd.index("--seed") + 1] == "3"
    head = locust_argv(
        spec.replace(web=False, host="http://127.0.0.1:9", out="o", run_id="r"), Path("s")
    )
    # No --run-time: the run clock reads the spec's one duration.
    assert "--headless" in head and "--run-time" not in head


def test_errors_share_one_base_and_exit_code():
    for cls in (UsageError, SetupError, ProfileError):
        assert issubclass(cls, AgentloadError)
    assert ProfileError(["a", "b"]).problems == ["a", "b"]
    from workload.observe.target import SetupError as TargetSetupError
    from workload.plan.loading import ProfileError as PlanProfileError

    assert TargetSetupError is SetupError and PlanProfileError is ProfileError


def test_cli_edge_prints_one_line_and_exit_2(capsys):
    assert main(["run", "--seed", "x"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agentload: error: bad --seed 'x': it must be an integer"]


def test_stop_child_interrupts_then_kills():
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stop_child(polite, timeout_s=10) != 0  # KeyboardInterrupt ends it
    stubborn = subprocess.Popen(
        [sys.executable, "-c",
         "import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert stubborn.stdout is not None and stubborn.stdout.readline().strip() == b"ready"
    t0 = time.monotonic()
    assert stop_child(stubborn, timeout_s=0.5) == -signal.SIGKILL
    assert time.monotonic() - t0 < 10
    stubborn.stdout.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.parametrize("parent_ignores_stops", [False, True])
def test_child_dies_with_its_parent(tmp_path, parent_ignores_stops):
    """A parent killed with SIGKILL (no cleanup runs) still takes its child down, also when
    the parent ignored its stop signals when it started the child (`ignore_stops`, a run
    that is over): SIG_IGN is inherited across exec, and the child once outlived its parent
    so (the suite's workers had run such a parent in-process)."""
    ignore = "ignore_stops()" if parent_ignores_stops else ""
    parent_code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from workload.stopping import die_with_parent, ignore_stops
        {ignore}
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 preexec_fn=die_with_parent())
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    assert die_with_parent() is not None
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    started = _start_time(child_pid)
    assert started is not None and _alive(child_pid, started)
    parent.kill()
    parent.wait(timeout=10)
    parent.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child_pid, started):
        time.sleep(0.05)
    if _alive(child_pid, started):  # say what outlived it, for a failure seen only under load
        stat = Path(f"/proc/{child_pid}/stat").read_text(errors="replace")
        cmd = Path(f"/proc/{child_pid}/cmdline").read_bytes().replace(b"\0", b" ")
        raise AssertionError(f"the child outlived its parent: {stat.strip()} | {cmd!r}")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()
    except FileNotFoundError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot), or None when it is gone."""
    fields = _stat(pid)
    return fields[19] if fields else None


def _alive(pid: int, started: str) -> bool:
    """Whether ``pid`` is a live process and still the one that started at ``started``: the
    suite starts processes fast enough that a freed pid can be another's seconds later."""
    fields = _stat(pid)
    return fields is not None and fields[19] == started and fields[0] != "Z"  # a zombie is dead


def test_require_slo_samples_is_a_run_option():
    assert not resolve_run(["--profile", CHAT]).require_slo_samples
    spec = resolve_run(["--profile", CHAT, "--require-slo-samples"])
    assert spec.require_slo_samples and RunSpec.from_json(spec.to_json()).require_slo_samples


def test_url_credentials_never_echoed_or_written():
    from workload.run.finalize import _redacted_target
    from workload.run.spec import check_host

    with pytest.raises(UsageError) as e:
        check_host("ftp://user:hunter2@127.0.0.1:8000")
    assert "hunter2" not in str(e.value) and "***@" in str(e.value)
    red = _redacted_target({"url": "http://user:hunter2@127.0.0.1:8000", "model": "m"})
    assert red == {"url": "http://***@127.0.0.1:8000", "model": "m"}
