"""The documentation: README stays the door, docs/ builds as a site with no broken link.

The site build needs mkdocs (the `dev` extra). Without it the build test skips locally,
but fails when the environment variable CI is set: CI must never skip the docs check.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 300


def _nav_pages(nav) -> list[str]:
    """Every page file named in a mkdocs `nav` (nested sections included)."""
    out: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            out += _nav_pages(value)
        elif isinstance(value, str) and not re.match(r"^[a-z]+://", value):
            out.append(value)
    return out


def _config() -> dict:
    # mkdocs.yml may carry !ENV / !relative tags in future; plain keys are all we read.
    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)


def test_docs_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        if "CI" in os.environ:
            pytest.fail(
                "mkdocs is not installed, and CI must build the docs: pip install -e '.[dev]'"
            )
        pytest.skip("mkdocs not installed (pip install -e '.[dev]'); CI builds the docs")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"mkdocs build --strict failed:\n{out.stdout}\n{out.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav_and_every_nav_page_exists():
    nav = _nav_pages(_config()["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(pages) - set(nav)) == [], "docs pages missing from nav in mkdocs.yml"
    assert sorted(set(nav) - set(pages)) == [], "nav entries in mkdocs.yml without a page"
    assert len(nav) == len(set(nav)), "a page is listed twice in nav"


def test_readme_stays_the_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < README_MAX_LINES, (
        f"README.md has grown past {README_MAX_LINES} lines: move detail into a docs/ page"
    )
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    # .ci/run installs and tests exactly as README says: one install command, one test command.
    assert 'pip install -e ".[dev]"\n' in blocks
    assert "pytest\n" in blocks


def test_readme_links_point_at_files_that_exist():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"^[a-z]+:", t)]
    assert local, "README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert missing == [], f"README links to missing files: {missing}"
