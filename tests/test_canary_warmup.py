"""canary --warmup: unjudged traffic before a side's first block and after every server start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_canary import BASE, CAND, FakeLauncher
from workload.cli.main import main as agentload_main
from workload.errors import CanaryError
from workload.orchestrate.canary.canary import run_canary
from workload.orchestrate.canary.servers import ServerSpec
from workload.orchestrate.canary.warmup import (
    STARTED_WARMUP_S,
    WARMUP_SEED_OFFSET,
    Warmups,
    parse_warmup,
)


@pytest.mark.parametrize(
    "text, started, want",
    [
        (None, True, STARTED_WARMUP_S),
        (None, False, 0.0),
        ("0", True, 0.0),
        ("off", True, 0.0),
        ("20s", False, 20.0),
        ("1m", True, 60.0),
        ("3", False, 3.0),
    ],
)
def test_parse_warmup(text, started, want):
    assert parse_warmup(text, started) == want


@pytest.mark.parametrize("text", ["soon", "-5s", "0.5s", ""])
def test_parse_warmup_rejects_what_is_not_a_length(text):
    with pytest.raises(CanaryError, match="--warmup"):
        parse_warmup(text, True)


def test_a_side_is_cold_at_first_and_again_after_each_start(tmp_path):
    w = Warmups(5.0, tmp_path)
    assert w.due(["baseline", "candidate"], {}) == ["baseline", "candidate"]  # URLs: once
    assert w.due(["baseline", "candidate"], {}) == []
    w = Warmups(5.0, tmp_path)
    assert w.due(["baseline"], {"baseline": "baseline#1"}) == ["baseline"]
    assert w.due(["baseline"], {"baseline": "baseline#1"}) == []  # the same server, warm
    assert w.due(["candidate"], {"candidate": "candidate#1"}) == ["candidate"]
    assert w.due(["baseline"], {"baseline": "baseline#2"}) == ["baseline"]  # restarted
    assert Warmups(0.0, tmp_path).due(["baseline"], {}) == []


def test_sequential_urls_warm_each_side_just_before_its_first_block(tmp_path, capsys):
    fake = FakeLauncher()
    code = run_canary(
        BASE, CAND, ["--duration", "10s", "--seed", "7"], tmp_path, mode="sequential",
        blocks=3, launch=fake, html=False, warmup_s=4.0,
    )  # fmt: skip
    assert code == 0
    runs = [(c.host, c.seed, c.duration_s, Path(c.out).relative_to(tmp_path)) for c in fake.calls]
    warm_seed = 7 + WARMUP_SEED_OFFSET
    assert runs == [
        (BASE, warm_seed, 4.0, Path("warmup/baseline-1")),
        *[(BASE, 7 + i, 10.0, Path(f"baseline/block-{i}")) for i in range(3)],
        (CAND, warm_seed, 4.0, Path("warmup/candidate-1")),
        *[(CAND, 7 + i, 10.0, Path(f"candidate/block-{i}")) for i in range(3)],
    ]
    d = json.loads((tmp_path / "comparison.json").read_text())
    assert d["blocks"] == 3  # the warm-up runs are not blocks
    assert d["canary"]["warmup_s"] == 4.0
    assert [w["out"] for w in d["canary"]["warmups"]] == [
        str(tmp_path / "warmup" / "baseline-1"), str(tmp_path / "warmup" / "candidate-1")
    ]  # fmt: skip
    out = capsys.readouterr().out
    assert "after a 4 s warm-up of each side, not judged" in out
    assert "the warm-up done: baseline exit 0" in out


def test_one_block_per_side_keeps_the_warm_up_out_of_the_side_s_run(tmp_path):
    fake = FakeLauncher()
    run_canary(
        BASE, CAND, ["--duration", "10s", "--seed", "7"], tmp_path, blocks=1, launch=fake,
        html=False, warmup_s=2.0,
    )  # fmt: skip
    assert [Path(c.out).relative_to(tmp_path) for c in fake.calls] == [
        Path("warmup/baseline-1"), Path("warmup/candidate-1"), Path("baseline"), Path("candidate")
    ]  # fmt: skip
    assert not list((tmp_path / "baseline").glob("warmup*"))


def test_interleaved_warms_every_server_start_once(tmp_path):
    # `sleep` stands in for a server; the probe says it is ready at once
    specs = {s: ServerSpec(s, ("sleep", "600", "{port}")) for s in ("baseline", "candidate")}
    fake = FakeLauncher()
    code = run_canary(
        None, None, ["--duration", "10s", "--seed", "5"], tmp_path, mode="interleaved",
        blocks=4, launch=fake, servers=specs, html=False, probe=lambda url: "/health",
        warmup_s=3.0,
    )  # fmt: skip
    assert code == 0
    order = [Path(c.out).relative_to(tmp_path).as_posix() for c in fake.calls]
    # blocks run A B B A B A A B: a server starts when the side changes, and each start is
    # warmed before the block it serves
    assert order == [
        "warmup/baseline-1", "baseline/block-0", "warmup/candidate-1", "candidate/block-0",
        "candidate/block-1", "warmup/baseline-2", "baseline/block-1",
        "warmup/candidate-2", "candidate/block-2", "warmup/baseline-3", "baseline/block-2",
        "baseline/block-3", "warmup/candidate-3", "candidate/block-3",
    ]  # fmt: skip
    canary = json.loads((tmp_path / "comparison.json").read_text())["canary"]
    assert len(canary["warmups"]) == len(canary["servers"]) == 6


def test_bad_warmup_is_one_line_and_exit_2(tmp_path, capsys):
    code = agentload_main(
        ["canary", "--baseline", BASE, "--candidate", CAND, "--warmup", "soon",
         "--out", str(tmp_path / "c")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "bad --warmup 'soon'" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_stop_during_the_warm_up_is_exit_130_with_no_verdict(tmp_path, capsys):
    fake = FakeLauncher()

    def launch(spec, log):
        if "warmup" in Path(spec.out).parts:
            fake(spec, log)  # the warm-up run is written, then Ctrl-C arrives
            raise KeyboardInterrupt
        return fake(spec, log)

    code = run_canary(
        BASE, CAND, ["--duration", "10s", "--seed", "7"], tmp_path, blocks=2, launch=launch,
        html=False, warmup_s=2.0,
    )  # fmt: skip
    assert code == 130
    out = capsys.readouterr().out
    assert "canary stopped during the warm-up, before any block; no verdict" in out
    assert not (tmp_path / "comparison.json").exists()
    assert not any("block-" in c.out for c in fake.calls)  # no block started
