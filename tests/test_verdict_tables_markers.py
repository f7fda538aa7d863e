"""bench/verdict_tables.py rewrites the tables between their markers in the verdict-quality
page; a marker it cannot serve stops `--write`/`--check` with one line instead of leaving
that table as it was (stale, and `--check` passing)."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def vt(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import verdict_tables

    monkeypatch.setattr(verdict_tables, "TABLES", {"a-1": lambda: "| new |", "b": lambda: "B"})
    return verdict_tables


def test_each_table_is_rebuilt_between_its_markers(vt):
    page = "x\n<!-- table:a-1 -->\n| old |\n| old |\n<!-- /table -->\ny\n<!-- table:b -->\n<!-- /table -->\n"
    assert vt.rewrite(page) == (
        "x\n<!-- table:a-1 -->\n| new |\n<!-- /table -->\ny\n<!-- table:b -->\nB\n<!-- /table -->\n"
    )


@pytest.mark.parametrize("name", ["nope", "A-1", "a_1"])
def test_a_marker_naming_no_table_is_one_line(vt, name):
    page = f"<!-- table:a-1 -->\n<!-- /table -->\n<!-- table:{name} -->\n| old |\n<!-- /table -->\n"
    with pytest.raises(SystemExit, match=f"no table named {name} "):
        vt.rewrite(page)


def test_a_table_without_its_end_marker_is_one_line(vt):
    page = "<!-- table:a-1 -->\n| old |\n<!-- table:b -->\nB\n<!-- /table -->\n"
    with pytest.raises(SystemExit, match="2 `<!-- table:NAME -->` markers but 1 tables closed"):
        vt.rewrite(page)


def test_the_command_says_it_without_a_traceback(vt, monkeypatch, tmp_path, capsys):
    doc = tmp_path / "page.md"
    doc.write_text("<!-- table:typo -->\n<!-- /table -->\n")
    monkeypatch.setattr(vt, "DOC", doc)
    with pytest.raises(SystemExit) as e:
        vt.main(["--check"])
    assert "page.md: no table named typo" in str(e.value)
