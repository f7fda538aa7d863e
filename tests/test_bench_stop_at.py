"""The campaign scripts' `--stop-at HH:MM`: the next time the UTC clock reads it, so a
campaign started before midnight with a stop after midnight runs (it used to start nothing)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def next_utc(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from _stop_at import next_utc

    return next_utc


NOW = dt.datetime(2026, 12, 7, 22, 50, 30, tzinfo=dt.UTC)


def test_a_later_time_today_is_today(next_utc):
    assert next_utc("23:05", NOW) == dt.datetime(2026, 12, 7, 23, 5, tzinfo=dt.UTC)


def test_a_time_already_past_today_is_tomorrow(next_utc):
    assert next_utc("01:15", NOW) == dt.datetime(2026, 12, 8, 1, 15, tzinfo=dt.UTC)
    assert next_utc("22:50", NOW) == dt.datetime(2026, 12, 8, 22, 50, tzinfo=dt.UTC)


@pytest.mark.parametrize("bad", ["1h", "25:00", "01:75", ""])
def test_a_malformed_time_is_one_clear_line(next_utc, bad):
    with pytest.raises(SystemExit, match="expected HH:MM in UTC"):
        next_utc(bad, NOW)
