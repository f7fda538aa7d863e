"""Profile files and problem lines for the profile tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from workload.plan.loading import ProfileError, load_profile

ROOT = Path(__file__).resolve().parents[1]
BUILTINS = ["chat", "coding-agent", "mixed", "quickstart", "research-agent"]


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def problems(path_or_name: str, overrides=()) -> list[str]:
    with pytest.raises(ProfileError) as e:
        load_profile(path_or_name, list(overrides))
    return e.value.problems
