"""Every command the README, the docs and examples/ show works when copied.

The commands are extracted, not copied here: each line of a ```bash block in
README.md and docs/*.md (backslash continuations joined, comments dropped), each
`agentload ...` or `locust ...` line in any other fenced block, and each line of
the `run:` steps in examples/*.yml. Each one is either run against the embedded
simulator, shortened by the substitutions below, or listed in `NOT_RUN` with the
reason it cannot run here. A new command in the docs is run automatically; one
that cannot run fails `test_every_documented_command_is_run_or_excused` until it
is listed.

Substitutions (`rewrite`), mechanical and the same for every command:
- `agentload` -> `python -m workload.cli`; `locust` -> `python -m locust`, and a
  locustfile path is taken from the repository;
- `--duration`/`--run-time` -> 10s (6 s for `canary`; added to `agentload run`/`canary` when
  absent),
  `--users` -> 2 (added when absent), `--spawn-rate` -> 2, `--workers` at most 2,
  `--blocks` at most 2 (2 added to `canary` when absent; 4 with `--early-stop`);
- `--host`, `--baseline`, `--candidate` and `$TARGET` -> one shared simulator
  (`fast` preset); `--baseline-cmd`/`--candidate-cmd` (a server command, e.g. vLLM) ->
  the embedded simulator started on the canary's `{port}`, not warmed (`--warmup 0` unless
  given: a warm-up is one more Locust run per side; tests/test_canary_warmup.py runs them); `capacity` -> `--min 1 --max 2 --step-duration 8s --warmup 2s`; `agentload run` without `--host` keeps its embedded simulator
  with `--sim-preset fast`;
- GitHub expressions `${{ ... }}` -> `ci-value`; a `...` argument stands for the
  arguments of the command above it with the same subcommand (as the docs mean);
- files named by `--*-log` are created empty; each command runs in its own
  directory where `runs/A` and `runs/B` are two short finished runs.
A command that the substitutions make the very command of an earlier one (same subcommand,
arguments and options, `--out` aside: e.g. `canary ... --blocks 10` is the canary above it
once 10 blocks become 2) is not run twice: its test checks that it is that command.
Expected exit: 0, except `compare`/`canary`, which may also say "regression" (3):
both sides are the same simulator, so the verdict is noise; the command worked.
`agentload capacity` may exit 4 (inconclusive) only when its lowest shortened step had no
sample of an SLO. `agentload run` may exit 3 only when every failed SLO is one of its profile's classes
with no samples: agent sessions with tool pauses do not finish in a 10 s run (an SLO
for a class the profile lacks is never excused: that is the copied gate that always
fails).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MARKDOWN = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLES = sorted((REPO / "examples").glob("*.yml"))
TIMEOUT_S = 150
SHORT = "10s"  # mixed/coding-agent need a few seconds before their first answers
# A canary block: each runs both sides (in turn under --mode sequential), so the eight
# documented canaries were most of this file's time at 10 s; 6 s still answers every class.
CANARY_SHORT = "6s"
AT_MOST_2 = ("--workers", "--blocks")  # kept when smaller: `--blocks 1` is a design of its own

# Commands not run here: (pattern at the start of the command, why).
NOT_RUN: list[tuple[str, str]] = [
    (r"pip install ", "installs packages: needs a package index; tests/test_packaging.py builds the wheel"),
    (r"pip wheel |pipx install ", "builds or installs the wheel: tests/test_packaging.py builds it and "
     "installs it into a fresh virtual environment"),
    (r"pytest\b", "the test suite itself"),
    (r"ruff |mypy\b", "lint and type tooling, run by CI"),
    (r"python -m mkdocs ", "docs tooling: tests/test_docs.py builds the site --strict"),
    (r"python bench/bench_\w+\.py", "benchmarks print figures over minutes; tests/test_bench_*.py smoke-test them"),
    (r"python -c \"from workload\.plan\.reference", "rewrites docs/profiles-reference.md; tests/test_reference.py checks it"),
    (r"export ", "sets an API key in the shell; the simulator needs none"),
    (r"echo \$\?", "prints the exit code of the command above; this test checks it"),
    (r"docker ", "builds or runs the container image: no Docker here; tests/test_deploy.py checks the "
     "Dockerfile's sources, user and entrypoint"),
    (r"kubectl ", "applies the Kubernetes recipe: no cluster here; tests/test_deploy.py checks the "
     "manifests and runs their master and worker arguments as a real run"),
    (r"agentload trace import auto ~/", "reads your own Claude Code logs; tests/test_agent_traces.py "
     "imports the shared samples and tests/e2e/test_agent_replay.py replays them"),
    (r"agentload run --trace sessions\.jsonl", "replays the file the import above writes from your "
     "own logs; tests/e2e/test_agent_replay.py replays imported sessions"),
    (r"agentload trace fit sessions\.jsonl", "fits the file the import above writes from your own "
     "logs; tests/test_agent_fit.py fits the shared samples and runs the CLI"),
    (r"agentload sim --preset-file twin\.yaml", "serves the preset `sim calibrate` fitted to a real "
     "server; tests/test_sim_calibrate.py calibrates and serves one"),
    (r"agentload record[ :]", "a proxy that runs until Ctrl-C (or its console lines); "
     "tests/e2e/test_record.py runs it (the CLI, an SDK agent through it, SIGINT and SIGTERM)"),
    (r"curl ", "talks to a running `agentload record`; tests/test_record_proxy.py sends raw and "
     "SDK requests through the proxy"),
    (r"agentload (trace import auto|trace fit|run --trace) recordings/", "reads a recording of "
     "your own agents; tests/e2e/test_record.py imports, fits and replays one"),
    (r"locust .*--master\b|locust .*--worker\b",
     "a distributed master and its workers on several machines; "
     "tests/e2e/test_distributed_and_gates.py runs master and workers"),
]  # fmt: skip


@dataclass(frozen=True)
class Command:
    source: str  # file:line
    text: str  # as documented, one logical line


def _logical_lines(block: str, first_line: int) -> list[tuple[int, str]]:
    """(line number, command) for a shell block: continuations joined, comments dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", first_line
    for i, raw in enumerate(block.splitlines()):
        line = raw.strip()
        if not pending:
            start = first_line + i
        if not line or (line.startswith("#") and not pending):
            continue
        line = re.sub(r"\s+#\s.*$", "", line)  # a trailing comment
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def doc_commands() -> list[Command]:
    """Commands in README.md and docs/*.md (see the module docstring)."""
    found: list[Command] = []
    for path in MARKDOWN:
        text = path.read_text()
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            lang, body = m.group(1), m.group(2)
            first = text.count("\n", 0, m.start(2)) + 1
            for line, cmd in _logical_lines(body, first):
                shell = lang in ("bash", "sh", "shell", "console")
                if shell or re.match(r"(agentload|locust) ", cmd):
                    found.append(Command(f"{path.relative_to(REPO)}:{line}", cmd))
    return found


