"""Session-wide hooks: how the suite is spread over pytest-xdist workers.

* All tests that talk to the shared real vLLM server run on one worker, in a
  row (tests/vllm/shared.py has why: one server start instead of one per
  worker, and counters no other worker's traffic moves). xdist's own
  ``--dist loadgroup`` would do this with ``xdist_group`` marks, but under
  pytest 9.2 its grouping is a no-op (it renames ``item._nodeid``, which
  pytest no longer reads), so the grouping is done here with xdist's
  documented ``pytest_xdist_make_scheduler`` hook.
* The longest units go out first (longest-processing-time-first), so no worker
  starts a 3-minute test when the others are done.
* The controller, which outlives every worker, stops the shared server.
* The controller compiles the package's bytecode once (`pytest_configure`): most tests
  start `agentload`, Locust or simulator processes, and where PYTHONDONTWRITEBYTECODE is
  set (it is on the team's machines) none of them writes its `__pycache__`, so each one
  compiled every `workload/` module it imports from source again: 0.16 CPU-s per
  `agentload` process and 0.37 per Locust child (medians of 5). Reading bytecode is not
  disabled by that variable; `__pycache__/` is in .gitignore.
"""

from __future__ import annotations

import compileall
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm.shared import stop_shared

# Tests that use the session's shared vLLM server: one work unit, one worker.
SHARED_VLLM_UNIT = "real-vllm-shared-server"
# Modules that start servers of their own (no shared counters): a unit per module (its
# tests share that module's servers), sent early, beside the shared-server unit. Only the
# canary: starting servers is what it tests (the 64k-context and span-export tests use the
# shared server, which tests/vllm/shared.py starts with both).
OWN_SERVERS = ("tests/vllm/test_canary_real.py",)
# The long end-to-end files (measured with --durations), sent before the short tests.
LONG_FIRST = (
    "tests/vllm/",
    "tests/test_examples.py",
    "tests/e2e/",
)


REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a non-interactive shell (`pytest ... &`) inherits
    # SIGINT ignored, and so would every server and run it starts: the Ctrl-C tests would see
    # nothing stop and the servers' stops wait out their timeouts before a kill (measured:
    # two canary-server tests 425 s instead of 9). A handler here makes children start with
    # SIGINT at its default again, as they do from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller compiled it before starting the workers
    for package in ("workload", "locustfiles"):  # up-to-date files are skipped
        compileall.compile_dir(REPO / package, quiet=1)


def _unit(nodeid: str) -> str:
    if nodeid.startswith(OWN_SERVERS):
        return nodeid.split("::", 1)[0]
    if nodeid.startswith("tests/vllm/"):
        return SHARED_VLLM_UNIT
    return nodeid


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long tests first; the order is the same on every worker (xdist checks it)."""

    def rank(item: pytest.Item) -> int:
        for i, prefix in enumerate(LONG_FIRST):
            if item.nodeid.startswith(prefix):
                return i
        return len(LONG_FIRST)

    items.sort(key=rank)  # stable: within a rank, collection order


try:  # pytest-xdist is a dev dependency; without it the suite runs in one process
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pragma: no cover
    LoadScopeScheduling = None


if LoadScopeScheduling is not None:

    class _Scheduling(LoadScopeScheduling):  # type: ignore[misc,valid-type]
        """xdist's load-by-scope scheduler with our units (one per test, but see _unit)."""

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
        if config.getvalue("dist") != "load":
            return None  # an explicit --dist keeps xdist's own
        return _Scheduling(config, log)


@pytest.fixture(autouse=True)
def _no_monkey_patched_test_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """`import locust` monkey-patches the interpreter it runs in; in a pytest-xdist worker the
    worker's own threads then end in gevent's LoopExit and every test still queued on it is
    lost (a full-suite run once lost 124 this way). Tests that need Locust's users run them
    in their own process (tests/test_pacing.py, tests/test_spawn_choice.py show how)."""
    yield
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("threading"):
        pytest.fail(
            f"{request.node.nodeid} monkey-patched the test process (imported locust?): "
            "run the Locust part in its own process",
            pytrace=False,
        )


@pytest.fixture(params=["asyncio", "uvloop"])
def record_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The event loop `agentload record`'s proxy runs on in this test, by
    AGENTLOAD_RECORD_LOOP (in-process and inherited by a child `agentload record`): each
    test that takes it runs on asyncio's loop and on uvloop's (skipped where uvloop is not
    installed, e.g. on Windows)."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv("AGENTLOAD_RECORD_LOOP", request.param)
    return str(request.param)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a worker: the shared server outlives it
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        stop_shared(factory.getbasetemp())
