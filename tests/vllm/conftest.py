"""Fixtures for the real-vLLM integration tests (pytest -m vllm).

One real server per test session (tests/vllm/server.py, started with the 64k
context and span export of tests/vllm/shared.py), on a free 127.0.0.1 port,
stopped by process group at the end. Without the setup from
scripts/setup_vllm_cpu.sh the tests skip with that hint -- unless
AGENTLOAD_REQUIRE_VLLM=1 (CI), where a missing setup fails them.

Knobs (environment):
  AGENTLOAD_VLLM_HOME      where setup_vllm_cpu.sh put venv/ and model/
  AGENTLOAD_REQUIRE_VLLM   1: missing setup or a server that will not start is a failure
  AGENTLOAD_VLLM_LOG_DIR   keep the server log there (CI artifact) instead of a tmp dir
  AGENTLOAD_VLLM_URL       reuse a server already running with tests/vllm/server.py's
                           flags (local iteration only; its log via AGENTLOAD_VLLM_LOG).
                           The tests that need what only the suite's own server has
                           (its exported spans; a 64k context, unless it serves one)
                           skip, saying so.

Under pytest-xdist the workers share one server (tests/vllm/shared.py): the
first worker that needs it starts it, the others attach, and the controller
stops it when the whole session ends (tests/conftest.py). Tests on that server
take a cross-worker lock for their duration, so they run one at a time as in a
plain session -- several assert on the server's counters, which another
worker's traffic would move.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.vllm import shared
from tests.vllm.server import setup_problem

REPO = Path(__file__).resolve().parents[2]


def _required() -> bool:
    return os.environ.get("AGENTLOAD_REQUIRE_VLLM", "") not in ("", "0")


def server_log(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """Where a real server's log goes, once the setup is there (else skip, or fail in CI)."""
    problem = setup_problem()
    if problem:
        if _required():
            pytest.fail(f"AGENTLOAD_REQUIRE_VLLM=1 but {problem}", pytrace=False)
        pytest.skip(problem)
    log_dir = os.environ.get("AGENTLOAD_VLLM_LOG_DIR")
    if log_dir:
        return Path(log_dir) / f"{name}-server.log"
    return tmp_path_factory.mktemp(name) / "server.log"


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[shared.SharedServer]:
    """The running real vLLM server (base_url, model, log_path, spans_path, max_model_len,
    get, post_json), with a 64k context and its spans exported (tests/vllm/shared.py)."""
    url = os.environ.get("AGENTLOAD_VLLM_URL")
    if url:
        yield shared.SharedServer(url, os.environ.get("AGENTLOAD_VLLM_LOG"))
        return
    log = server_log(tmp_path_factory, "vllm")
    share = shared.shared_dir(tmp_path_factory)
    if share is not None:
        try:
            yield shared.attach_or_start(share, log)
        except RuntimeError as e:
            pytest.fail(f"real vLLM did not start: {e}", pytrace=False)
        return  # the xdist controller stops the shared server at session end
    try:
        up = shared.start(tmp_path_factory.mktemp(shared.FOLDER), log)
    except RuntimeError as e:
        # A setup that exists but cannot serve is always a failure, never a skip.
        pytest.fail(f"real vLLM did not start: {e}", pytrace=False)
    try:
        yield up.shared()
    finally:
        up.stop()


def skip_if_provided(server: shared.SharedServer, lacks: str) -> None:
    """Skip when the server came from AGENTLOAD_VLLM_URL and ``lacks`` what the test needs;
    the suite's own server has it (tests/vllm/shared.py), so in CI this never skips."""
    if server.context is None:
        pytest.skip(f"AGENTLOAD_VLLM_URL: the provided server {lacks}; unset it to let the "
                    "suite start its own (tests/vllm/shared.py)")  # fmt: skip


@pytest.fixture(autouse=True)
def _one_vllm_test_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under xdist, a test on the shared server holds the cross-worker lock while it runs
    (see the module doc); tests with servers of their own do not wait for it."""
    share = shared.shared_dir(tmp_path_factory)
    if share is None or "vllm_server" not in request.fixturenames:
        yield
        return
    with shared.exclusive(share / "use.lock"):
        yield


def wait_idle(server: Any, timeout_s: float = 60.0) -> None:
    """Until the server has nothing running or waiting (its counters are then final)."""
    from workload.observe.metrics import parse_metrics

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        g = parse_metrics(server.metrics_text())["gauges"]
        if not g.get("vllm:num_requests_running") and not g.get("vllm:num_requests_waiting"):
            return
        time.sleep(0.2)
    raise AssertionError(f"server still busy after {timeout_s} s")


def scrape(server: Any) -> dict[str, Any]:
    """parse_metrics() of the server's /metrics once it is idle."""
    from workload.observe.metrics import parse_metrics

    wait_idle(server)
    return parse_metrics(server.metrics_text())


def delta(before: dict[str, Any], after: dict[str, Any], counter: str) -> float:
    return after["counters"].get(counter, 0.0) - before["counters"].get(counter, 0.0)


def agentload(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`agentload ...` as CI would run it (the project's interpreter)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "workload.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )


def read_jsonl(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    """All rows of requests*.jsonl / sessions*.jsonl in a run directory."""
    rows: list[dict[str, Any]] = []
    for p in sorted(run_dir.glob(f"{kind}*.jsonl")):
        rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return rows