def example_commands() -> list[Command]:
    """Commands in the `run:` steps of examples/*.yml."""
    found: list[Command] = []
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        for job in (doc.get("jobs") or {}).values():
            for step in job.get("steps") or []:
                if "run" in step:
                    for _, cmd in _logical_lines(step["run"], 1):
                        found.append(Command(f"{path.relative_to(REPO)} ({step.get('name')})", cmd))
    return found


def excuse(cmd: str) -> str | None:
    """Why a command is not run here, or None when it is run."""
    for pattern, why in NOT_RUN:
        if re.match(pattern, cmd):
            return why
    return None


def _expand_ellipsis(commands: list[Command]) -> list[Command]:
    """`agentload canary ... --mode X` means the canary command above with `--mode X` added."""
    out: list[Command] = []
    last: dict[str, str] = {}
    for c in commands:
        words = c.text.split()
        key = " ".join(words[:2])
        if "..." in words and key in last:
            rest = c.text.split("...", 1)[1]
            c = Command(c.source, f"{last[key]}{rest}")
        else:
            last[key] = c.text
        out.append(c)
    return out


def _runnable() -> list[Command]:
    seen: set[str] = set()
    out = []
    for c in _expand_ellipsis(doc_commands()) + example_commands():
        if excuse(c.text) is None and c.text not in seen:
            seen.add(c.text)
            out.append(c)
    return out


