"""Real traces: readers, bad lines, burst spreading, block prompts, hit ratios, fit, export, CLI."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

from workload.errors import TraceError
from workload.measure.records import RequestRecord
from workload.plan.loading import load_profile, validate_profile
from workload.plan.sessions import SessionPlanner
from workload.plan.tokens import get_tokenizer
from workload.plan.traces import (
    BlockSynth,
    TraceRequest,
    detect_format,
    detect_quantum,
    export_run,
    fit_profile,
    hit_ratio,
    parse_azure_timestamp,
    read_trace,
    schedule,
    summarize,
    write_trace,
)

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "traces"
MOONCAKE = FIX / "mooncake_conversation_head40.jsonl"
AZURE_CONV = FIX / "azure2023_conv_head100.csv"
AZURE_CODE = FIX / "azure2023_code_head100.csv"
# CI keeps a read-only shared/ beside the clone; AGENTLOAD_TRACES_DIR points elsewhere.
SHARED = Path(os.environ.get("AGENTLOAD_TRACES_DIR") or ROOT.parent / "shared" / "data" / "traces")


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer("tiktoken:cl100k_base")


@pytest.fixture(scope="module")
def synth(tok):
    return BlockSynth(tok, seed=3)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _mc(ts: int, n: int, out: int, ids: list[int]) -> str:
    return orjson.dumps(
        {"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids}
    ).decode()


# ------------------------------------------------------------------ block prompts
def test_equal_hash_ids_give_identical_blocks_and_nothing_precedes_them(synth):
    a = synth.prompt([1, 2, 3], 1200)
    b = synth.prompt([1, 2, 9], 1100)
    one = synth.prompt([1], 512)
    two = synth.prompt([1, 2], 1024)
    assert a.startswith(two) and b.startswith(two) and two.startswith(one)
    assert synth.prompt([2], 512) == two[len(one) :]  # block 2 is the same wherever it sits
    assert a[len(two) :] != b[len(two) :]


def test_short_last_block_is_a_prefix_of_the_same_block_elsewhere(synth):
    short = synth.prompt([5, 7], 512 + 100)
    full = synth.prompt([4, 7, 8], 512 * 2 + 1)
    block7_full = full[len(synth.prompt([4], 512)) :][: len(synth.prompt([7], 512))]
    assert block7_full == synth.prompt([7], 512)
    assert synth.prompt([7], 512).startswith(short[len(synth.prompt([5], 512)) :])


def test_seed_changes_the_blocks(tok, synth):
    assert BlockSynth(tok, seed=4).prompt([1], 512) != synth.prompt([1], 512)


def test_prompts_tokenise_to_exactly_the_trace_input_length(tok, synth):
    trace = read_trace(MOONCAKE)
    for r in trace.requests[:12]:
        text = synth.request_prompt(r)
        ids = tok.encode(text)
        assert len(ids) == r.input_tokens
        assert ids == synth.token_ids(r.hash_ids, r.input_tokens)  # decode/encode round-trips


def test_block_count_must_match_input_length(synth):
    with pytest.raises(ValueError, match="need 2 blocks"):
        synth.prompt([1], 600)


# ------------------------------------------------------------------ readers
def test_mooncake_fixture_reads_with_hash_ids():
    t = read_trace(MOONCAKE)
    assert t.format == "mooncake" and len(t.requests) == 40 and not t.bad_lines
    assert t.requests[0].arrival_s == 0.0 and t.requests[0].hash_ids[0] == 0
    assert t.duration_s == pytest.approx(12.0)


def test_bad_lines_are_reported_with_file_and_line_skip_vs_stop(tmp_path):
    f = _write(
        tmp_path / "t.jsonl",
        [
            _mc(0, 600, 10, [0, 1]),
            "{not json",
            _mc(1000, 600, 10, [0]),  # too few hash ids
            "",
            '{"timestamp": 2000, "input_length": 10, "hash_ids": [0]}',  # no output_length
            _mc(3000, 100, 5, [0]),
        ],
    )
    t = read_trace(f, "mooncake", on_bad_line="skip")
    assert len(t.requests) == 2
    assert [b.line for b in t.bad_lines] == [2, 3, 5]
    assert str(t.bad_lines[0]).startswith(f"{f}:2: not valid JSON")
    assert "need ceil(n/512) = 2" in str(t.bad_lines[1])
    assert "output_length" in t.bad_lines[2].reason
    with pytest.raises(TraceError, match=rf"{f}:2: not valid JSON"):
        read_trace(f, on_bad_line="stop")


def test_limit_keeps_the_first_rows():
    assert len(read_trace(MOONCAKE, limit=7).requests) == 7


def test_azure_2023_schema_with_seven_fractional_digits():
    t = read_trace(AZURE_CONV)
    assert t.format == "azure" and len(t.requests) == 100 and not t.bad_lines
    assert parse_azure_timestamp("2023-11-16 18:17:03.9799600") == pytest.approx(
        1700158623.97996, abs=1e-6
    )
    code = read_trace(AZURE_CODE, "azure")
    assert code.requests[1].arrival_s == pytest.approx(0.052, abs=1e-6)
    assert (code.requests[0].input_tokens, code.requests[0].output_tokens) == (4808, 10)


def test_azure_2024_schema_and_bad_rows(tmp_path):
    f = _write(
        tmp_path / "az2024.csv",
        [
            "TIMESTAMP,ContextTokens,GeneratedTokens",
            "2024-05-10 00:00:00.0095180+00:00,2048,28",
            "2024-05-10 00:00:01.5Z,100,5",
            "2024-05-10 00:00:02,7,x",
            "yesterday,1,1",
            "2024-05-10 02:00:03.1234567+02:00,300,30",
        ],
    )
    t = read_trace(f)
    assert t.format == "azure"
    assert [r.arrival_s for r in t.requests] == pytest.approx([0.0, 1.490482, 3.1139387])
    assert [b.line for b in t.bad_lines] == [4, 5]
    assert "GeneratedTokens must be a whole number" in t.bad_lines[0].reason


def test_detection_of_every_format(tmp_path):
    req = RequestRecord(session_id="s1", t_start=100.0, prompt_tokens=50, completion_tokens=5)
    rq = _write(tmp_path / "requests.jsonl", [orjson.dumps(req.to_json()).decode()])
    ours = tmp_path / "ours.jsonl"
    write_trace(read_trace(MOONCAKE, limit=3), ours)
    assert detect_format(MOONCAKE) == "mooncake"
    assert detect_format(AZURE_CONV) == "azure"
    assert detect_format(rq) == "requests"
    assert detect_format(tmp_path) == "requests"  # a run directory
    assert detect_format(ours) == "agentload"
    with pytest.raises(TraceError, match="cannot detect"):
        detect_format(_write(tmp_path / "x.txt", ["hello"]))


def test_our_jsonl_round_trips(tmp_path):
    t = read_trace(MOONCAKE)
    write_trace(t, tmp_path / "o.jsonl")
    assert read_trace(tmp_path / "o.jsonl").requests == t.requests


def test_requests_jsonl_of_a_run_dir(tmp_path):
    rows = [
        RequestRecord(session_id="a", step=1, t_start=10.0, prompt_tokens=100, completion_tokens=9),
        RequestRecord(
            session_id="a", step=2, t_start=12.5, prompt_tokens=150, completion_tokens=None
        ),
        RequestRecord(session_id="b", t_start=11.0, status="error", error_kind="connect"),
    ]
    _write(tmp_path / "requests-1.jsonl", [orjson.dumps(r.to_json()).decode() for r in rows])
    t = read_trace(tmp_path)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens, r.session) for r in t.requests] == [
        (0.0, 100, 9, "a"),
        (2.5, 150, 0, "a"),
    ]
    assert len(t.bad_lines) == 1 and "no prompt_tokens" in str(t.bad_lines[0])


# ------------------------------------------------------------------ timing
def test_quantised_bursts_spread_evenly_and_speedup():
    t = read_trace(MOONCAKE)
    assert detect_quantum([r.arrival_s for r in t.requests]) == 3.0
    s = schedule(t)
    first = [r.arrival_s for r in s if r.arrival_s < 3.0]
    n = len(first)
    assert first == pytest.approx([k * 3.0 / n for k in range(n)])
    assert schedule(t) == s  # deterministic
    fast = schedule(t, speedup=2.0)
    assert [r.arrival_s for r in fast] == pytest.approx([r.arrival_s / 2 for r in s])
    assert [r.arrival_s for r in schedule(t, quantum_s=0)] == [r.arrival_s for r in t.requests]


def test_no_quantum_in_continuous_arrivals():
    assert detect_quantum([r.arrival_s for r in read_trace(AZURE_CONV).requests]) is None


# ------------------------------------------------------------------ hit ratio
def test_hit_ratio_infinite_and_lru():
    reqs = [
        TraceRequest(0, 1024, 1, (0, 1)),
        TraceRequest(1, 1500, 1, (0, 1, 2)),
        TraceRequest(2, 512, 1, (5,)),
        TraceRequest(3, 1024, 1, (0, 3)),
    ]
    h = hit_ratio(reqs)
    assert (h.blocks, h.hit_blocks) == (8, 3)
    assert h.hit_tokens == 1024 + 512
    lru = hit_ratio(reqs, capacity_blocks=1)
    assert lru.hit_blocks == 0


def test_full_mooncake_trace_reproduces_the_stats_figures():
    full = SHARED / "mooncake" / "conversation_trace.jsonl"
    if not full.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{full} is missing on CI")
        pytest.skip("shared traces not present")
    t = read_trace(full)
    assert len(t.requests) == 12031 and not t.bad_lines
    h = hit_ratio(t)
    assert round(h.ratio, 4) == 0.3664  # STATS: 36.6 % of blocks
    assert round(h.token_ratio, 4) == 0.3736
    assert round(hit_ratio(t, capacity_blocks=1_000_000 // 512).ratio, 4) == 0.0532


# ------------------------------------------------------------------ fit
def test_fit_mooncake_validates_with_a_shared_prefix():
    t = read_trace(MOONCAKE)
    raw = fit_profile(t)
    prof = validate_profile(raw)
    c = prof.classes["trace"]
    assert c.system_prompt.tokens == 512 and c.system_prompt.share == "global"
    s = summarize(t)
    assert raw["run"]["users"] / c.think_time_s.mean == pytest.approx(s["rate_rps"], rel=0.01)


def test_fit_azure_validates_and_matches_sizes():
    t = read_trace(AZURE_CONV)
    prof = validate_profile(yaml.safe_load(yaml.safe_dump(fit_profile(t))))
    c = prof.classes["trace"]
    assert c.system_prompt.tokens == 0
    assert c.user_turn.min == min(r.input_tokens for r in t.requests)
    assert c.output.tokens.max == max(r.output_tokens for r in t.requests)


# ------------------------------------------------------------------ export
def _make_run(tmp_path: Path, tok, tamper: bool = False) -> Path:
    prof = load_profile("quickstart")
    planner = SessionPlanner(prof, tok, model="m", max_model_len=None, seed=5)
    rows, t = [], 1000.0
    for u in range(2):
        for s in range(2):
            sess = planner.new_session("agent" if u == 0 else "chat", u, s)
            while (step := sess.next_step()) is not None:
                rec = RequestRecord(
                    session_id=sess.session_id,
                    user_class=sess.class_name,
                    step=step.step,
                    attempt=step.attempt,
                    t_start=t,
                    prompt_tokens=step.prompt_tokens_est,
                    completion_tokens=step.max_tokens,
                    body_hash=hashlib.blake2b(step.body, digest_size=8).hexdigest(),
                )
                t += 0.25
                rows.append(rec)
                sess.observe(rec)
    if tamper:
        rows[1].body_hash = "0" * 16
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "requests.jsonl", [orjson.dumps(r.to_json()).decode() for r in rows])
    (run / "run.json").write_bytes(
        orjson.dumps(
            {
                "profile": prof.model_dump(mode="json"),
                "seed": 5,
                "model": "m",
                "tokenizer": "tiktoken",
                "target": {},
            }
        )
    )
    return run


def test_export_round_trips_through_import_with_prefix_structure(tmp_path, tok):
    run = _make_run(tmp_path, tok)
    n_rows = len((run / "requests.jsonl").read_text().splitlines())
    res = export_run(run, tmp_path / "out.jsonl")
    assert (res.rows, res.verified, res.skipped) == (n_rows, n_rows, [])
    t = read_trace(tmp_path / "out.jsonl")
    assert t.format == "mooncake" and len(t.requests) == n_rows and not t.bad_lines
    by_sess: dict[str, list[TraceRequest]] = {}
    for r in t.requests:
        by_sess.setdefault(r.session, []).append(r)
    agent = [v for k, v in by_sess.items() if k.startswith("agent")]
    assert len({v[0].hash_ids[0] for v in agent}) == 1  # 1000-token global system prompt
    for steps in by_sess.values():
        for a, b in zip(steps, steps[1:], strict=False):
            full = a.input_tokens // 512
            assert b.hash_ids[:full] == a.hash_ids[:full]  # history appends: the prefix stays
    assert hit_ratio(t).ratio > 0.3
    # The export itself round-trips: our JSONL of it gives the same ids.
    write_trace(t, tmp_path / "again.jsonl")
    assert read_trace(tmp_path / "again.jsonl").requests == t.requests


def test_export_skips_rows_whose_body_does_not_match(tmp_path, tok):
    run = _make_run(tmp_path, tok, tamper=True)
    res = export_run(run, tmp_path / "out.jsonl")
    assert res.skipped and f"{run / 'requests.jsonl'}:2: re-planned body differs" in res.skipped[0]


def test_export_refuses_actual_history(tmp_path, tok):
    run = _make_run(tmp_path, tok)
    d = orjson.loads((run / "run.json").read_bytes())
    d["profile"]["history"] = "actual"
    (run / "run.json").write_bytes(orjson.dumps(d))
    with pytest.raises(TraceError, match="scripted history"):
        export_run(run, tmp_path / "o.jsonl")


# ------------------------------------------------------------------ CLI
def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "workload.cli", "trace", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def test_cli_import_fit_export(tmp_path, tok):
    out = tmp_path / "n.jsonl"
    r = _cli("import", "auto", str(MOONCAKE), "-o", str(out), "--limit", "30")
    assert r.returncode == 0, r.stderr
    assert "requests  30" in r.stdout and "ideal hit" in r.stdout and "quantised to 3 s" in r.stdout
    assert len(read_trace(out).requests) == 30
    prof = tmp_path / "p.yaml"
    r = _cli("fit", str(AZURE_CODE), "-o", str(prof))
    assert r.returncode == 0, r.stderr
    validate_profile(yaml.safe_load(prof.read_text()))
    run = _make_run(tmp_path, tok)
    r = _cli("export", str(run), "-o", str(tmp_path / "x.jsonl"))
    assert r.returncode == 0, r.stderr
    assert "0 skipped" in r.stdout


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    from workload.cli.main import main

    bad = _write(tmp_path / "b.jsonl", [_mc(0, 10, 1, [0]), "oops"])
    one = _write(tmp_path / "one.jsonl", [_mc(0, 10, 1, [0])])
    r = _cli("import", "auto", str(bad), "--on-bad-line", "stop")
    assert r.returncode == 2
    assert r.stderr.startswith(f"agentload: error: {bad}:2: not valid JSON")
    assert r.stderr.count("\n") == 1
    assert main(["trace", "import", "auto", str(bad)]) == 0
    cap = capsys.readouterr()
    assert f"skipped {bad}:2:" in cap.err and "bad lines 1" in cap.out
    for args in (
        ("import", "auto", str(tmp_path / "missing.jsonl")),
        ("import", "nope", str(bad)),
        ("import", "auto", str(bad), "--limit", "0"),
        ("fit", str(one), "-o", str(tmp_path / "p.yaml")),  # one request: no arrivals to fit
        ("export", str(tmp_path), "-o", str(tmp_path / "o.jsonl")),
    ):
        assert main(["trace", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("agentload: error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("fmt", ["auto", "mooncake", "azure"])
def test_a_fifo_or_a_device_is_refused_without_reading_it(tmp_path, fmt):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)  # opening it would block until a writer came
    for path, what in ((fifo, "is a FIFO"), (Path("/dev/zero"), "is a device")):
        with pytest.raises(TraceError, match=what):
            read_trace(path, fmt)


def test_a_trace_larger_than_the_cap_is_refused_before_reading(tmp_path, monkeypatch):
    import workload.plan.traces._read as reader

    big = tmp_path / "big.jsonl"
    big.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n' * 100)
    monkeypatch.setattr(reader, "MAX_TRACE_BYTES", 1 << 10)
    with pytest.raises(TraceError, match="larger than the"):
        read_trace(big)
