"""Analysis at scale: the fast paths give the results of the plain ones, to the last digit.

* boot_quantiles' windowed search finds the same index as a cumulative sum over all values;
* bootstrap weights drawn in row chunks are the one big draw they replace;
* a comparison of a small pair with everything in it (paired sessions, blocks, tool calls,
  spec decode, goodput, cancelled rows, unpaired sessions) matches a golden file written
  by the row-dict implementation this replaced (tests/fixtures/compare_golden.json). When
  the equivalence rule ("inconclusive") and the class rule for between-instance metrics
  (class rows shown, the overall row gates) landed, only what follows from gating was
  rewritten (verdict, gated, note, and the intervals through the Bonferroni divisor):
  every value, standard error and count is still the row-dict implementation's. So too
  when the Bonferroni split was weighted (the TPOT tail rows across blocks share half of
  alpha): only the intervals and verdicts of the block pair moved. TPOT p90 rows, added
  later, are checked to lie between the file's p50 and p95.
"""

from __future__ import annotations

import json
import random
import sys
import threading
from pathlib import Path

import numpy as np
import orjson
import pytest

from workload.analyze import bootstrap as B
from workload.analyze.table import Pair, Rows
from workload.analyze.verdict import compare_runs

GOLDEN = Path(__file__).parent / "fixtures" / "compare_golden.json"


def _scope(n_a: int, n_b: int, common: int) -> B.Scope:
    ids_a = [f"s{i:05d}" for i in range(n_a)]
    ids_b = [f"s{i:05d}" for i in range(n_a - common, n_a - common + n_b)]
    pair = Pair(([], []), ([{"session_id": s} for s in ids_a], [{"session_id": s} for s in ids_b]))
    empty = [Rows(t) for t in pair.req]
    return B.Scope(empty[0], empty[1], Rows(pair.sess[0]), Rows(pair.sess[1]), True, pair.n_ids)


def test_chunked_weights_are_the_one_big_draw(monkeypatch):
    sc = _scope(3000, 2800, 2500)
    n_boot = 200
    ref_rng = np.random.default_rng(3)

    def draw(n):
        idx = ref_rng.integers(0, n, size=(n_boot, n)) + (np.arange(n_boot) * n)[:, None]
        return np.bincount(idx.ravel(), minlength=n_boot * n).reshape(n_boot, n)

    c = draw(sc.n_common)
    ref = np.hstack([c, draw(sc.n_only_a)]), np.hstack([c, draw(sc.n_only_b)])
    monkeypatch.setattr(B, "DRAW_CHUNK", 7_777)  # several chunks of odd sizes
    got = sc.weights(np.random.default_rng(3), n_boot)
    assert all(np.array_equal(x, y) for x, y in zip(ref, got, strict=True))


