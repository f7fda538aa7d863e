"""Fail fast before any traffic (one line, exit 2), the exit line's reasons, and a summary that
counts what the JSONL files hold."""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path

import pytest

from workload.cli.main import main
from workload.errors import EXIT_BAD_INPUT, UsageError
from workload.measure import artifacts
from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.slo import SLOResult
from workload.measure.stats import Aggregate
from workload.run import reconcile
from workload.run.checks import check_out_dir, check_workers, run_dir_lock
from workload.run.finalize import EXIT_ERRORS, EXIT_SLO, last_line, outcome_reason
from workload.run.spec import check_slos as check_slo_overrides
from workload.stopping import exit_code_for_signal


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["run", *argv])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--duration", "0.3s"), "the shortest run is 1s"),
        (("--duration", "999999h"), "at most 30 days"),
        (("--seed", str(2**63)), "between 0 and 2**63-1"),
        (("--seed", "-1"), "between 0 and 2**63-1"),
        (("--web-port", "70000"), "at most 65535"),
        (("--workers", "100000"), "CPU"),
        (("--slo", "codingagent.ttft_p95_ms=5"), "did you mean 'agent'"),
        (("--slo", "ttft_p96x=5"), "unknown SLO"),
        (("--slo", "ttft_p95_ms=-1"), "finite and >= 0"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str
) -> None:
    code, err = _run(capsys, *argv)
    assert code == EXIT_BAD_INPUT
    assert len(err.splitlines()) == 1 and err.startswith("agentload: error: "), err
    assert needle in err


def test_out_dir_variants(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        check_out_dir(a_file)
    with pytest.raises(UsageError, match="under .* which is a file"):
        check_out_dir(a_file / "sub" / "run")
    with pytest.raises(UsageError, match="not writable"):
        check_out_dir(Path("/proc/agentload-test/run"))
    fresh = check_out_dir(tmp_path / "new" / "run")
    assert fresh.is_dir()


def test_out_dir_holding_a_run(tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="already holds a run .*--overwrite"):
        check_out_dir(tmp_path)
    check_out_dir(tmp_path, overwrite=True)
    assert not (tmp_path / "requests.jsonl").exists()
    assert (tmp_path / "notes.txt").exists()  # only run artifacts are removed


def test_cli_refuses_an_old_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.json").write_text("{}")
    code, err = _run(capsys, "--out", str(tmp_path))
    assert code == EXIT_BAD_INPUT and "--overwrite" in err


def test_workers_against_the_machine() -> None:
    check_workers(8, cpus=2)
    with pytest.raises(UsageError, match="at most 8"):
        check_workers(9, cpus=2)


def test_slo_overrides_checked_against_classes() -> None:
    check_slo_overrides({"*": {"ttft_p95_ms": 1}, "chat": {"e2e_p95_ms": 2}}, ["chat", "agent"])
    with pytest.raises(UsageError, match="unknown class 'interactive'"):
        check_slo_overrides({"interactive": {"ttft_p95_ms": 1}}, ["chat", "agent"])


class _SlowModels(http.server.BaseHTTPRequestHandler):
    delay_s = 3.0

    def do_GET(self) -> None:  # noqa: N802
        time.sleep(self.delay_s)
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


def test_models_slower_than_the_run_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowModels)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        t0 = time.monotonic()
        code, err = _run(capsys, "--host", url, "--duration", "1s", "--out", str(tmp_path / "r"))
        took = time.monotonic() - t0
    finally:
        server.shutdown()
    assert code == EXIT_BAD_INPUT
    assert "did not answer within 1s" in err and len(err.splitlines()) == 1, err
    assert took < 3.0  # the probe is bounded by the run's length


def test_exit_reasons() -> None:
    assert exit_code_for_signal(2) == 130 and exit_code_for_signal(15) == 143
    assert exit_code_for_signal(1) == 129
    why = outcome_reason(EXIT_ERRORS, 0.169, 0.05, [])
    assert why == "error ratio 16.9 % > 5 % (max_error_ratio)"
    failed = [
        SLOResult("coding-agent", "ttft_p95_ms", 800.0, 912.0, False, "ms"),
        SLOResult("chat", "e2e_p95_ms", 100.0, None, False, "ms"),
    ]
    why = outcome_reason(EXIT_SLO, 0.0, 0.05, failed)
    assert why.startswith("2 SLOs failed: coding-agent.ttft_p95_ms 912 > 800")
    assert last_line(3, why, Path("d")).startswith("agentload: exit 3: 2 SLOs failed")
    assert last_line(130, "interrupted (SIGINT)", Path("d")) == (
        "agentload: exit 130: interrupted (SIGINT); artifacts complete in d"
    )


def test_summary_counts_what_was_written(tmp_path: Path) -> None:
    writer = artifacts.RunWriter(tmp_path, worker="0")
    live = Aggregate()
    for i in range(5):
        rec = RequestRecord(user_class="c", session_id=f"s{i}", step=1, t_start=1.0, e2e_ms=5.0)
        writer.requests.write(rec.to_json())
        if i < 3:  # the last two deltas never reached the master
            live.add_request(rec)
    srec = SessionRecord(user_class="c", session_id="s0")
    writer.sessions.write(srec.to_json())
    writer.close()
    assert not reconcile.counts_agree(live, tmp_path)
    agg = reconcile.reconcile(live, tmp_path, {}, wait=False)
    assert agg.overall.counters["requests"] == 5
    assert agg.summary()["overall"]["sessions"]["total"] == 1
    assert reconcile.reconcile(agg, tmp_path, {}, wait=False) is agg


def test_atomic_write_leaves_no_temp(tmp_path: Path) -> None:
    artifacts.write_atomic(tmp_path / "junit.xml", "<x/>")
    artifacts.write_json(tmp_path / "run.json", {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml", "run.json"]


def test_a_locked_run_directory_refuses_a_second_run_at_once(tmp_path):
    out = tmp_path / "runs" / "x"
    with run_dir_lock(out):
        assert out.is_dir()
        with (
            pytest.raises(UsageError, match="in use by another agentload run") as e,
            run_dir_lock(out),
        ):
            pass
        assert "\n" not in str(e.value)
    with run_dir_lock(out):  # released at the end: the next run may use it
        pass
    assert not (out / ".agentload.lock").exists()


def test_a_closed_stdout_is_silence_not_an_exception(monkeypatch):
    import io
    import os
    import sys

    from workload.stopping import tolerate_closed_stdout

    r, w = os.pipe()
    pipe = io.TextIOWrapper(os.fdopen(w, "wb"), line_buffering=True)
    monkeypatch.setattr(sys, "stdout", pipe)
    tolerate_closed_stdout()
    print("first line", flush=True)
    os.close(r)  # `| head -1` read its line and went away
    for _ in range(3):
        print("progress", flush=True)  # BrokenPipeError before: it stopped the run
    sys.stdout.flush()


def test_an_unreachable_host_leaves_no_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fixture = str(Path(__file__).parent / "fixtures" / "e2e_chat.yaml")
    for out in (["--out", str(tmp_path / "x")], []):  # --out, and the default runs/<id>
        code = main(["run", "--host", "http://127.0.0.1:1", "--profile", fixture,
                     "--duration", "2s", *out])  # fmt: skip
        assert code == EXIT_BAD_INPUT and "cannot reach" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "runs").exists()
