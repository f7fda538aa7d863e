"""canary: orchestration of the two sides' runs, with a fake launcher writing synthetic runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.builders import ClassSpec, write_run
from workload.cli.main import main as agentload_main
from workload.errors import CanaryError
from workload.orchestrate.canary.canary import run_canary
from workload.orchestrate.canary.console import progress_line
from workload.orchestrate.locust_child import discard_unstarted

BASE, CAND = "http://127.0.0.1:18001", "http://127.0.0.1:18002"


class _Done:
    """A finished child process."""

    def __init__(self, code: int = 0) -> None:
        self.code = code

    def wait(self, timeout=None):
        return self.code

    def poll(self):
        return self.code

    def send_signal(self, sig):  # pragma: no cover - never running
        pass

    kill = send_signal


class FakeLauncher:
    """Writes a synthetic run where `agentload run` would; the candidate gets `scale` x TTFT."""

    def __init__(self, scale: float = 1.0, code: int = 0) -> None:
        self.scale, self.code, self.calls = scale, code, []

    def __call__(self, spec, log):
        self.calls.append(spec)
        url, seed = spec.host, spec.seed
        write_run(
            __import__("pathlib").Path(spec.out),
            classes={"interactive": ClassSpec(sessions=120, steps=4)},
            traffic_seed=seed, seed=seed, noise_seed=len(self.calls),
            ttft_scale=self.scale if url == CAND else 1.0,
        )  # fmt: skip
        return _Done(self.code)


def test_every_block_is_the_parsed_traffic_with_its_side_s_target_seed_and_length(tmp_path):
    fake = FakeLauncher()
    run_canary(
        BASE, CAND, ["--profile", "mixed", "--duration", "30s", "--seed", "7"], tmp_path,
        blocks=4, block_s=12, launch=fake, html=False, server_logs=("a.log", None),
    )  # fmt: skip
    first = fake.calls[0]
    for spec in fake.calls:
        assert spec.profile == first.profile and spec.profile_ref == "mixed"
        assert spec.duration_s == 12 and spec.argv.startswith("agentload canary ")
    by = {(s.host, s.seed): s for s in fake.calls}
    assert sorted(by) == sorted((h, 7 + i) for h in (BASE, CAND) for i in range(4))
    assert by[(BASE, 9)].out == str(tmp_path / "baseline" / "block-2")
    assert by[(BASE, 9)].server_log == "a.log" and by[(CAND, 9)].server_log == ""


def test_default_design_is_eight_simultaneous_blocks(tmp_path, capsys):
    """Default: 8 blocks per side, both sides' block i at once, seed S+i, one run length each."""
    fake = FakeLauncher()
    code = run_canary(BASE, CAND, ["--duration", "30s", "--seed", "7"], tmp_path, launch=fake)
    assert code == 0
    seeds = [c.seed for c in fake.calls]
    assert seeds == [7 + i for i in range(8) for _side in range(2)]
    assert all(c.duration_s == 30 for c in fake.calls)
    assert (tmp_path / "candidate" / "block-7" / "run.json").exists()
    d = json.loads((tmp_path / "comparison.json").read_text())
    assert d["verdict"] == "no detectable change" and d["canary"]["mode"] == "simultaneous"
    assert d["blocks"] == 8
    out = capsys.readouterr().out
    assert "simultaneous, 8 blocks x 30 s per side (about 4.0 min of traffic)" in out
    assert "VERDICT: NO DETECTABLE CHANGE" in out


def test_single_block_is_one_run_per_side(tmp_path, capsys):
    fake = FakeLauncher()
    code = run_canary(
        BASE, CAND, ["--duration", "30s", "--seed", "7"], tmp_path, blocks=1, launch=fake
    )
    assert code == 0
    assert len(fake.calls) == 2
    assert all(c.seed == 7 for c in fake.calls)
    assert (tmp_path / "baseline" / "run.json").exists()
    assert (tmp_path / "compare.html").exists()
    assert "VERDICT: NO DETECTABLE CHANGE" in capsys.readouterr().out


def test_sequential_blocks_run_one_side_then_the_other(tmp_path):
    fake = FakeLauncher()
    run_canary(
        BASE, CAND, ["--duration", "20s", "--seed", "3"], tmp_path, mode="sequential",
        blocks=4, block_s=12, launch=fake,
    )  # fmt: skip
    order = "".join("A" if c.host == BASE else "B" for c in fake.calls)
    assert order == "AAAABBBB"
    assert all(c.duration_s == 12 for c in fake.calls)


@pytest.mark.parametrize(
    "blocks, block_s, mode, msg",
    [
        (0, None, "simultaneous", "--blocks must be at least 1"),
        (1, None, "interleaved", "at least 2 blocks"),
        (4, 0.5, "simultaneous", "--block-s must be at least 1 s"),
    ],
)
def test_bad_design_is_refused(tmp_path, blocks, block_s, mode, msg):
    with pytest.raises(CanaryError, match=msg):
        run_canary(
            BASE, CAND, ["--duration", "20s"], tmp_path, mode=mode, blocks=blocks,
            block_s=block_s, launch=FakeLauncher(),
        )  # fmt: skip


