"""canary server lifecycle: start each side's server, wait until ready, measure, stop.

The servers are the embedded simulator (`python -m workload.sim --port {port}`)
and commands that fail to start; the start-up metrics are also checked on
synthetic run directories.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.builders import write_run
from workload.analyze.catalogue import VERDICT_SAME, VERDICT_WORSE
from workload.analyze.rundata import load_run
from workload.analyze.startup import split_startup_flags, startup_rows
from workload.cli.main import main as agentload_main
from workload.errors import ServerConfigError
from workload.orchestrate.canary.servers import load_servers_file, log_tail, split_command

ROOT = Path(__file__).resolve().parents[1]
CHAT = str(ROOT / "tests" / "fixtures" / "e2e_chat.yaml")
PY = shlex.quote(sys.executable)
SIM = f"{PY} -m workload.sim --port {{port}} --preset fast"
EXIT_AT_ONCE = f"{PY} -c 'import sys; sys.exit(1)' {{port}}"
NEVER_READY = "sleep 600 {port}"
TRAFFIC = [
    "--profile", CHAT, "--users", "2", "--duration", "6s", "--sessions-per-user", "1",
    "--blocks", "1",
]  # fmt: skip


def _ts(s: str) -> float:
    return dt.datetime.fromisoformat(s).timestamp()


# ---- commands and the --servers file -------------------------------------------------


def test_command_needs_the_port_placeholder():
    assert split_command("vllm serve m --port {port}", "x") == (
        "vllm",
        "serve",
        "m",
        "--port",
        "{port}",
    )
    assert split_command(["a", "--port={port}"], "x") == ("a", "--port={port}")
    with pytest.raises(ServerConfigError, match=r"placeholder \{port\}"):
        split_command("vllm serve m --port 8000", "--candidate-cmd")
    with pytest.raises(ServerConfigError, match="is empty"):
        split_command("  ", "--candidate-cmd")
    with pytest.raises(ServerConfigError, match="quotation"):
        split_command("a 'b {port}", "--candidate-cmd")


def test_servers_file(tmp_path):
    f = tmp_path / "servers.yaml"
    f.write_text(
        "ready_timeout: 30\n"
        "baseline:\n  cmd: srv --port {port}\n  env: {A: 1}\n  port: 8123\n  log: b.log\n"
        "candidate:\n  cmd: [srv, --port, '{port}', --max-num-seqs, '4']\n  ready_timeout: 5\n"
    )
    specs = load_servers_file(f, ("baseline", "candidate"))
    b, c = specs["baseline"], specs["candidate"]
    assert b.argv == ("srv", "--port", "{port}") and b.env == {"A": "1"} and b.port == 8123
    assert b.ready_timeout_s == 30 and b.log == Path("b.log")
    assert c.argv[-2:] == ("--max-num-seqs", "4") and c.ready_timeout_s == 5 and c.port is None


@pytest.mark.parametrize(
    "text, msg",
    [
        ("baseline: {cmd: 'x {port}', colour: red}\n", "unknown key"),
        ("baseline: {env: {}}\n", "cmd is missing"),
        ("baseline: {cmd: 'x {port}', port: 70000}\n", "port"),
        ("baseline: {cmd: 'x {port}', ready_timeout: -1}\n", "ready_timeout"),
        ("[1, 2]\n", "mapping"),
        ("baseline: {cmd: 'x'\n", "not valid YAML"),
    ],
)
def test_servers_file_errors(tmp_path, text, msg):
    f = tmp_path / "servers.yaml"
    f.write_text(text)
    with pytest.raises(ServerConfigError, match=msg):
        load_servers_file(f, ("baseline", "candidate"))


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--baseline-cmd", "", "--candidate-cmd", SIM], "--baseline-cmd is empty"),
        (["--baseline-cmd", "srv --port 8000", "--candidate-cmd", SIM], "placeholder"),
        (
            ["--baseline", "http://127.0.0.1:1", "--baseline-cmd", SIM, "--candidate-cmd", SIM],
            "not both",
        ),
        (["--baseline-cmd", SIM], "--candidate"),
        (["--baseline-cmd", SIM, "--candidate-cmd", SIM, "--baseline-log", "x.log"], "captures"),
        (
            ["--baseline-cmd", SIM, "--candidate-cmd", SIM, "--ready-timeout", "0"],
            "--ready-timeout",
        ),
        (["--servers", "/nonexistent/servers.yaml"], "--servers"),
    ],
)
def test_bad_server_options_are_bad_input(tmp_path, capsys, argv, msg):
    assert agentload_main(["canary", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


# ---- start-up metrics in the comparison ----------------------------------------------


def _with_startup(path: Path, ready_s: float, rss: float, start_id: str) -> Path:
    write_run(path)
    run = json.loads((path / "run.json").read_text())
    run["startup"] = {"start_id": start_id, "ready": True, "time_to_ready_s": ready_s,
                      "rss_mib": rss, "gpu_memory_mib": None}  # fmt: skip
    (path / "run.json").write_text(json.dumps(run))
    return path


def test_startup_rows_judge_values_with_threshold_and_floor(tmp_path):
    a = load_run(_with_startup(tmp_path / "a", 60.0, 4000.0, "baseline#1"))
    b = load_run(_with_startup(tmp_path / "b", 80.0, 4100.0, "candidate#1"))
    rows = {m.metric: m for m in startup_rows(a, b)}
    assert rows["time_to_ready"].verdict == VERDICT_WORSE and rows["time_to_ready"].gated
    assert rows["startup_rss"].verdict == VERDICT_SAME  # +2.5 % < 10 %
    assert "startup_gpu_memory" not in rows  # no NVML on either side
    # +50 % but only 0.2 s: below the floor, not a regression
    small_a = load_run(_with_startup(tmp_path / "c", 0.4, 60.0, "baseline#1"))
    small_b = load_run(_with_startup(tmp_path / "d", 0.6, 60.0, "candidate#1"))
    assert {m.metric: m for m in startup_rows(small_a, small_b)}[
        "time_to_ready"
    ].verdict == VERDICT_SAME
    rest, mine = split_startup_flags({"ttft_p95": 10, "time_to_ready": None})
    assert rest == {"ttft_p95": 10} and mine == {"time_to_ready": None}
    off = {m.metric: m for m in startup_rows(a, b, mine)}
    assert not off["time_to_ready"].gated


# ---- the simulator as the servers ----------------------------------------------------


@pytest.mark.slow
def test_sequential_canary_starts_measures_and_stops_each_server(tmp_path, capsys):
    out = tmp_path / "c"
    code = agentload_main(["canary", "--baseline-cmd", SIM, "--candidate-cmd", SIM, "--mode", "sequential", *TRAFFIC,
         "--out", str(out), "--no-html", "--n-boot", "200", "--threshold", "time_to_ready=off",
         "--warmup", "2s"]
    )  # fmt: skip
    printed = capsys.readouterr()
    # 2 users for 6 s per side cannot rule out a 10 % regression: the honest verdict is
    # inconclusive (exit 4), and it says how much more traffic would settle it
    assert code == 4, printed.out[-3000:] + printed.err[-3000:]
    assert "VERDICT: INCONCLUSIVE (exit 4)" in printed.out and "To settle it:" in printed.out
    su = {}
    for side in ("baseline", "candidate"):
        run = json.loads((out / side / "run.json").read_text())
        su[side] = s = run["startup"]
        assert s["ready"] and s["ready_probe"] == "/v1/models"
        assert 0 < s["time_to_ready_s"] < 120 and s["rss_mib"] > 10
        assert s["gpu_memory_mib"] is None or s["gpu_memory_mib"] >= 0
        log = (out / side / "server.log").read_text()
        assert "agentload-sim listening" in log and f"stopped {side}#1" in log
        # the captured log reached the fingerprint
        assert run["fingerprint"], run["fingerprint"]
        assert any("sim" in json.dumps(v) for v in run["fingerprint"].values())
        assert (out / side / "requests.jsonl").read_text().strip()  # traffic ran
    # the baseline server was stopped before the candidate server started
    assert _ts(su["baseline"]["stopped_at"]) <= _ts(su["candidate"]["started_at"])
    cmp = json.loads((out / "comparison.json").read_text())
    names = {m["metric"] for m in cmp["metrics"]}
    assert {"time_to_ready", "startup_rss"} <= names
    assert [r["start_id"] for r in cmp["canary"]["servers"]] == ["baseline#1", "candidate#1"]
    # the server diff lists the start-up facts that differ (two simulators can be ready in the
    # same rounded time: then that field is absent, not a failure)
    diff = {d["field"] for d in cmp["fingerprint_diff"]}
    for key in ("time_to_ready_s", "rss_mib"):
        differs = su["baseline"][key] != su["candidate"][key]
        assert (f"startup.{key}" in diff) == differs, (key, su, diff)
    assert "startup.cmd_template" not in diff
    # each started server was warmed for 2 s before its side's run, by real traffic
    for side in ("baseline", "candidate"):
        warm = out / "warmup" / f"{side}-1"
        assert json.loads((warm / "spec.json").read_text())["duration_s"] == 2
        assert (warm / "requests.jsonl").read_text().strip()
        assert f"starting {side} warm-up" in printed.out


@pytest.mark.parametrize(
    "cmd, why",
    [
        (EXIT_AT_ONCE, "exited 1 after"),
        pytest.param(NEVER_READY, "not ready after 3 s", marks=pytest.mark.slow),
    ],
)
def test_candidate_that_does_not_start_is_a_verdict(tmp_path, capsys, cmd, why):
    out = tmp_path / "c"
    code = agentload_main(["canary", "--baseline-cmd", SIM, "--candidate-cmd", cmd, "--ready-timeout", "3", *TRAFFIC,
         "--out", str(out), "--no-html"]
    )  # fmt: skip
    printed = capsys.readouterr()
    assert code == 3
    assert f"candidate failed to start: {why}" in printed.err and "Traceback" not in printed.err
    assert "server.log" in printed.err
    assert "VERDICT: CANDIDATE FAILED TO START" in printed.out
    d = json.loads((out / "comparison.json").read_text())
    assert d["verdict"] == "candidate failed to start" and d["exit_code"] == 3
    (fail,) = d["startup_failures"]
    assert fail["side"] == "candidate" and fail["exit_code"] == (1 if cmd == EXIT_AT_ONCE else -2)
    assert not (out / "candidate" / "run.json").exists()
    # every server is gone: the baseline's too
    for rec in d["canary"]["servers"]:
        assert rec.get("stopped_at"), rec


@pytest.mark.slow
def test_baseline_that_does_not_start_is_exit_2_and_the_candidate_never_starts(tmp_path, capsys):
    out = tmp_path / "c"
    oom = f"{PY} -c 'import sys; print(\"CUDA out of memory\", flush=True); sys.exit(1)' {{port}}"
    code = agentload_main(["canary", "--baseline-cmd", oom, "--candidate-cmd", SIM, "--mode", "sequential", *TRAFFIC,
         "--out", str(out), "--no-html"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "baseline failed to start: out of memory at start: exited 1" in err
    assert "CUDA out of memory" in err and "Traceback" not in err
    assert not (out / "candidate" / "server.log").exists()
    assert "CUDA out of memory" in log_tail(out / "baseline" / "server.log")


# ---- interleaved: which server serves which block ------------------------------------


def _starts(tmp_path: Path, restart: bool) -> tuple[list[dict], Path]:
    from tests.test_canary import FakeLauncher
    from workload.orchestrate.canary.canary import run_canary
    from workload.orchestrate.canary.servers import ServerSpec

    # `sleep` stands in for a server; the probe says it is ready at once
    specs = {s: ServerSpec(s, ("sleep", "600", "{port}")) for s in ("baseline", "candidate")}
    out = tmp_path / ("restart" if restart else "keep")
    code = run_canary(
        None, None, ["--duration", "10s", "--seed", "5"], out, mode="interleaved", blocks=4,
        launch=FakeLauncher(), servers=specs, restart_per_block=restart, html=False,
        probe=lambda url: "/health",
    )  # fmt: skip
    assert code == 0
    return json.loads((out / "comparison.json").read_text())["canary"]["servers"], out


def test_interleaved_keeps_a_server_across_its_side_s_consecutive_blocks(tmp_path):
    recs, out = _starts(tmp_path, restart=False)
    # blocks run A B B A B A A B: a server starts when the side changes, never both at once
    assert [r["start_id"] for r in recs] == [
        "baseline#1", "candidate#1", "baseline#2", "candidate#2", "baseline#3", "candidate#3"
    ]  # fmt: skip
    for prev, nxt in zip(recs, recs[1:], strict=False):
        assert _ts(prev["stopped_at"]) <= _ts(nxt["started_at"])
    served = {
        b: json.loads((out / side / f"block-{b}" / "run.json").read_text())["startup"]["start_id"]
        for side in ("baseline", "candidate")
        for b in range(4)
        if (out / side / f"block-{b}").exists()
    }
    assert len(served) == 4  # block i of each side exists; both sides' blocks carry a record


def test_interleaved_restart_per_block(tmp_path):
    recs, out = _starts(tmp_path, restart=True)
    assert len(recs) == 8 and all(r["ready"] and r["stopped_at"] for r in recs)
    cmp = json.loads((out / "comparison.json").read_text())
    ttr = next(m for m in cmp["metrics"] if m["metric"] == "time_to_ready")
    assert ttr["n_a"] == 4 and ttr["n_b"] == 4  # one start per block, median per side


def test_compare_cli_shows_startup_metrics(tmp_path, capsys):
    from workload.cli.main import main as agentload_main

    a = _with_startup(tmp_path / "a", 60.0, 4000.0, "baseline#1")
    b = _with_startup(tmp_path / "b", 90.0, 4000.0, "candidate#1")
    assert agentload_main(["compare", str(a), str(b), "--n-boot", "200"]) == 3
    out = capsys.readouterr().out
    assert "time_to_ready" in out and "startup.time_to_ready_s" in out
    assert (
        agentload_main(
            [
                "compare",
                str(a),
                str(b),
                "--n-boot",
                "200",
                "--threshold",
                "time_to_ready=off",
                "--threshold",
                "error_ratio=2",
            ]  # 280 requests cannot rule out 1 point
        )
        == 0
    )
