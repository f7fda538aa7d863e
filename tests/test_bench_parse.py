"""Smoke test of bench/bench_parse.py: the reply it replays is recorded in full. No timing."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench_parse(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_parse

    return bench_parse


@pytest.mark.parametrize("per_read", [1, 3, 200])
def test_every_event_is_recorded_whatever_the_read_size(bench_parse, per_read) -> None:
    evs = bench_parse.events(7)
    reads = [b"".join(evs[i : i + per_read]) for i in range(0, len(evs), per_read)]
    client = bench_parse.Client("http://127.0.0.1:1", transport=bench_parse._Transport(reads))
    req = bench_parse.PreparedRequest("/v1/chat/completions", b"{}", True, "chat", "r")
    rec = client.exchange(req)
    assert rec.ok, rec.error_detail
    assert rec.chunks == 7 and rec.text == "".join(f"t{i} " for i in range(7))
    assert rec.completion_tokens == 7
    assert bench_parse.us_per_event(per_read, requests=2, tokens=7) > 0
