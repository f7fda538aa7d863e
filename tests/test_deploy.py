"""What can be checked here of the Grafana dashboard, the Dockerfile and the Kubernetes recipe.

No image is built and no cluster runs on this machine: the files are parsed and checked
against the exporter's real metric names, the simulator's vLLM names, the package and each
other; the recipe's master and worker commands run against the embedded simulator (slow).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from workload.measure.live_metrics import metric_names
from workload.plan.loading import load_profile
from workload.run.options import parse_listen
from workload.sim.inprocess import SimThread

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "agentload-dashboard.json"
MANIFESTS = ROOT / "deploy" / "kubernetes" / "agentload.yaml"
SERVICE_MONITOR = ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml"

_OURS = re.compile(r"\b((?:agentload|gen_ai)_[a-z0-9_]+)")
_VLLM = re.compile(r"\b(vllm:[a-z0-9_]+)")


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_the_dashboard_queries_only_metrics_the_exporter_exports() -> None:
    exported = set(metric_names())
    used = {m for e in dashboard_exprs() for m in _OURS.findall(e)}
    assert used, "the dashboard queries no agentload metric"
    unknown = sorted(m for m in used if re.sub(r"_(bucket|count|sum)$", "", m) not in exported)
    assert not unknown, unknown
    # the agent views the dashboard is for
    for needed in ("agentload_sessions_total", "agentload_ttft_seconds_bucket",
                   "agentload_tpot_seconds_bucket", "agentload_session_start_lateness_seconds_bucket",
                   "agentload_cached_prompt_tokens_total"):  # fmt: skip
        assert needed in used, needed


def test_the_dashboards_server_panels_use_names_vllm_exports() -> None:
    """The embedded simulator exports vLLM's own metric names (workload/sim/promtext.py)."""
    with SimThread("fast", seed=1) as sim, urllib.request.urlopen(sim.url + "/metrics") as r:
        text = r.read().decode()
    served = set(re.findall(r"^(vllm:[a-z0-9_]+)", text, flags=re.M))
    used = {m for e in dashboard_exprs() for m in _VLLM.findall(e)}
    assert len(used) >= 5
    assert used <= served, sorted(used - served)


def test_the_dashboard_is_grafana_json_with_one_datasource_variable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "job", "vllm_job"} <= names
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}", p["title"]


# ---------------------------------------------------------------- Dockerfile


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_dockerfile_copies_files_that_exist_and_runs_agentload_as_non_root() -> None:
    steps = dockerfile()
    froms = [a for i, a in steps if i == "FROM"]
    assert froms and all("slim" in f for f in froms)
    final = max(k for k, (i, _) in enumerate(steps) if i == "FROM")
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for instr, args in steps:
        if instr != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = args.split()
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: no such file"
            assert f"!{src.rstrip('/')}" in ignore or f"!{src.rstrip('/')}/" in ignore, src
    users = [a for k, (i, a) in enumerate(steps) if i == "USER" and k > final]
    assert users and users[-1] not in ("root", "0")
    entry = [json.loads(a) for i, a in steps if i == "ENTRYPOINT"]
    assert entry == [["agentload"]]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "agentload" in scripts