def _same_command(argv: list[str]) -> tuple[tuple[str, ...], frozenset[tuple[str, str]]]:
    """What a shortened argv runs: its positional words in order and its options as a set
    (a repeated option with one value is the same option; `--out` only names where it
    writes)."""
    words = argv[3:] if argv[1:3] == ["-m", "workload.cli"] else argv[1:]
    positional: list[str] = [*argv[1:3]]
    options: set[tuple[str, str]] = set()
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        if not name.startswith("-"):
            positional.append(words[i])
        else:
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
                i += 1
            if name != "--out":
                options.add((name, value))
        i += 1
    return tuple(positional), frozenset(options)


@functools.cache
def _twins() -> dict[str, Command]:
    """A runnable command's source -> the earlier command it becomes once shortened."""
    first: dict[object, Command] = {}
    twins: dict[str, Command] = {}
    for c in _runnable():
        key = _same_command(rewrite(c.text, "http://127.0.0.1:1"))
        if key in first:
            twins[c.source] = first[key]
        else:
            first[key] = c
    return twins


def rewrite(cmd: str, sim_url: str) -> list[str]:
    """The shortened argv of a documented command (substitutions in the module docstring)."""
    cmd = re.sub(r"\$\{\{[^}]*\}\}", "ci-value", cmd)
    cmd = re.sub(r"\$\{?TARGET\}?", sim_url, cmd)
    words = shlex.split(cmd)
    head, args = words[0], words[1:]
    sim_cmd = f"{sys.executable} -m workload.sim --port {{port}} --preset fast"
    swap = {"--duration": SHORT, "--run-time": SHORT, "--users": "2", "--spawn-rate": "2",
            "--host": sim_url, "--baseline": sim_url, "--candidate": sim_url,
            # a server command (vLLM here) becomes the embedded simulator on the same {port}
            "--baseline-cmd": sim_cmd, "--candidate-cmd": sim_cmd,
            # capacity: a few short steps
            "--min": "1", "--max": "2", "--step-duration": "8s", "--warmup": "2s"}  # fmt: skip
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if name in swap or name in AT_MOST_2:
            given = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            new = str(min(2, int(given))) if name in AT_MOST_2 else swap[name]
            out += [name, new]
            i += 1 if eq else 2
            continue
        if name == "-f" and i + 1 < len(args):
            out += ["-f", str(REPO / args[i + 1])]
            i += 2
            continue
        out.append(a)
        i += 1
    if head == "agentload":
        sub = out[0] if out else ""
        if sub in ("run", "canary"):
            if "--duration" not in out:
                out += ["--duration", SHORT]
            if "--users" not in out:
                out += ["--users", "2"]
        if sub == "canary":
            out[out.index("--duration") + 1] = CANARY_SHORT
        if sub == "canary" and "--warmup" not in out and "--baseline-cmd" in out:
            out += ["--warmup", "0"]  # a started server's default warm-up is 10 s
        if sub == "canary" and "--blocks" not in out:
            # the default 5 blocks, shortened like --blocks N (--early-stop needs 4 to look)
            out += ["--blocks", "4" if "--early-stop" in out else "2"]
        if sub in ("run", "capacity") and "--host" not in out:
            out += ["--sim-preset", "fast"]
        if sub == "capacity":
            for flag, value in (("--max", "2"), ("--step-duration", "8s"), ("--warmup", "2s")):
                if flag not in out:
                    out += [flag, value]
        return [sys.executable, "-m", "workload.cli", *out]
    if head == "locust":
        return [sys.executable, "-m", "locust", *out]
    raise AssertionError(f"no rewrite rule for {head!r}: run it or list it in NOT_RUN")