def test_regression_exits_3(tmp_path):
    assert (
        run_canary(
            BASE,
            CAND,
            ["--duration", "30s"],
            tmp_path,
            mode="sequential",
            blocks=1,
            launch=FakeLauncher(1.3),
        )
        == 3
    )


def test_early_stop_ends_a_clear_regression_at_the_first_look(tmp_path, capsys):
    fake = FakeLauncher(1.3)
    code = run_canary(
        BASE, CAND, ["--duration", "30s", "--seed", "7"], tmp_path, launch=fake, early_stop=True
    )
    assert code == 3
    assert len(fake.calls) == 6  # 3 blocks per side of 8
    d = json.loads((tmp_path / "comparison.json").read_text())
    early = d["canary"]["early_stop"]
    assert early["stopped_after_blocks"] == 3 and d["blocks"] == 3
    # five interim looks (after 3 to 7 blocks) share a tenth of alpha 0.05
    assert early["looks"] == [{"blocks": 3, "alpha": 0.001, "verdict": "worse"}]
    assert any("stopped early after 3 of 8 blocks" in w for w in d["warnings"])
    assert not any(w.startswith("this comparison (") for w in d["warnings"])
    out = capsys.readouterr().out
    assert "interim look after 3 of 8 blocks (alpha 0.001): worse; stopping early" in out


def test_early_stop_that_does_not_settle_runs_the_design_at_the_rest_of_alpha(tmp_path):
    fake = FakeLauncher()  # no change, but a threshold too tight to settle at the interim level
    run_canary(
        BASE, CAND, ["--duration", "30s", "--seed", "7"], tmp_path, launch=fake, early_stop=True,
        thresholds={"ttft_shift": 0.002},
    )  # fmt: skip
    d = json.loads((tmp_path / "comparison.json").read_text())
    early = d["canary"]["early_stop"]
    assert [lk["blocks"] for lk in early["looks"]] == [3, 4, 5, 6, 7]
    assert all(lk["verdict"] == "inconclusive" for lk in early["looks"])
    assert early["stopped_after_blocks"] is None and early["alpha_final"] == 0.045
    assert len(fake.calls) == 16 and d["blocks"] == 8
    assert abs(d["method"]["confidence"] - 0.955) < 1e-9


def test_help_lists_early_stop(capsys):
    assert agentload_main(["canary", "--help"]) == 0
    assert "--early-stop" in capsys.readouterr().out


def test_early_stop_passes_only_once_the_tails_gate(tmp_path, capsys):
    # After 3 blocks the tails and work done do not gate yet (they need 4): an A/A canary
    # that is settled there goes on, and may pass from the 4th block on.
    fake = FakeLauncher()
    run_canary(
        BASE, CAND, ["--duration", "30s", "--seed", "7"], tmp_path, launch=fake, early_stop=True
    )  # fmt: skip
    looks = json.loads((tmp_path / "comparison.json").read_text())["canary"]["early_stop"]["looks"]
    assert looks[0]["blocks"] == 3
    out = capsys.readouterr().out
    assert f"interim look after 3 of 8 blocks (alpha 0.001): {looks[0]['verdict']}; going on" in out
    assert len(fake.calls) >= 8


@pytest.mark.parametrize("mode, blocks", [("sequential", 5), ("simultaneous", 3)])
def test_early_stop_needs_looks_before_the_end(tmp_path, mode, blocks):
    with pytest.raises(CanaryError, match="--early-stop needs --blocks > 3"):
        run_canary(
            BASE, CAND, ["--duration", "20s"], tmp_path, mode=mode, blocks=blocks,
            launch=FakeLauncher(), early_stop=True,
        )  # fmt: skip


def test_interleaved_abba_blocks_with_fresh_seeds(tmp_path):
    fake = FakeLauncher()
    code = run_canary(
        BASE,
        CAND,
        ["--duration", "40s", "--seed", "5"],
        tmp_path,
        mode="interleaved",
        blocks=4,
        launch=fake,
    )
    assert code == 0
    order = [("A" if c.host == BASE else "B") for c in fake.calls]
    assert "".join(order) == "ABBABAAB"  # linear and quadratic drift cancel
    seeds = [c.seed for c in fake.calls]
    assert seeds == [5, 5, 6, 6, 7, 7, 8, 8]
    assert all(c.duration_s == 40 for c in fake.calls)
    assert (tmp_path / "baseline" / "block-3" / "run.json").exists()


def test_side_with_bad_input_is_reported(tmp_path):
    with pytest.raises(CanaryError, match="bad input"):
        run_canary(BASE, CAND, [], tmp_path, launch=FakeLauncher(code=2))


def test_a_block_whose_target_does_not_answer_fails_before_any_traffic(tmp_path):
    """Each block's run is checked as `agentload run` checks it (pre-flight), in the canary."""
    down = "http://127.0.0.1:1"  # nothing listens on port 1
    with pytest.raises(CanaryError, match=r"block-0 cannot start: .*127\.0\.0\.1:1"):
        run_canary(down, down, ["--duration", "5s"], tmp_path, blocks=2, html=False)
    for side in ("baseline", "candidate"):  # nothing created, the other side not started
        assert not (tmp_path / side / "block-0").exists()


