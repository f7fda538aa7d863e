"""Distributed start-up: what the master warms before forking, and how long it waits for heartbeats."""

from __future__ import annotations

import json
from pathlib import Path

from workload.locust import warmup


def test_tokenizer_choice_from_the_command_line(tmp_path: Path) -> None:
    spec, bad = tmp_path / "spec.json", tmp_path / "bad.json"
    spec.write_text(json.dumps({"tokenizer": "server"}))
    bad.write_text("{not json")
    assert warmup.tokenizer_choice(["locust", "--agent-spec-file", str(spec)]) == "server"
    assert warmup.tokenizer_choice(["locust", f"--agent-spec-file={spec}"]) == "server"
    assert warmup.tokenizer_choice(["locust", "--tokenizer", "server"]) == "server"
    assert warmup.tokenizer_choice(["locust", "--tokenizer=tiktoken"]) == "tiktoken"
    assert warmup.tokenizer_choice(["locust", "--agent-spec-file", str(bad)]) == "tiktoken"
    assert (
        warmup.tokenizer_choice(["locust", "--agent-spec-file", str(tmp_path / "no")]) == "tiktoken"
    )
    assert warmup.tokenizer_choice(["locust"]) == "tiktoken"


def _in_a_fresh_process(check: str) -> None:
    """`import locust` (and gevent's hub) would patch this interpreter for the tests after
    (the in-process simulator breaks): these checks run in their own process."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    p = subprocess.run(
        [sys.executable, "-c", f"import tests.test_locust_warmup as t; t.{check}()"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]


def test_master_tolerates_a_longer_heartbeat_silence() -> None:
    _in_a_fresh_process("_check_master_tolerates_a_longer_heartbeat_silence")


def test_workers_missing_at_test_stop_are_lost() -> None:
    _in_a_fresh_process("_check_workers_missing_at_test_stop_are_lost")


def _check_master_tolerates_a_longer_heartbeat_silence() -> None:
    from locust import runners

    runners.HEARTBEAT_LIVENESS = 3
    warmup.raise_heartbeat_tolerance(10)
    # The counter drops by one a second and the worker is missing below zero: 10 s of silence.
    assert runners.HEARTBEAT_LIVENESS == 9
    warmup.raise_heartbeat_tolerance(2)  # never lower than Locust's own
    assert runners.HEARTBEAT_LIVENESS == 9


def test_warm_builds_the_offline_prompt_corpus_once() -> None:
    from workload.plan import prompts

    warmup.warm("tiktoken")
    assert "tiktoken:cl100k_base" in prompts._CACHE or any("cl100k" in k for k in prompts._CACHE)
    warmup.warm("tiktoken")  # idempotent, cheap


def _check_workers_missing_at_test_stop_are_lost() -> None:
    """Locust stops the test when its last worker goes missing: that run is partial."""
    from types import SimpleNamespace

    from workload.locust.signals import state_of
    from workload.locust.workers import watch_workers

    nodes = {
        "a": SimpleNamespace(id="a", state="running"),
        "b": SimpleNamespace(id="b", state="running"),
    }
    env = SimpleNamespace(runner=SimpleNamespace(clients=nodes))
    watcher = watch_workers(env, started_wall=0.0, interval_s=3600)
    try:
        watcher.sweep()
        assert state_of(env).lost_workers == []
        nodes["a"].state = "missing"
        del nodes["b"]  # a worker that stopped (web UI) is not counted at the final sweep
        watcher.sweep()
        lost = state_of(env).lost_workers
        assert [(w["worker"], w["why"]) for w in lost] == [("a", "no heartbeat")]
    finally:
        watcher.kill()