# ---------------------------------------------------------------------------------------------


def test_every_documented_command_is_run_or_excused() -> None:
    commands = _expand_ellipsis(doc_commands()) + example_commands()
    assert any(c.text.startswith("agentload run") for c in commands)
    assert any(c.source.startswith("examples/") for c in commands)
    for c in commands:
        if excuse(c.text) is None:
            rewrite(c.text, "http://127.0.0.1:1")  # a rule exists for it
            assert not re.search(r"(^|\s)\.\.\.(\s|$)", c.text), f"{c.source}: unexpanded '...'"
    used = {p for p, _ in NOT_RUN if any(re.match(p, c.text) for c in commands)}
    assert used == {p for p, _ in NOT_RUN}, "NOT_RUN lists commands no page shows any more"


def test_rewrite_shortens_and_points_at_the_simulator() -> None:
    argv = rewrite(
        'agentload run --host "$TARGET" --profile mixed --users 32 --duration 10m --workers 4 '
        '--label commit="${{ github.sha }}"',
        "http://127.0.0.1:9",
    )
    assert argv[1:] == ["-m", "workload.cli", "run", "--host", "http://127.0.0.1:9",
                        "--profile", "mixed", "--users", "2", "--duration", "10s",
                        "--workers", "2", "--label", "commit=ci-value"]  # fmt: skip
    assert rewrite("agentload run", "x")[3:] == ["run", "--duration", "10s", "--users", "2",
                                                  "--sim-preset", "fast"]  # fmt: skip


def test_a_command_the_shortening_makes_another_is_recognised_and_one_block_is_kept() -> None:
    base = "agentload canary --baseline-cmd 'vllm serve m' --candidate-cmd 'vllm serve m' --profile mixed"
    same = _same_command(rewrite(base, "http://127.0.0.1:9"))
    assert _same_command(rewrite(base + " --blocks 10 --out runs/x", "http://127.0.0.1:9")) == same
    assert _same_command(rewrite(base + " --profile mixed", "http://127.0.0.1:9")) == same
    one = rewrite(base + " --blocks 1", "http://127.0.0.1:9")
    assert one[one.index("--blocks") + 1] == "1" and _same_command(one) != same
    assert _same_command(rewrite(base + " --early-stop", "http://127.0.0.1:9")) != same


def test_the_gate_example_names_classes_of_its_profile() -> None:
    """An SLO for a class the profile lacks fails every run ("has no samples")."""
    from workload.plan.loading import load_profile

    for c in example_commands() + doc_commands():
        words = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "x", c.text))
        if words[:2] != ["agentload", "run"] or "--profile" not in words:
            continue
        classes = set(load_profile(words[words.index("--profile") + 1], []).classes)
        for i, w in enumerate(words):
            if w == "--slo" and "." in words[i + 1].split("=")[0]:
                cls = words[i + 1].split("=")[0].rpartition(".")[0]
                assert cls in classes, f"{c.source}: --slo for class {cls!r}, not in {classes}"


@pytest.fixture(scope="module")
def sim_url():
    from workload.sim.launcher import SimProcess

    sim = SimProcess(preset="fast")
    sim.start()
    try:
        yield sim.url
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory: pytest.TempPathFactory, sim_url: str) -> Path:
    """runs/A and runs/B: two short runs for the compare and report examples."""
    root = tmp_path_factory.mktemp("runs")
    # side by side: every worker waits for this fixture before its first documented command
    procs = {
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workload.cli",
                "run",
                "--host",
                sim_url,
                "--profile",
                "chat",
                "--duration",
                "4s",
                "--users",
                "2",
                "--seed",
                seed,
                "--out",
                str(root / name),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )  # fmt: skip
        for name, seed in (("A", "1"), ("B", "2"))
    }
    try:
        for name, proc in procs.items():
            said, _ = proc.communicate(timeout=TIMEOUT_S)
            assert (root / name / "run.json").exists(), said
    finally:  # a timeout leaves none running (subprocess.run's own kill)
        for proc in procs.values():
            proc.kill()
            proc.wait()
    return root


