"""`agentload run` end to end against a server whose timing we know."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.e2e.cli import CHAT_PROFILE, agentload
from tests.e2e.known_server import SPEC, KnownServer
from workload.measure.artifacts import read_records
from workload.measure.transport import KERNEL_RX

pytestmark = pytest.mark.slow


def test_run_records_every_request_with_content_ttft(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with KnownServer(content_delay_s=0.2, gap_s=0.01, chunks=5) as srv:
        proc = agentload(
            "run",
            "--host",
            srv.url,
            "--profile",
            CHAT_PROFILE,
            "--users",
            "3",
            "--duration",
            "8s",
            "--out",
            str(out),
            "--scrape-interval",
            "0",
        )
        seen = list(srv.seen)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_records(out, "requests")
    assert rows, "no requests recorded"
    ids = {r["request_id"] for r in rows}
    assert set(seen) <= ids, "a request the server served is missing from requests.jsonl"
    done = [r for r in rows if r["status"] == "ok"]
    assert done
    for r in done:
        # TTFT is the content delay, not the role-only chunk sent at once.
        assert r["ttft_ms"] >= 195
        assert r["e2e_ms"] >= r["ttft_ms"]
        assert r["completion_tokens"] == 5
        assert r["cached_tokens"] == 32
        assert r["spec_decode"] == SPEC
        assert r["response_id"] == f"chatcmpl-{r['request_id']}"
        assert r["itl_ms"] is not None
    # The server spaces content 10 ms apart; a loaded machine may read several chunks in one
    # read (they then share that read's stamp), so the gaps show on some requests, not all.
    assert max(r["itl_ms"]["max"] for r in done) >= 5
    run = json.loads((out / "run.json").read_text())
    assert run["exit_code"] == 0
    assert run["target"]["model"] == "known-model"
    health = run["generator_health"]  # sampled every 2 s over an 8 s run
    assert health["samples"] >= 1 and health["cpu_threshold"] > 0
    assert set(health) >= {"cpu_max", "cpu_mean", "crossed", "loop_lag_ms_max"}
    assert health["read_stamps"] == ("kernel" if KERNEL_RX else "user")
    assert (out / "sessions.jsonl").exists()
    assert (out / "report.html").exists()
    assert (out / "stats.json").exists()


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    cases = [
        ["run", "--users", "-5"],
        ["run", "--duration", "abc"],
        ["run", "--host", "not a url"],
        ["run", "--seed", "x"],
        ["run", "--profile", str(tmp_path / "missing.yaml")],
        ["run", "--host", "http://127.0.0.1:9"],  # nothing listens on the discard port
    ]
    for args in cases:
        proc = agentload(*args, "--out", str(tmp_path / "x"))
        assert proc.returncode == 2, (args, proc.stderr)
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("agentload: error:"), (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_not_openai_compatible_server(tmp_path: Path) -> None:
    class Html(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        proc = agentload(
            "run",
            "--host",
            f"http://127.0.0.1:{httpd.server_address[1]}",
            "--out",
            str(tmp_path / "y"),
        )
    finally:
        httpd.shutdown()
    assert proc.returncode == 2
    assert "not an OpenAI-compatible server" in proc.stderr
    assert "Traceback" not in proc.stderr