def test_the_images_entrypoint_command_runs() -> None:
    """`agentload --help` is what the image runs by default (CMD), here in the test venv."""
    cmd = [a for i, a in dockerfile() if i == "CMD"]
    p = subprocess.run(
        [sys.executable, "-m", "workload.cli", *json.loads(cmd[-1])],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0 and "run" in p.stdout, p.stderr


# ---------------------------------------------------------------- Kubernetes


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def flags(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in args:
        key, _, value = a.partition("=")
        out[key] = value
    return out


def container(job: dict[str, Any]) -> dict[str, Any]:
    (c,) = job["spec"]["template"]["spec"]["containers"]
    return c


def test_the_kubernetes_recipe_fits_together() -> None:
    m = manifests()
    for d in m.values():
        assert d["apiVersion"] and d["kind"] and d["metadata"]["name"]
    master, workers = m[("Job", "agentload-master")], m[("Job", "agentload-workers")]
    service, profiles = m[("Service", "agentload-master")], m[("ConfigMap", "agentload-profiles")]
    mc, wc = container(master), container(workers)
    margs, wargs = flags(mc["args"]), flags(wc["args"])
    assert "--master" in margs and "--headless" in margs and "--worker" in wargs
    # the workers find the master through the Service, and the master waits for all of them
    assert wargs["--master-host"] == service["metadata"]["name"]
    assert int(margs["--expect-workers"]) == workers["spec"]["parallelism"]
    assert workers["spec"]["completions"] == workers["spec"]["parallelism"]
    assert (
        service["spec"]["selector"].items()
        <= master["spec"]["template"]["metadata"]["labels"].items()
    )
    # the metrics port: served on every address of the pod, the port Prometheus is told
    host, _, port = parse_listen(margs["--metrics-port"]).rpartition(":")
    assert host == "0.0.0.0"
    notes = service["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/port"] == port
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    assert int(port) in {p["containerPort"] for p in mc["ports"]}
    # the profile comes from the ConfigMap, mounted at the same path on master and workers
    mount = {v["name"]: v["mountPath"] for v in mc["volumeMounts"]}
    assert {v["name"]: v["mountPath"] for v in wc["volumeMounts"]} == mount
    key = Path(margs["--agent-profile"]).relative_to(mount["profiles"]).as_posix()
    assert key in profiles["data"]
    assert margs["--out"].startswith(mount["artifacts"] + "/")
    # headless job: the run's exit code is the Job's, never retried
    for job in (master, workers):
        assert job["spec"]["backoffLimit"] == 0
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        assert job["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    # the image's paths and user
    docker = dict((i, a) for i, a in dockerfile() if i == "USER")
    assert docker["USER"] == "10001"
    assert mc["command"][-1] == wc["command"][-1] == "/app/locustfiles/agents.py"
    assert "COPY locustfiles/agents.py /app/locustfiles/agents.py" in {
        f"{i} {a}" for i, a in dockerfile()
    }


def test_the_configmap_profile_is_a_valid_profile(tmp_path: Path) -> None:
    data = manifests()[("ConfigMap", "agentload-profiles")]["data"]
    for name, text in data.items():
        path = tmp_path / name
        path.write_text(text)
        assert load_profile(str(path)).classes


def test_the_service_monitor_selects_the_master_service() -> None:
    (sm,) = [d for d in yaml.safe_load_all(SERVICE_MONITOR.read_text()) if d]
    service = manifests()[("Service", "agentload-master")]
    assert sm["kind"] == "ServiceMonitor"
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_recipes_master_and_worker_commands_run_a_distributed_run(tmp_path: Path) -> None:
    """The manifests' own arguments, with the cluster's addresses and paths swapped for local ones.

    The run ends when every user has played one session (``--sessions-per-user 1``; each
    worker has two of the four users), not after a fixed few seconds: on a loaded machine a
    worker's users could still be in their first think time when a short run ended, and that
    worker wrote no requests. ``--run-time`` is only the bound."""
    m = manifests()
    mc, wc = container(m[("Job", "agentload-master")]), container(m[("Job", "agentload-workers")])
    profile = tmp_path / "profiles" / "soak.yaml"
    profile.parent.mkdir()
    profile.write_text(m[("ConfigMap", "agentload-profiles")]["data"]["soak.yaml"])
    out, master_port, metrics_port = tmp_path / "artifacts" / "soak", free_port(), free_port()
    locustfile = str(ROOT / "locustfiles" / "agents.py")
    with SimThread("fast", seed=1) as sim:
        local = {
            "--host": sim.url, "--agent-profile": str(profile), "--users": "4", "--spawn-rate": "4",
            "--run-time": "150s", "--sessions-per-user": "1", "--out": str(out),
            "--metrics-port": f"127.0.0.1:{metrics_port}",
            "--metrics-linger": "0", "--master-bind-port": str(master_port),
        }  # fmt: skip
        margs = flags(mc["args"]) | local
        master_cmd = [sys.executable, "-m", "locust", "-f", locustfile,
                      *(f"{k}={v}" if v else k for k, v in margs.items())]  # fmt: skip
        wargs = flags(wc["args"]) | {
            "--master-host": "127.0.0.1",
            "--master-port": str(master_port),
        }
        worker_cmd = [sys.executable, "-m", "locust", "-f", locustfile,
                      *(f"{k}={v}" if v else k for k, v in wargs.items())]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = [subprocess.Popen(master_cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)]  # fmt: skip
        procs += [
            subprocess.Popen(
                worker_cmd,
                cwd=tmp_path,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for _ in range(int(margs["--expect-workers"]))
        ]
        try:
            master_out, _ = procs[0].communicate(timeout=240)
            for p in procs[1:]:
                p.wait(timeout=30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert procs[0].returncode in (0, 3), shlex.join(master_cmd) + "\n" + master_out[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["workers"] == 2
    assert sorted(p.name for p in out.glob("requests-*.jsonl")) == [
        "requests-0.jsonl",
        "requests-1.jsonl",
    ]
    assert f"live metrics at http://127.0.0.1:{metrics_port}/metrics" in master_out
