"""`--otlp-endpoint`: a real run's export, received on 127.0.0.1, against the run's own files."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli import CHAT_PROFILE
from tests.e2e.known_server import KnownServer
from tests.otlp_receiver import Receiver

pytestmark = pytest.mark.slow

GENAI_UNITS = {
    "gen_ai.client.operation.duration": "s",
    "gen_ai.client.token.usage": "{token}",
    "gen_ai.server.time_to_first_token": "s",
    "gen_ai.server.time_per_output_token": "s",
}
AGENTLOAD_UNITS = {
    "agentload.requests": "{request}",
    "agentload.tokens": "{token}",
    "agentload.sessions": "{session}",
    "agentload.sessions.started": "{session}",
    "agentload.sessions.in_flight": "{session}",
    "agentload.requests.in_flight": "{request}",
    "agentload.session.duration": "s",
    "agentload.spec_decode.accepted_tokens": "{token}",
    "agentload.spec_decode.draft_tokens": "{token}",
}


def run(out: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "workload.cli", "run", "--profile", CHAT_PROFILE,
           "--users", "3", "--duration", "5s", "--sim-preset", "fast", "--out", str(out),
           "--otlp-endpoint", url, "--otlp-interval", "1", *extra]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def requests_of(out: Path) -> list[dict[str, Any]]:
    return [r for f in sorted(out.glob("requests*.jsonl")) for r in lines(f)]


def sessions_of(out: Path) -> list[dict[str, Any]]:
    return [r for f in sorted(out.glob("sessions*.jsonl")) for r in lines(f)]


def summed(last: dict, name: str, **match: Any) -> float:
    return sum(p.value if p.kind != "histogram" else p.count for p in last.values()
               if p.name == name and all(p.attributes.get(k) == v for k, v in match.items()))  # fmt: skip


def check_against_the_run(out: Path, got: Any) -> None:
    """Names, units, GenAI attributes; the last export's counts are stats.json's."""
    units = {p.name: p.unit for p in got.points}
    assert {k: units.get(k) for k in GENAI_UNITS} == GENAI_UNITS
    assert {k: units.get(k) for k in AGENTLOAD_UNITS} == AGENTLOAD_UNITS
    stats = json.loads((out / "stats.json").read_text())["overall"]["counters"]
    run_json = json.loads((out / "run.json").read_text())
    last = got.last()
    assert summed(last, "agentload.requests") == stats["requests"] > 0
    assert summed(last, "agentload.tokens", **{"agentload.token.type": "input"}) == stats[
        "prompt_tokens"]  # fmt: skip
    ok = [r for r in requests_of(out) if r["status"] == "ok"]
    durations = [p for p in last.values() if p.name == "gen_ai.client.operation.duration"]
    assert sum(p.count for p in durations) == len(ok)  # the fixture's server never fails
    for p in durations:
        a = p.attributes
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "vllm"  # the simulator states max_model_len
        assert a["gen_ai.request.model"] == run_json["model"]
        assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
    usage: dict[str, float] = {}  # summed over the processes that exported
    for p in last.values():
        if p.name == "gen_ai.client.token.usage":
            kind = p.attributes["gen_ai.token.type"]
            usage[kind] = usage.get(kind, 0) + p.total
    assert usage == {"input": sum(r["prompt_tokens"] for r in ok),
                     "output": sum(r["completion_tokens"] for r in ok)}  # fmt: skip
    spec = [r["spec_decode"] for r in ok if r.get("spec_decode")]
    assert summed(last, "agentload.spec_decode.accepted_tokens") == sum(
        s["num_accepted_draft_tokens"] for s in spec) > 0  # fmt: skip


def check_spans(out: Path, got: Any) -> None:
    """One span per request, each under its session's span; one span per session."""
    reqs, sessions = requests_of(out), sessions_of(out)
    chats = [s for s in got.spans if s["kind"] == 3]  # CLIENT
    assert len(chats) == len(reqs)
    assert sorted(s["attributes"]["agentload.request_id"] for s in chats) == sorted(
        r["request_id"] for r in reqs)  # fmt: skip
    roots = {s["span_id"]: s for s in got.spans if s["name"].startswith("invoke_agent")}
    assert len(roots) == len(sessions)
    session_of = {r["request_id"]: r["session_id"] for r in reqs}
    for s in chats:
        root = roots[s["parent"]]
        assert root["trace_id"] == s["trace_id"]
        assert root["attributes"]["gen_ai.conversation.id"] == session_of[
            s["attributes"]["agentload.request_id"]]  # fmt: skip
    ok = next(s for s in chats if "agentload.status" not in s["attributes"])  # ok: unsaid
    for key in (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.response.time_to_first_chunk",
        "agentload.spec_decode.accepted_tokens",
        "agentload.spec_decode.draft_tokens",
    ):
        assert key in ok["attributes"], key  # fmt: skip


