"""The layers are kept by a tool, not a promise: the import-linter contracts in
pyproject.toml ([tool.importlinter]) fail this test on an upward import, an import
circle between sibling modules or packages, or a Locust import outside workload.locust.
And the graph is one a type checker can follow: `mypy` (pyproject's [tool.mypy]) passes,
strict on the floors that carry a run's data (run, measure, analyze)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    p = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(no_cache=True, no_logo=True))"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_the_contract_names_every_top_level_room():
    # A new room must be placed on a floor, or the layers contract cannot guard it.
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c for c in conf["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    named = {m.strip() for layer in layers["layers"] for m in layer.split("|")}
    rooms = {
        f"workload.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "workload").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name != "__init__.py")
    }
    assert rooms == named, f"unplaced: {sorted(rooms - named)}; missing: {sorted(named - rooms)}"


STRICT_PACKAGES = ["workload.run.*", "workload.measure.*", "workload.analyze.*"]
# What --strict turns on that a module override can hold (mypy takes `strict` itself
# only globally); warn_redundant_casts and warn_unused_configs are global-only.
STRICT_FLAGS = {
    "disallow_any_generics": True, "disallow_subclassing_any": True,
    "disallow_untyped_calls": True, "disallow_untyped_defs": True,
    "disallow_incomplete_defs": True, "check_untyped_defs": True,
    "disallow_untyped_decorators": True, "warn_unused_ignores": True,
    "warn_return_any": True, "implicit_reexport": False, "strict_equality": True,
    "extra_checks": True,
}  # fmt: skip


def test_run_measure_and_analyze_are_checked_strict():
    import tomllib  # Python 3.11+ (the package supports 3.10)

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["files"] == ["workload"]
    assert "ignore_missing_imports" not in conf  # per library, in an override
    (strict,) = [o for o in conf["overrides"] if o["module"] == STRICT_PACKAGES]
    assert {k: strict.get(k) for k in STRICT_FLAGS} == STRICT_FLAGS


def test_run_measure_and_analyze_type_check_strict():
    # Plain `mypy`, as a contributor runs it: pyproject's files and per-module strictness.
    # The cache lives in the temp dir, one per checkout, so a rerun checks only what changed.
    # mypy is in the dev extra: without it this fails (No module named mypy), never skips.
    tag = hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]
    cache = Path(tempfile.gettempdir()) / f"agentload-mypy-{tag}"
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-error-summary"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, "mypy found:\n" + p.stdout[-8000:] + p.stderr[-2000:]
