"""The layers are kept by a tool, not a promise: the import-linter contracts in
pyproject.toml ([tool.importlinter]) fail this test on an upward import, an import
circle between sibling modules or packages, or a Locust import outside workload.locust.
And the graph is one a type checker can follow: `mypy` (pyproject's [tool.mypy]) passes,
strict on the floors that carry a run's data (run, measure, analyze)."""

from __future__ import annotations

import ast
import builtins
import hashlib
import re
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


import ast
import builtins
import hashlib
import re
