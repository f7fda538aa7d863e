"""A run directory replayed as a trace keeps the run's prefix reuse (issue 30, item 5)."""

from __future__ import annotations

import orjson
import pytest

from tests.test_traces import _make_run
from workload.errors import TraceError
from workload.plan.tokens import get_tokenizer
from workload.plan.traces import hit_ratio, read_trace, read_trace_keeping_reuse
from workload.run.spec import read_run_trace


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer("tiktoken:cl100k_base")


def test_a_run_directory_replays_with_its_block_structure(tmp_path, tok):
    run = _make_run(tmp_path, tok)
    plain = read_trace(run)
    assert not plain.has_hash_ids  # the records alone share nothing
    t = read_trace_keeping_reuse(run)
    assert t.format == "requests" and t.has_hash_ids and not t.bad_lines
    assert len(t.requests) == len(plain.requests)
    assert t.requests[0].arrival_s == 0.0
    assert [r.arrival_s for r in t.requests] == sorted(r.arrival_s for r in t.requests)
    assert hit_ratio(t).ratio > 0.3 and hit_ratio(plain).ratio == 0.0
    assert t.reuse.startswith("kept: prompts re-planned from run.json")
    # what `agentload run --trace runs/A` reads (every process: the CLI, Locust, workers)
    assert read_run_trace(str(run), "auto", None, "skip").has_hash_ids
    assert len(read_trace_keeping_reuse(run, limit=3).requests) == 3


def test_a_run_that_cannot_be_replanned_says_why_it_shares_nothing(tmp_path, tok):
    run = _make_run(tmp_path, tok)
    d = orjson.loads((run / "run.json").read_bytes())
    d["profile"]["history"] = "actual"
    (run / "run.json").write_bytes(orjson.dumps(d))
    t = read_trace_keeping_reuse(run)
    assert not t.has_hash_ids and len(t.requests) == len(read_trace(run).requests)
    assert t.reuse.startswith("none: the prompts cannot be rebuilt") and "actual" in t.reuse


def test_a_row_that_does_not_replan_is_a_bad_line(tmp_path, tok):
    run = _make_run(tmp_path, tok, tamper=True)
    t = read_trace_keeping_reuse(run)
    assert t.has_hash_ids and t.bad_lines
    assert t.bad_lines[0].line == 2 and "body_hash" in t.bad_lines[0].reason
    with pytest.raises(TraceError, match="requests.jsonl:2"):
        read_trace_keeping_reuse(run, on_bad_line="stop")


def test_a_trace_file_is_read_as_before(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n')
    assert read_trace_keeping_reuse(f) == read_trace(f)
