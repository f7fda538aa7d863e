"""`agentload profiles`, a profile that cannot fit the server, and plain `locust -f`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.cli import CHAT_PROFILE, agentload
from workload.measure.artifacts import read_records
from workload.sim.launcher import SimProcess

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_profiles_commands(tmp_path: Path) -> None:
    listed = agentload("profiles", "list")
    assert listed.returncode == 0
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert {"quickstart", "chat", "coding-agent", "research-agent", "mixed"} <= set(names)
    schema = json.loads(agentload("profiles", "schema").stdout)
    assert "classes" in schema["properties"]
    shown = agentload("profiles", "show", "chat")
    assert shown.returncode == 0 and "classes:" in shown.stdout
    assert agentload("profiles", "validate", CHAT_PROFILE).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "classes:\n  a:\n    weight: 1\n    bogus: 3\n    user_turn: {dist: lognormal, mean: 5}\n"
    )
    p = agentload("profiles", "validate", str(bad))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2  # one line per problem
    assert any("bogus" in x for x in lines) and any("sigma" in x for x in lines)
    assert all(str(bad) in x for x in lines)


def test_profile_that_cannot_fit_is_rejected_before_load(tmp_path: Path) -> None:
    p = agentload(
        "run",
        "--profile",
        CHAT_PROFILE,
        "--sim-preset",
        "fast",
        "--out",
        str(tmp_path / "x"),
        "--set",
        "classes.chat.system_prompt.tokens=40000",
    )
    assert p.returncode == 2
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "cannot fit max_model_len" in err[0]


def test_plain_locust_headless(tmp_path: Path) -> None:
    out = tmp_path / "plain"
    with SimProcess("fast") as sim:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(REPO / "locustfiles" / "agents.py"),
                "--headless",
                "--host",
                sim.url,
                "-u",
                "2",
                "-r",
                "2",
                "-t",
                "20s",
                "--agent-profile",
                CHAT_PROFILE,
                "--seed",
                "4",
                "--sessions-per-user",
                "1",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["seed"] == 4 and run["profile_name"] == "e2e_chat"
    assert len(read_records(out, "requests")) == 2 * 3
    assert (out / "report.html").exists()
    # Locust prints its table every 2 s here: agentload says how to see its progress lines,
    # and its own last line comes after Locust's final table.
    assert "add --only-summary" in p.stdout
    assert p.stdout.strip().splitlines()[-1].startswith(f"agentload: artifacts in {out}")


def test_own_locustfile_around_agentload_sessions(tmp_path: Path) -> None:
    """A team's locustfile: subclass AgentUser, register the events; sessions and artifacts work."""
    lf = tmp_path / "team_locustfile.py"
    lf.write_text(
        "from locust import events\n"
        "import workload.locust as agentload\n\n"
        "agentload.register(events)\n\n\n"
        "class TeamAgents(agentload.AgentUser):\n"
        "    pass\n"
    )
    out = tmp_path / "team"
    with SimProcess("fast") as sim:
        p = subprocess.run(
            [sys.executable, "-m", "locust", "-f", str(lf), "--headless", "--host", sim.url,
             "-u", "2", "-r", "2", "-t", "20s", "--agent-profile", CHAT_PROFILE,
             "--sessions-per-user", "1", "--out", str(out)],
            capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    rows = read_records(out, "requests")
    assert len(rows) == 2 * 3 and all(r["status"] == "ok" for r in rows)


@pytest.mark.slow
def test_two_runs_into_one_out_at_once_are_one_run_and_one_refusal(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    cmd = [sys.executable, "-m", "workload.cli", "run", "--profile", CHAT_PROFILE, "--users", "1",
           "--sim-preset", "fast", "--out", str(out)]  # fmt: skip
    # The first run lasts until the second has been answered (Ctrl-C then): a 3 s run was
    # over before the second started on a loaded host, and both exited 0.
    first = subprocess.Popen(
        [*cmd, "--duration", "120s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / "spec.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the first run holds the lock once its spec is written
        # --overwrite: without the lock it removed the first run's files and wrote its own
        second = subprocess.run(
            [*cmd, "--duration", "3s", "--overwrite"], capture_output=True, text=True, timeout=120
        )
        reqs = out / "requests.jsonl"
        while not (reqs.exists() and reqs.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)  # something measured, so the artifacts have a run to hold
        first.send_signal(signal.SIGINT)
        _, err1 = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 130, err1  # stopped by the Ctrl-C, artifacts complete
    assert (out / "run.json").is_file()
    assert second.returncode == 2
    lines = [ln for ln in second.stderr.splitlines() if ln.startswith("agentload: error:")]
    assert len(lines) == 1 and "is in use by another agentload run" in lines[0]
    assert "Traceback" not in second.stderr
    ids = {json.loads(ln)["run_id"] for ln in (out / "requests.jsonl").read_text().splitlines()}
    assert len(ids) == 1


@pytest.mark.slow
def test_a_run_whose_stdout_closes_early_ends_with_its_artifacts(tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "workload.cli", "run", "--profile", CHAT_PROFILE, "--users", "1",
         "--duration", "3s", "--sim-preset", "fast", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        proc.stdout.close()  # as `agentload run … | head -1` does
        _, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
    for name in ("run.json", "stats.json", "report.html"):
        assert (out / name).is_file()
