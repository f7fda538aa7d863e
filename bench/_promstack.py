"""A real Prometheus scraping a real `agentload run` and the simulator it runs against.

Used by tests/e2e/test_dashboard_prometheus.py (every dashboard query returns data) and
bench/dashboard_preview.py (the dashboard drawn from those queries). Everything listens on
127.0.0.1 on free ports; Prometheus keeps its data in a temporary directory.

    with PromStack(tmp, duration_s=15) as stack:
        stack.wait_for_run()
        for panel, target, expr in dashboard_queries(DASHBOARD, stack.prom):
            stack.prom.query_range(expr, stack.started, time.time(), step_s=1)
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = Path("/usr/bin/prometheus")
DASHBOARD = ROOT / "deploy" / "grafana" / "agentload-dashboard.json"
PROFILE = ROOT / "tests" / "fixtures" / "dashboard_run.yaml"
SCRAPE_S = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bytes(r.read())
    except OSError:
        return None


def _wait(what: str, check: Any, timeout_s: float, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(
                    f"{what}: {' '.join(map(str, p.args[:5]))} ... exited {p.returncode}"
                )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(0.2)


class Prometheus:
    """The HTTP API of one Prometheus server."""

    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH; the `data` of a success, RuntimeError (with Prometheus's error) else."""
        query = urllib.parse.urlencode(params)
        req = urllib.request.Request(f"{self.url}/api/v1/{path}?{query}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:  # a bad query: 400 with the parser's message
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[dict]:
        """The matrix `expr` gives over [start, end]: [{"metric": {...}, "values": [[t, "v"]]}]."""
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step=f"{step_s:g}")  # fmt: skip
        assert data["resultType"] == "matrix", data["resultType"]
        return list(data["result"])

    def label_values(self, metric: str, label: str, start: float, end: float) -> list[str]:
        """What Grafana's `label_values(metric, label)` variable query lists."""
        return list(self.api(f"label/{label}/values", **{"match[]": metric},
                             start=f"{start:.0f}", end=f"{end:.0f}"))  # fmt: skip

    def targets_up(self) -> dict[str, str]:
        """{job: health} of the active scrape targets."""
        data = self.api("targets", state="active")
        return {t["labels"]["job"]: t["health"] for t in data["activeTargets"]}


def prometheus_config(agentload: str, vllm: str) -> str:
    return (
        f"global: {{scrape_interval: {SCRAPE_S}s, evaluation_interval: {SCRAPE_S}s}}\n"
        "scrape_configs:\n"
        f"  - job_name: agentload\n    static_configs: [{{targets: ['{agentload}']}}]\n"
        f"  - job_name: vllm\n    static_configs: [{{targets: ['{vllm}']}}]\n"
    )


class PromStack:
    """Simulator + `agentload run --metrics-port` + Prometheus, all stopped on exit.

    The simulator (`agentload sim`, vLLM's `vllm:` names on its /metrics) answers with a
    few 500s so the errors panel has errors; the run plays PROFILE for `duration_s`.
    """

    def __init__(self, workdir: Path, duration_s: float, profile: Path = PROFILE,
                 fault: str = "500=0.03", extra: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.workdir = workdir
        self.duration_s = duration_s
        self.profile = profile
        self.fault = fault
        self.extra = extra
        self.procs: list[subprocess.Popen] = []
        self.run: subprocess.Popen | None = None
        self.started = 0.0
        self.prom = Prometheus("")

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self.procs.append(proc)
        return proc

    def __enter__(self) -> PromStack:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        sim_port, metrics_port, prom_port = free_port(), free_port(), free_port()
        agentload = [sys.executable, "-m", "workload.cli"]
        self._spawn("sim", [*agentload, "sim", "--port", str(sim_port), "--preset", "default",
                            "--seed", "29", "--fault", self.fault])  # fmt: skip
        sim = f"http://127.0.0.1:{sim_port}"
        _wait("the simulator", lambda: _get(sim + "/v1/models"), 60, self.procs)
        config = self.workdir / "prometheus.yml"
        config.write_text(prometheus_config(f"127.0.0.1:{metrics_port}", f"127.0.0.1:{sim_port}"))
        prom = self._spawn("prometheus", [
            str(PROMETHEUS), f"--config.file={config}", f"--web.listen-address=127.0.0.1:{prom_port}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}", "--storage.tsdb.retention.time=1d",
        ])  # fmt: skip
        self.prom = Prometheus(f"http://127.0.0.1:{prom_port}")
        _wait("Prometheus ready", lambda: _get(self.prom.url + "/-/ready"), 60, [prom])
        self.started = time.time()
        self.run = self._spawn("run", [
            *agentload, "run", "--host", sim, "--profile", str(self.profile),
            "--duration", f"{self.duration_s:g}s", "--out", str(self.workdir / "run"),
            "--metrics-port", str(metrics_port), "--metrics-linger", str(3 * SCRAPE_S),
            *self.extra,
        ])  # fmt: skip

    def wait_for_run(self, timeout_s: float) -> int:
        """Wait for the run to end (its files written, the linger served); its exit code."""
        assert self.run is not None
        try:
            return self.run.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"agentload run still running after {timeout_s:.0f} s") from None

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ------------------------------------------------------------- Grafana's substitutions

