"""The Locust command line `agentload run` starts: one RunSpec value plus Locust's own options.

Plain Python: importing this does not import locust (the CLI imports it before
any gevent monkey-patching would be wanted).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

from workload.run.spec import OPTIONS, RunSpec

LOCUSTFILE = Path(__file__).parent / "locustfile.py"


def locust_argv(spec: RunSpec, *, python: str = sys.executable) -> list[str]:
    """`python -m workload.locust.launch ...` (Locust, quiet on an early Ctrl-C) for this run:
    the spec as --agent-spec, Locust's options from it."""
    cmd = [
        python, "-m", "workload.locust.launch", "-f", str(LOCUSTFILE),
        "--host", spec.host,
        "--users", str(spec.users),
        "--spawn-rate", str(spec.spawn_rate),
        f"--agent-spec={spec.to_json()}",
        "--only-summary",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    if spec.web:
        cmd += ["--web-host", "127.0.0.1", "--web-port", str(spec.web_port)]
        cmd += _form_flags(spec)
    else:
        cmd += ["--headless", "--run-time", f"{int(round(spec.duration_s))}s"]
    if spec.workers > 1:
        # A free master port: two distributed runs at once (e.g. both sides of a canary)
        # must not share Locust's default 5557 and swap workers.
        port = _free_port()
        cmd += [
            "--processes", str(spec.workers),
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--master-host", "127.0.0.1", "--master-port", str(port),
        ]  # fmt: skip
    return cmd + list(spec.locust_args)


def _form_flags(spec: RunSpec) -> list[str]:
    """The start form shows what Locust's command line says: give it the run's form options."""
    out: list[str] = []
    for o in OPTIONS:
        if not (o.web and o.locust_flags):
            continue
        # Out only when the user named one: blank in the form means "runs/<new run id>"
        # (the directory agentload run chose is the first run's; a restart gets its own).
        value: Any = spec.options.get(o.name, o.default)
        if value not in (None, ""):
            out += [o.locust_flags[0], str(value)]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
