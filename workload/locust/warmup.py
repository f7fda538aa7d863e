"""Distributed runs start reliably: heavy set-up before the workers fork, heartbeats during it.

With `--processes N` Locust forks N workers from the master process. Each one
builds its runtime at test_start, inside the handler of the master's spawn
message: importing the planner (numpy), loading the tiktoken encoding
and building the token-exact prompt corpus is seconds of CPU, during which the
worker's gevent loop runs nothing else, so it sends no heartbeats. Locust's
master calls a worker "missing" after about 4 s without one, and when the last
worker goes missing it stops the test: on a busy machine (CI, two cores, a few
parallel jobs) a `--workers 2` run then sent no traffic at all.

Three things keep that from happening:

- `warm()` runs in the master just before Locust forks (an at-fork hook):
  the imports, the offline tokenizer and its prompt corpus are built once
  there and every forked worker inherits them (they are process-wide caches);
- a worker yields to its gevent loop between set-up steps (`yield_to_loop`),
  so heartbeats go out while it prepares;
- the master tolerates a longer silence before calling a worker missing
  (`HEARTBEAT_TOLERANCE_S`; a killed worker is still reported lost).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path

import gevent

from workload.plan.prompts import synth_for
from workload.plan.tokens import get_tokenizer

log = logging.getLogger("agentload")

# Seconds without a heartbeat before the master calls a worker missing (Locust's default: ~4).
HEARTBEAT_TOLERANCE_S = 10

_warmed = False
_hook_installed = False


def install_fork_hook() -> None:
    """Warm the process just before it forks (Locust's `--processes`); once per process."""
    global _hook_installed
    if _hook_installed or not hasattr(os, "register_at_fork"):
        return
    _hook_installed = True
    os.register_at_fork(before=_before_fork)


def _before_fork() -> None:
    # Only where Locust forks workers: other forks (a subprocess with preexec_fn) skip it.
    if not any(a == "--processes" or a.startswith("--processes=") for a in sys.argv):
        return
    try:
        warm(tokenizer_choice(sys.argv))
    except Exception as e:  # noqa: BLE001 - warming is an optimisation: test_start does it anyway
        log.debug("agentload: warm-up before fork failed: %s", e)


def tokenizer_choice(argv: list[str]) -> str:
    """The run's tokenizer ("tiktoken" or "server") as the command line gives it."""
    choice = ""
    for i, arg in enumerate(argv):
        spec_file = ""
        if arg == "--agent-spec-file" and i + 1 < len(argv):
            spec_file = argv[i + 1]
        elif arg.startswith("--agent-spec-file="):
            spec_file = arg.partition("=")[2]
        if spec_file:  # a small file agentload wrote; a bad one is test_start's to report
            with contextlib.suppress(OSError, ValueError, AttributeError):
                spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
                choice = str(spec.get("tokenizer") or choice)
        elif arg == "--tokenizer" and i + 1 < len(argv):
            choice = argv[i + 1]
        elif arg.startswith("--tokenizer="):
            choice = arg.partition("=")[2]
    return choice or "tiktoken"


def warm(tokenizer: str = "tiktoken") -> None:
    """Build the offline tokenizer's prompt corpus (a process-wide cache; the runtime's modules
    are already imported with the plugin), so a forked worker's test_start has little left."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    if tokenizer != "server":
        synth_for(get_tokenizer("tiktoken:cl100k_base"))


def raise_heartbeat_tolerance(seconds: int = HEARTBEAT_TOLERANCE_S) -> None:
    """Master: allow `seconds` without a heartbeat before a worker counts as missing.

    Locust reads its module constant each time it (re)arms a worker's counter, and the
    counter drops by one per second: a worker is missing once it goes below zero.
    """
    from locust import runners  # deferred: tests import this module without Locust's patching

    runners.HEARTBEAT_LIVENESS = max(int(runners.HEARTBEAT_LIVENESS), seconds - 1)


def yield_to_loop() -> None:
    """Let other greenlets (the worker's heartbeat) run between set-up steps."""
    gevent.sleep(0.001)  # a real (tiny) sleep: the loop polls and runs due timers