_VAR = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_LABEL_VALUES = re.compile(r"label_values\(\s*([^,]+?)\s*,\s*(\w+)\s*\)")


def rate_interval_s(step_s: float, scrape_s: float = SCRAPE_S) -> float:
    """Grafana's `$__rate_interval`: max($__interval + scrape interval, 4 x scrape interval)."""
    return max(step_s + scrape_s, 4 * scrape_s)


def _regex_escape(value: str) -> str:
    """Grafana's Prometheus data source escapes a multi-value variable's values for =~."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", value)


def variable_values(dash: dict, prom: Prometheus, start: float, end: float) -> dict[str, str]:
    """Each template variable as Grafana substitutes it with its current value ("All").

    A query variable's "All" is its customAllValue when it has one, else every value its
    query lists, regex-escaped, as `(a|b)` (a single value as itself); an empty list is an
    error here (Grafana would query with nothing, and every panel would stay empty).
    """
    out: dict[str, str] = {}
    for var in dash.get("templating", {}).get("list", []):
        name, kind = var["name"], var.get("type")
        if kind == "datasource":
            out[name] = "prometheus"  # only ever a data source uid, never inside a query
        elif kind == "query":
            definition = var.get("definition") or var["query"]["query"]
            m = _LABEL_VALUES.fullmatch(definition.strip())
            if m is None:
                raise RuntimeError(f"variable ${name}: cannot evaluate {definition!r}")
            current = var.get("current", {}).get("value")
            if current not in ("$__all", ["$__all"]):
                raise RuntimeError(f"variable ${name}: current value {current!r}, not All")
            if var.get("customAllValue"):
                out[name] = var["customAllValue"]
                continue
            values = prom.label_values(m.group(1), m.group(2), start, end)
            if not values:
                raise RuntimeError(f"variable ${name}: {definition} lists nothing")
            esc = [_regex_escape(v) for v in values]
            out[name] = esc[0] if len(esc) == 1 else "(" + "|".join(esc) + ")"
        else:
            raise RuntimeError(f"variable ${name}: type {kind!r} not handled here")
    return out


def substitute(expr: str, variables: dict[str, str], step_s: float, range_s: float) -> str:
    """`expr` with Grafana's variables replaced; KeyError names a variable nobody defines."""
    builtins = {
        "__rate_interval": f"{rate_interval_s(step_s):g}s",
        "__interval": f"{step_s:g}s",
        "__range": f"{range_s:.0f}s",
    }

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return builtins[name] if name in builtins else variables[name]

    return _VAR.sub(one, expr)


def dashboard_queries(dash: dict) -> Iterator[tuple[dict, dict]]:
    """(panel, target) for every target of every panel, rows' nested panels included."""
    for panel in dash["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                if not target.get("hide"):
                    yield inner, target


def has_data(result: list[dict]) -> bool:
    """At least one series with at least one value that is a number (not NaN, not ±Inf)."""
    return any(v not in ("NaN", "+Inf", "-Inf") for series in result for _t, v in series["values"])