@pytest.mark.parametrize("trial", range(12))
def test_windowed_quantiles_match_the_full_sum(trial, monkeypatch):
    rng = np.random.default_rng(trial)
    n_cl = int(rng.integers(2000, 6000))
    per = 1 + trial % 7
    cl = np.repeat(np.arange(n_cl), per)
    rng.shuffle(cl)
    n = len(cl)
    vals = np.round(rng.lognormal(0, 1, n), int(rng.integers(0, 3)))  # ties
    W = rng.multinomial(n_cl, np.full(n_cl, 1 / n_cl), size=150).astype(np.int32)
    if trial % 2:
        W = W.astype(np.float32)  # as Scope.weights draws them: window sums in float32
    if trial % 3 == 0:
        W[:, : n_cl // 2] = 0  # half the clusters never drawn
    if trial % 4 == 0:
        W[7] = 0  # an empty row: NaN
    if trial % 5 == 0:
        W[3, cl[np.argsort(vals)[: n // 10]]] = 60  # a row far from the others: the window widens
    qs = [0.5, 0.95, 0.99, 0.01]
    order = np.argsort(vals, kind="stable")
    ref = B._boot_quantiles_full(vals[order], cl[order], W, qs)
    monkeypatch.setattr(B, "SMALL_N", 0)
    if n > 12_000:  # large enough that the windows are used: the full sum must not run

        def no_full(*a):
            raise AssertionError("windowed search not used")

        monkeypatch.setattr(B, "_boot_quantiles_full", no_full)
    assert np.array_equal(ref, B.boot_quantiles(vals, cl, W, qs), equal_nan=True)


def test_wdot_is_numpys_product():
    rng = np.random.default_rng(5)
    W = rng.integers(0, 5, size=(203, 3001)).astype(np.float32)  # rows not a block multiple
    for v in (
        rng.integers(0, 10**6, 3001).astype(float),  # integers: blocks of rows, exact
        rng.random(3001) * 100,  # fractions: numpy's own product
        np.full(3001, 2.0**50),  # sums could pass 2**53: numpy's own product
    ):
        assert np.array_equal(B.wdot(W, v), W @ v)


def test_block_reader_gives_the_line_reader_rows(tmp_path, monkeypatch):
    from workload.measure import artifacts

    lines = [b'{"a": 1}', b"[1]", b"", b"{", b'  {"b": 2}  ', b"\xff", b'{"c": 3}\r', b"null"] * 7
    p = tmp_path / "requests.jsonl"
    p.write_bytes(b"\n".join(lines) + b'\n{"torn": ')
    for size in (1, 7, 64, 1 << 20):
        monkeypatch.setattr(artifacts, "JSONL_CHUNK_BYTES", size)
        for objects in (False, True):
            s1: list[str] = []
            s2: list[str] = []
            want = list(artifacts.iter_jsonl(p, s1, objects=objects))
            got = [r for rows in artifacts.iter_jsonl_chunks(p, s2, objects=objects) for r in rows]
            assert (got, s2) == (want, s1)


def write_pair(root: Path) -> tuple[Path, Path]:
    """Two small interleaved (4-block) runs with every kind of row the estimates read."""
    rnd = random.Random(11)
    run = {"run_id": "golden", "seed": 1, "duration_s": 120.0, "profile": {"name": "p"}}
    for side, slow in (("a", 1.0), ("b", 1.06)):
        for blk in range(4):
            d = root / side / f"block-{blk}"
            d.mkdir(parents=True)
            reqs, sess = [], []
            for s in range(60):
                sid = f"{'agent' if s % 3 else 'chat'}-{s:03d}"
                if rnd.random() < 0.03:
                    sid += f"-{side}"  # a session only one side has
                cls = "agent" if s % 3 else "chat"
                for step in range(1 + s % 7):
                    x = rnd.random()
                    r = {"session_id": sid, "user_class": cls, "step": step,
                         "t_start": 1000.0 + s + step / 10, "status": "ok",
                         "ttft_ms": round(rnd.lognormvariate(5, 0.4) * slow, 3),
                         "tpot_ms": round(rnd.lognormvariate(3, 0.2) * slow, 3),
                         "e2e_ms": round(rnd.lognormvariate(7, 0.3) * slow, 3),
                         "itl_ms": {"mean": round(rnd.lognormvariate(3, 0.2) * slow, 3)},
                         "completion_tokens": rnd.randint(10, 200),
                         "prompt_tokens": rnd.randint(100, 4000),
                         "cached_tokens": rnd.choice([None, 0, 50, 1000]),
                         "tool_calls": [{"name": "t"}] if x < 0.3 else [],
                         "stream": x < 0.9,
                         "slo_met": None if x > 0.95 else x < 0.8}  # fmt: skip
                    if x < 0.03:
                        r.update(status="error", error_kind="http_status", ttft_ms=None)
                    elif x < 0.05:
                        r.update(status="cancelled")
                    if rnd.random() < 0.5:
                        r["spec_decode"] = {
                            "num_draft_tokens": rnd.randint(0, 30),
                            "num_accepted_draft_tokens": rnd.randint(0, 20),
                            "mean_acceptance_length": round(rnd.uniform(1, 3) / slow, 3),
                        }
                    reqs.append(r)
                sess.append({"session_id": sid, "user_class": cls, "steps_done": 1 + s % 7,
                             "outcome": rnd.choice(["completed"] * 8 + ["tool_loop_failure",
                                                    "cancelled", "failed", None]),
                             "slo_met": rnd.random() < 0.7})  # fmt: skip
            (d / "requests.jsonl").write_bytes(b"\n".join(map(orjson.dumps, reqs)) + b"\n")
            (d / "sessions.jsonl").write_bytes(b"\n".join(map(orjson.dumps, sess)) + b"\n")
            (d / "run.json").write_text(json.dumps(run))
    return root / "a", root / "b"


def _digest(c) -> dict:
    def r(v):
        if isinstance(v, float):
            return float(f"{v:.12g}")
        if isinstance(v, (list, tuple)):
            return [r(x) for x in v]
        return v

    keep = ("scope", "metric", "a", "b", "n_a", "n_b", "change", "se", "ci", "verdict", "gated",
            "method", "blocks", "counts", "p_value", "note", "same_as", "paired_share")  # fmt: skip
    return {
        "verdict": c.verdict,
        "gated": c.gated_count,
        "where": c.where,
        "metrics": [{k: r(m.to_dict()[k]) for k in keep} for m in c.metrics],
    }


@pytest.mark.parametrize("blocks", [True, False])
def test_comparison_matches_the_golden_file(tmp_path, blocks):
    a, b = write_pair(tmp_path)
    if not blocks:  # the same rows as one-block runs
        for side in (a, b):
            one = side.with_name(side.name + "1")
            one.mkdir()
            for kind in ("requests", "sessions"):
                parts = [(p / f"{kind}.jsonl").read_bytes() for p in sorted(side.glob("block-*"))]
                (one / f"{kind}.jsonl").write_bytes(b"".join(parts))
            (one / "run.json").write_text((side / "block-0" / "run.json").read_text())
        a, b = a.with_name("a1"), b.with_name("b1")
    got = _digest(compare_runs(a, b, n_boot=200))
    want = json.loads(GOLDEN.read_text())["blocks" if blocks else "one"]
    # TPOT p90 came after the golden file: its rows are checked against p50 / p95 of the
    # same scope, every other row against the file.
    p90 = [m for m in got["metrics"] if m["metric"] == "tpot_p90"]
    got["metrics"] = [m for m in got["metrics"] if m["metric"] != "tpot_p90"]
    assert got == want
    by = {(m["scope"], m["metric"]): m for m in want["metrics"]}
    assert {m["scope"] for m in p90} == {  # overall and classes, not steps or slices
        m["scope"]
        for m in want["metrics"]
        if m["metric"] == "tpot_p95" and m["scope"].split(":")[0] in ("overall", "class")
    }
    for m in p90:
        lo, hi = by[(m["scope"], "tpot_p50")], by[(m["scope"], "tpot_p95")]
        for side in ("a", "b"):
            if m[side] is not None:
                assert lo[side] <= m[side] <= hi[side]
        assert not m["gated"]  # shown unless a profile or flag sets its threshold


def test_side_tables_summed_while_reading_match_the_rows(tmp_path):
    """Error kinds, acceptance histograms and tool-loop examples from the columns = from rows."""
    from workload.analyze.rundata import load_run
    from workload.analyze.serverinfo import class_histogram, spec_histogram
    from workload.analyze.traffic import tool_loop_examples

    rnd = random.Random(3)
    for blk in range(2):
        d = tmp_path / "r" / f"block-{blk}"
        d.mkdir(parents=True)
        rows = []
        for i in range(400):
            x = rnd.random()
            r = {"session_id": f"s{i % 40}", "user_class": rnd.choice(["a", "b", None]),
                 "step": i % 6, "t_start": float(rnd.randint(0, 50)), "status": "ok",
                 "request_id": f"{blk}-{i}"}  # fmt: skip
            if x < 0.2:
                r.update(status=rnd.choice(["error", "cancelled"]),
                         error_kind=rnd.choice(["timeout", "tool_loop", None]))  # fmt: skip
            elif x < 0.3:
                r["tool_loop_failure"] = "bad args"
                r["tool_calls"] = [{"name": "t"}]
            if rnd.random() < 0.5:
                r["spec_decode"] = {"acceptance_histogram": [rnd.randint(0, 3)] * rnd.randint(1, 4)}
            rows.append(r)
        (d / "requests.jsonl").write_bytes(b"\n".join(map(orjson.dumps, rows)) + b"\n")
        (d / "run.json").write_text("{}")
    data = load_run(tmp_path / "r")
    assert tool_loop_examples(data.req_cols.loop_rows()) == tool_loop_examples(data.requests)
    for cls in ("a", "b", "", None):
        assert class_histogram(data.req_cols, cls) == spec_histogram(data.requests, cls)
    want: dict = {}
    for r in data.requests:
        if r.get("status", "ok") != "ok":
            k = r.get("error_kind") or r.get("status") or "unknown"
            want[k] = want.get(k, 0) + 1
    from workload.analyze.serverinfo import error_kinds

    got = error_kinds(data, [("overall", None)])["overall"]
    assert list(got.items()) == list(want.items())


def test_two_runs_read_at_once_are_the_runs_read_in_turn(tmp_path, monkeypatch):
    """load_pair's second process gives the columns load_run gives, and A's error first."""
    from workload.analyze import rundata
    from workload.errors import CompareError

    a, b = write_pair(tmp_path)
    monkeypatch.setattr(rundata, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(rundata, "_spawn_safe", lambda: True)  # pytest's console script
    pools = []

    class Pool(rundata.ProcessPoolExecutor):
        def __init__(self, *args, **kw):
            pools.append(self)
            super().__init__(*args, **kw)

    monkeypatch.setattr(rundata, "ProcessPoolExecutor", Pool)
    got = rundata.load_pair(a, b)
    assert len(pools) == 1  # A was read in the second process
    for g, path in zip(got, (a, b), strict=True):
        want = rundata.load_run(path)
        assert (g.run, g.block_durations, g.skipped) == (
            want.run,
            want.block_durations,
            want.skipped,
        )
        for gc_, wc in ((g.req_cols, want.req_cols), (g.sess_cols, want.sess_cols)):
            assert (gc_.ids, gc_.names, gc_.error_counts, gc_.loops) == (wc.ids, wc.names, wc.error_counts, wc.loops)  # fmt: skip
            assert gc_.cols.keys() == wc.cols.keys()
            assert all(np.array_equal(gc_.cols[k], wc.cols[k], equal_nan=True) for k in wc.cols)
    (a / "block-0" / "run.json").write_text("{")
    (b / "block-0" / "run.json").write_text("{")
    with pytest.raises(CompareError, match="/a/block-0/run.json"):
        rundata.load_pair(a, b)


@pytest.mark.parametrize(
    "spec_name, file, safe",
    [
        ("workload.cli.__main__", None, True),  # python -m workload.cli
        ("pytest.__main__", None, True),
        (None, "/venv/bin/agentload", True),  # the console script (guarded)
        (None, None, True),  # interactive
        (None, "/home/me/nightly_compare.py", False),  # a user's script: maybe unguarded
    ],
)
def test_a_second_process_only_where_spawn_cannot_rerun_the_callers_script(
    monkeypatch, spec_name, file, safe
):
    import types

    from workload.analyze import rundata

    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=spec_name) if spec_name else None
    if file:
        main.__file__ = file
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert rundata._spawn_safe() is safe


def test_weights_drawn_ahead_are_the_weights_drawn_in_turn():
    """weights_ahead's thread draws every scope from the one stream, in order."""
    scopes = [_scope(300 + 50 * i, 280, 250 * (i % 2)) for i in range(5)]
    ref_rng = np.random.default_rng(9)
    want = [sc.weights(ref_rng, 120) for sc in scopes]
    rng = np.random.default_rng(9)
    got = list(B.weights_ahead(scopes, rng, 120))
    assert len(got) == len(want)
    for (ga, gb), (wa, wb) in zip(got, want, strict=True):
        assert np.array_equal(ga, wa) and np.array_equal(gb, wb)
    assert rng.integers(0, 2**62) == ref_rng.integers(0, 2**62)  # the stream goes on alike
    half = B.weights_ahead(scopes, np.random.default_rng(9), 120)
    next(half)
    half.close()  # a caller that stops early leaves no thread behind
    assert not [t for t in threading.enumerate() if t.name == "bootstrap-draws"]


def test_rows_sorted_from_the_tables_one_sort_are_a_stable_sort_of_them():
    rng = np.random.default_rng(4)
    n = 5000
    reqs = [{"session_id": f"s{i % 300}", "step": i % 9, "status": "ok",
             "ttft_ms": None if i % 17 == 0 else float(rng.integers(0, 40)) / 4}
            for i in range(n)]  # fmt: skip
    t = Pair((reqs, []), ([], [])).req[0]
    v = t.lat["ttft"]
    for idx in (
        np.arange(n),
        np.flatnonzero(rng.random(n) < 0.5),
        np.arange(n)[::-1],
        np.arange(40),
    ):
        r = Rows(t, idx)
        keep = ~np.isnan(r.lat("ttft")) & (rng.random(len(idx)) < 0.8)
        want = idx[keep][np.argsort(v[idx[keep]], kind="stable")]
        assert np.array_equal(r.sorted_by("ttft", keep), want)