@pytest.mark.slow
@pytest.mark.parametrize("command", _runnable(), ids=lambda c: c.source)
def test_documented_command_runs(
    command: Command, sim_url: str, finished_runs: Path, tmp_path: Path
) -> None:
    argv = rewrite(command.text, sim_url)
    twin = _twins().get(command.source)
    if twin is not None:
        # shortened, it is the command of `twin`, whose own test runs it
        assert _same_command(argv) == _same_command(rewrite(twin.text, sim_url))
        return
    (tmp_path / "runs").mkdir()
    for name in ("A", "B"):
        (tmp_path / "runs" / name).symlink_to(finished_runs / name)
    for i, a in enumerate(argv[:-1]):
        if a.endswith("-log") and a.startswith("--"):
            (tmp_path / argv[i + 1]).touch()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path, env=env
    )
    said = (
        f"{command.source}: {command.text}\nran: {shlex.join(argv)}\nexit {p.returncode}\n"
        f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    )
    for log in sorted((tmp_path / "runs").glob("*/*.log")):  # a canary's sides
        said += f"\n--- {log.relative_to(tmp_path)}:\n{log.read_text(errors='replace')[-2000:]}"
    if argv[3:4] in (["compare"], ["canary"]):
        assert p.returncode in (0, 3, 4), said  # pass, regression, inconclusive
    elif (argv[3:4] == ["run"] or argv[1:3] == ["-m", "locust"]) and p.returncode == 3:
        _only_short_run_slo_misses(argv, p.stdout, tmp_path, said)
    elif argv[3:4] == ["capacity"] and p.returncode == 4:
        # inconclusive: the shortened steps (8 s) held no sample of an SLO (agent sessions
        # with tool pauses finish no session in 8 s); the search said so and stopped
        assert "was inconclusive" in p.stdout and "had no samples" in p.stdout, said
    elif argv[3:4] == ["capacity"] and p.returncode == 3:
        _only_too_few_sample_capacity_fails(p.stdout, tmp_path, said)
    else:
        assert p.returncode == 0, said


def _only_too_few_sample_capacity_fails(stdout: str, cwd: Path, said: str) -> None:
    """Exit 3 from a shortened capacity search is fine when every failing step failed only
    quantile SLOs that it judged on too few samples (8 s steps hold a handful of requests, so
    one host stall is the step's p95; the table marks such steps "(few)")."""
    m = re.search(r"agentload: capacity.json and capacity.html in (\S+)", stdout)
    assert m, said
    report = json.loads((cwd / m.group(1) / "capacity.json").read_text())
    failing = [s for s in report["steps"] if not s["slo_met"]]
    assert failing, said
    for step in failing:
        assert step["too_few_samples"] and step["error_ratio"] <= step["max_error_ratio"], said
        for r in step["slo_results"]:
            if not r["passed"]:  # "unsettled": a quantile whose samples do not settle it
                assert f"{r['class_name']}.{r['metric']}" in step["unsettled"], said


def _only_short_run_slo_misses(argv: list[str], stdout: str, cwd: Path, said: str) -> None:
    """Exit 3 from a shortened run is fine when every failed SLO only lacked samples
    for a class of the run's profile."""
    from workload.plan.loading import load_profile

    m = re.search(r"agentload: artifacts in (\S+)", stdout)
    assert m, said
    run = json.loads((cwd / m.group(1) / "run.json").read_text())
    flag = "--profile" if "--profile" in argv else "--agent-profile"
    profile = argv[argv.index(flag) + 1] if flag in argv else "quickstart"
    classes = set(load_profile(profile, []).classes) | {"*"}  # "*": overall
    failed = [r for r in run["slo_results"] if not r["passed"]]
    assert failed, said
    for r in failed:
        assert r["class_name"] in classes and r["observed"] is None, f"{r}\n{said}"
