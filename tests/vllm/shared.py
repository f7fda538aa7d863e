"""One real vLLM server shared by all pytest-xdist workers of a session.

Starting vLLM-CPU costs about 45 CPU-seconds and 3 GB of memory; with one server
per worker (or per module) the real-vLLM tests paid that several times. So the
one server serves every test that does not start servers itself (the canary):

* a 64k context, for the shared agent samples (test_agent_replay_real.py), whose
  prompts reach 48k: ``--max-model-len 65536`` with the tiny model's positions raised
  to match (``--hf-overrides``; its random weights do not care). Not
  ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` over its 8k positions: vLLM warns that
  positions past them give NaN, and after one such prompt the server's answers to
  short prompts changed (no content, an early stop), which the fidelity tests saw;
* its request spans, exported (``--otlp-traces-endpoint``, OTLP/HTTP) to a small
  receiver process that lives as long as the server (``python -m
  tests.otlp_receiver``) and appends them to ``spans.jsonl`` for test_otlp_real.py.

Under xdist the workers meet in a folder next to their own temp folders (the
controller's basetemp, which xdist makes the parent of every worker's):

  server.json   url, process-group ids, log and spans file of the running server
  spans.jsonl   every span the server exported (all tests' requests: filter by trace)
  start.lock    held while a worker starts the server (the others wait, then attach)
  use.lock      held by each real-vLLM test while it runs (tests/vllm/conftest.py)

The server and its receiver are started detached (their own sessions) and outlive
the worker that started them; the controller stops them in ``pytest_sessionfinish``
(tests/conftest.py calls :func:`stop_shared`). Without xdist the fixture starts
and stops the same pair itself (:func:`start`, :meth:`Started.stop`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.vllm.server import SERVED_MODEL_NAME, ServerHttp, VllmServer, group_alive

FOLDER = "vllm-shared"
REPO = Path(__file__).resolve().parents[2]
LONG_CONTEXT = 65536  # tokens: the shared agent samples' prompts reach 48k


class SharedServer(ServerHttp):
    """A server someone else started (another worker, this one, or the user via
    AGENTLOAD_VLLM_URL); the same helpers, no lifecycle here.

    ``spans`` is the file its exported spans land in and ``context`` the
    ``--max-model-len`` it was started with: both None for a user-provided server
    (its context is then what it serves, :attr:`max_model_len`)."""

    def __init__(
        self, url: str, log: str | None, spans: str | None = None, context: int | None = None
    ) -> None:
        self.base_url = url.rstrip("/")
        self.model = SERVED_MODEL_NAME
        self.log_path = Path(log) if log else None
        self.spans_path = Path(spans) if spans else None
        self.context = context

    @property
    def max_model_len(self) -> int:
        """The context the suite started it with, else what /v1/models says it serves."""
        return self.context or self.served_max_model_len()


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


@dataclass
class Started:
    """The server and its span receiver, as :func:`start` left them running."""

    server: VllmServer
    receiver: subprocess.Popen
    spans: Path

    def shared(self) -> SharedServer:
        return SharedServer(self.server.base_url, str(self.server.log_path), str(self.spans),
                            LONG_CONTEXT)  # fmt: skip

    def stop(self) -> None:
        self.server.stop()
        end_child(self.receiver)


def start_receiver(folder: Path, timeout_s: float = 60.0) -> tuple[subprocess.Popen, str]:
    """``python -m tests.otlp_receiver`` in its own session; (process, URL) once it listens."""
    url_file = folder / "otlp.url"
    url_file.unlink(missing_ok=True)
    with open(folder / "otlp.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.otlp_receiver", str(folder / "spans.jsonl"),
             str(url_file)],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if url_file.exists():
            return proc, url_file.read_text()
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    end_child(proc)
    tail = (folder / "otlp.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"the OTLP span receiver did not start:\n{tail}")


def start(folder: Path, log: Path) -> Started:
    """The receiver, then the server with a 64k context exporting its spans to it."""
    receiver, url = start_receiver(folder)
    srv = VllmServer(
        log_path=log,
        extra_args=("--max-model-len", str(LONG_CONTEXT), "--hf-overrides",
                    json.dumps({"max_position_embeddings": LONG_CONTEXT}),
                    "--otlp-traces-endpoint", f"{url}/v1/traces"),
        # vLLM's exporter speaks gRPC unless told
        extra_env=(("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),),
    )  # fmt: skip
    t0 = time.monotonic()
    try:
        srv.start(timeout_s=600)
    except BaseException:
        end_child(receiver)
        raise
    sys.stderr.write(
        f"\n[vllm] shared {srv.base_url} up in {time.monotonic() - t0:.0f} s, log {log}\n"
    )
    return Started(srv, receiver, folder / "spans.jsonl")


def attach_or_start(share: Path, log: Path) -> SharedServer:
    """The session's server: attach to it, or start it when no worker has yet."""
    with exclusive(share / "start.lock"):
        info = share / "server.json"
        if info.exists():
            doc = json.loads(info.read_text())
            if _healthy(doc["url"]):
                return SharedServer(doc["url"], doc["log"], doc["spans"], doc["context"])
            # It died: fail loudly instead of hiding a crash behind a restart.
            raise RuntimeError(f"the shared vLLM server {doc['url']} is gone; log {doc['log']}")
        up = start(share, log)
        assert up.server.proc is not None
        me = up.shared()
        info.write_text(json.dumps({
            "url": me.base_url, "pgid": up.server.proc.pid, "receiver_pgid": up.receiver.pid,
            "log": str(log), "spans": str(up.spans), "context": LONG_CONTEXT,
        }))  # fmt: skip
        return me


def end_child(proc: subprocess.Popen) -> None:
    """SIGTERM a child of this process, SIGKILL it after 5 s; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group's leader, SIGKILL the group after grace_s if anything is left."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pgid, signal.SIGTERM)  # the API server shuts its engine and worker down
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def stop_shared(basetemp: Path, grace_s: float = 20.0) -> None:
    """Stop the session's shared server and its receiver, if a worker started them
    (controller side)."""
    info = basetemp / FOLDER / "server.json"
    if not info.exists():
        return
    doc = json.loads(info.read_text())
    stop_group(int(doc["pgid"]), grace_s)
    stop_group(int(doc["receiver_pgid"]), 5.0)
    info.unlink(missing_ok=True)