def test_a_run_exports_metrics_and_one_span_per_request(tmp_path: Path) -> None:
    with Receiver() as r:
        p = run(tmp_path / "run", r.url, "--otlp-traces")
        time.sleep(0.2)
    assert f"OpenTelemetry export of metrics and traces of all sessions to {r.url}" in p.stdout
    assert "OTLP export" not in p.stdout  # nothing failed
    assert r.got.metric_posts >= 2  # every second while it ran, then the last one
    check_against_the_run(tmp_path / "run", r.got)
    check_spans(tmp_path / "run", r.got)
    assert {p.resource["service.instance.id"] for p in r.got.points} == {
        f"{json.loads((tmp_path / 'run' / 'run.json').read_text())['run_id']}/local"
    }


def test_with_two_workers_each_worker_exports_and_the_sums_match(tmp_path: Path) -> None:
    with Receiver() as r:
        p = run(tmp_path / "run", r.url, "--otlp-traces", "--workers", "2")
        time.sleep(0.2)
    assert "each worker sends its own" in p.stdout
    instances = {p.resource["service.instance.id"].rsplit("/", 1)[1] for p in r.got.points}
    assert instances == {"worker0", "worker1"}
    check_against_the_run(tmp_path / "run", r.got)
    check_spans(tmp_path / "run", r.got)


def test_a_collector_that_is_down_neither_fails_nor_holds_up_the_run(tmp_path: Path) -> None:
    with Receiver() as r:
        url = r.url  # answered once, closed now: connection refused
    cmd = [sys.executable, "-m", "workload.cli", "run", "--profile", CHAT_PROFILE,
           "--users", "3", "--duration", "5s", "--sim-preset", "fast",
           "--out", str(tmp_path / "run"), "--otlp-endpoint", url, "--otlp-traces"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    said = [x for x in p.stdout.splitlines() if "OTLP export" in x]
    assert len(said) == 1 and "failed (Connection refused)" in said[0], p.stdout
    assert "Traceback" not in p.stderr and "opentelemetry" not in p.stderr
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run_json["duration_s"] < 5 + 3  # the run ended on time: exports never held it
    assert len(requests_of(tmp_path / "run")) == run_json["summary"]["overall"]["requests"]


def test_each_request_carries_its_span_to_the_server_as_w3c_trace_context(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    with Receiver() as r, KnownServer(content_delay_s=0.05, gap_s=0.01, chunks=5) as srv:
        cmd = [sys.executable, "-m", "workload.cli", "run", "--host", srv.url,
               "--profile", CHAT_PROFILE, "--users", "3", "--duration", "4s",
               "--scrape-interval", "0", "--out", str(out),
               "--otlp-endpoint", r.url, "--otlp-traces"]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        time.sleep(0.2)
        headers = dict(srv.traceparents)
    assert p.returncode == 0, p.stdout + p.stderr
    reqs = {x["request_id"]: x for x in requests_of(out)}
    assert headers and set(headers) <= set(reqs)
    chats = {s["attributes"]["agentload.request_id"]: s for s in r.got.spans if s["kind"] == 3}
    roots = {s["span_id"]: s for s in r.got.spans if s["name"].startswith("invoke_agent")}
    for rid, header in headers.items():
        assert header is not None, rid
        version, trace_id, span_id, flags = header.split("-")
        assert (version, flags, len(trace_id), len(span_id)) == ("00", "01", 32, 16)
        span = chats[rid]  # the request's own span: the server's goes under it
        assert (span["trace_id"], span["span_id"]) == (trace_id, span_id)
        assert roots[span["parent"]]["attributes"]["gen_ai.conversation.id"] == reqs[rid][
            "session_id"]  # fmt: skip
    assert len({h.split("-")[2] for h in headers.values() if h}) == len(headers)  # one per attempt