def test_a_killed_run_is_exit_1_and_says_so(tmp_path, capsys):
    run_canary(BASE, CAND, [], tmp_path, blocks=1, launch=FakeLauncher(code=-9), html=False)
    out, err = capsys.readouterr()
    assert "the run done: baseline exit 1; candidate exit 1" in out
    assert "baseline: the Locust process was killed (SIGKILL)" in err


def test_a_run_stopped_before_locust_ran_leaves_nothing(tmp_path):
    started = tmp_path / "baseline" / "block-0"
    started.mkdir(parents=True)
    (started / "spec.json").write_text("{}")
    discard_unstarted(started)
    assert not started.exists()
    ran = tmp_path / "baseline" / "block-1"
    ran.mkdir()
    (ran / "spec.json").write_text("{}")
    (ran / "requests.jsonl").write_text("{}\n")
    discard_unstarted(ran)
    assert (ran / "spec.json").exists()


def test_existing_out_is_refused(tmp_path):
    write_run(tmp_path / "baseline")
    with pytest.raises(CanaryError, match="already holds"):
        run_canary(BASE, CAND, [], tmp_path, launch=FakeLauncher())


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--baseline", BASE], "--candidate"),
        (["--baseline", BASE, "--candidate", "ftp://x"], "bad --host"),
        (["--baseline", BASE, "--candidate", CAND, "--host", BASE], "--host is set by canary"),
        (["--baseline", BASE, "--candidate", CAND, "--mode", "nope"], "invalid choice"),
        (["--baseline", BASE, "--candidate", CAND, "--users", "-3"], "--users"),
        (
            ["--baseline", BASE, "--candidate", CAND, "--profile", "no-such-profile"],
            "no-such-profile",
        ),
    ],
)
def test_main_canary_bad_input(tmp_path, capsys, argv, msg):
    assert agentload_main(["canary", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


class _Running:
    """A launcher whose runs take `seconds` (a real child process), writing synthetic runs;
    block `fail_block`'s candidate run fails an SLO (exit 3)."""

    def __init__(self, seconds: float, fail_block: str = "block-1") -> None:
        self.seconds, self.fail_block = seconds, fail_block

    def __call__(self, spec, log):
        out = __import__("pathlib").Path(spec.out)
        write_run(out, classes={"interactive": ClassSpec(sessions=20, steps=2)},
                  traffic_seed=spec.seed, seed=spec.seed)  # fmt: skip
        failing = spec.host == CAND and out.name == self.fail_block
        run = json.loads((out / "run.json").read_text())
        run["exit_code"] = 3 if failing else 0
        msg = "interactive: ttft_p95_ms = 3490 ms (need <= 2000, n=40) VIOLATED"
        run["slo_results"] = [{"class_name": "interactive", "metric": "ttft_p95_ms",
                               "passed": not failing, "message": msg}]  # fmt: skip
        (out / "run.json").write_text(json.dumps(run))
        code = 3 if failing else 0
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import time, sys; time.sleep({self.seconds}); sys.exit({code})",
            ]
        )


def test_console_shows_progress_inside_a_block_and_each_block_s_slo_failures(
    tmp_path, capsys, monkeypatch
):
    # The console once said only "starting ... block-N": nothing while a block ran, and
    # nothing when six of eight blocks exited 3 on an SLO.
    monkeypatch.setattr("workload.orchestrate.canary.canary.PROGRESS_S", 0.2)
    run_canary(
        BASE, CAND, ["--duration", "10s"], tmp_path, blocks=2, launch=_Running(1.0), html=False,
        n_boot=100,
    )  # fmt: skip
    out = capsys.readouterr().out
    # (the synthetic runs' requests started long ago: their traffic is over)
    assert re.search(
        r"agentload canary: block-0 of 2: 10 s of traffic done, writing the summary; "
        r"baseline 40 requests, candidate 40 requests",
        out,
    )
    assert "agentload canary: block-0 of 2 done: baseline exit 0; candidate exit 0" in out
    assert (
        "agentload canary: block-1 of 2 done: baseline exit 0; candidate exit 3 (SLO failed: "
        "interactive: ttft_p95_ms = 3490 ms (need <= 2000, n=40) VIOLATED)"
    ) in out
    assert "agentload canary: SLOs failed in 1 of 4 block runs (candidate block-1)" in out


def test_progress_counts_from_the_block_s_first_request(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()

    def line(now: float) -> str:
        return progress_line("block-0 of 8", [("baseline", a), ("candidate", b)], 12.0, 60.0, now)

    assert line(1_000.0).endswith(": starting (12 s since launch); baseline 0 requests, "
                                  "candidate 0 requests")  # fmt: skip
    (a / "requests.jsonl").write_text(json.dumps({"t_start": 980.0}) + "\n")
    assert ": 20 s of 60 s; baseline 1 requests, candidate 0 requests" in line(1_000.0)
    assert ": 60 s of traffic done, writing the summary;" in line(1_041.0)
