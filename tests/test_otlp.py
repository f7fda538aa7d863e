"""OpenTelemetry export (`--otlp-*`): options, session sampling, and what reaches a receiver."""

from __future__ import annotations

import time

import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tests.client_builders import request
from tests.e2e.cli import agentload
from tests.otlp_receiver import Receiver
from tests.test_client import HAPPY
from tests.test_client import run as exchange
from workload.errors import UsageError
from workload.measure.live_metrics import GENAI_DURATION_BUCKETS, GENAI_TOKEN_BUCKETS
from workload.measure.otlp import OtlpExport, OtlpSettings, short_reason
from workload.measure.otlp_metrics import Gauges
from workload.measure.otlp_traces import traced
from workload.measure.records import RequestRecord, SessionRecord
from workload.run.options import parse_otlp_endpoint
from workload.run.spec import resolve_spec

# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318"),
        ("http://collector:4318/", "http://collector:4318"),
        ("https://otlp.example.com/otlp", "https://otlp.example.com/otlp"),
        ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318"),  # a pasted signal path
        ("", ""),
    ],
)
def test_an_otlp_endpoint_is_a_base_url(given: str, url: str) -> None:
    assert parse_otlp_endpoint(given) == url


@pytest.mark.parametrize(
    "bad", ["127.0.0.1:4318", "ftp://x", "http://", "http://h:99999", "http://h:4318/?x=1"]
)
def test_a_bad_otlp_endpoint_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_otlp_endpoint(bad)
    assert "--otlp-endpoint" in str(e.value) and "\n" not in str(e.value)


def test_credentials_in_the_endpoint_are_refused_and_not_shown() -> None:
    with pytest.raises(UsageError) as e:
        parse_otlp_endpoint("http://user:secret@h:4318")
    assert "secret" not in str(e.value) and "OTEL_EXPORTER_OTLP_HEADERS" in str(e.value)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"otlp_traces": True}, "--otlp-traces needs --otlp-endpoint"),
        ({"otlp_endpoint": "http://127.0.0.1:4318", "otlp_sample": "0.5"}, "add --otlp-traces"),
        ({"otlp_endpoint": "http://h:4318", "otlp_traces": True, "otlp_sample": "0"}, "above 0"),
        ({"otlp_endpoint": "http://h:4318", "otlp_traces": True, "otlp_sample": "1.5"}, "most 1"),
        ({"otlp_endpoint": "http://h:4318", "otlp_interval_s": "0"}, "--otlp-interval"),
    ],
)
def test_the_trace_options_without_what_they_need_are_refused(values: dict, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        resolve_spec({"profile": "quickstart", **values})


def test_the_otlp_options_reach_the_spec() -> None:
    spec = resolve_spec({"profile": "quickstart", "otlp_endpoint": "http://127.0.0.1:4318/",
                         "otlp_traces": True, "otlp_sample": "0.25", "otlp_interval_s": "2"})  # fmt: skip
    assert (spec.otlp_endpoint, spec.otlp_traces, spec.otlp_sample, spec.otlp_interval_s) == (
        "http://127.0.0.1:4318", True, 0.25, 2.0)  # fmt: skip
    assert type(spec).from_json(spec.to_json()) == spec  # spec.json carries them to workers


def test_a_bad_otlp_endpoint_on_the_command_line_is_one_error_line_and_exit_2() -> None:
    p = agentload("run", "--otlp-endpoint", "collector:4318", "--duration", "2s", timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0, p.stderr
    assert p.stderr.startswith("agentload: error: bad --otlp-endpoint 'collector:4318'")


# ---------------------------------------------------------------- sampling


def test_sessions_are_sampled_whole_by_seed_and_id() -> None:
    ids = [f"chat-u{u}-s{s}" for u in range(40) for s in range(50)]
    picked = {i for i in ids if traced(7, i, 0.25)}
    assert picked == {i for i in ids if traced(7, i, 0.25)}  # the same seed: the same sessions
    assert picked != {i for i in ids if traced(8, i, 0.25)}  # another seed: others
    assert 0.2 < len(picked) / len(ids) < 0.3
    assert picked <= {i for i in ids if traced(7, i, 0.5)}  # a larger share keeps these
    assert all(traced(7, i, 1.0) for i in ids[:10])


# ---------------------------------------------------------------- in-process export


def _settings(url: str, **kw: object) -> OtlpSettings:
    base: dict = dict(endpoint=url, traces=True, sample=1.0, interval_s=60.0, seed=3,
                      target="http://127.0.0.1:8000", model="m1", provider="vllm",
                      resource={"service.instance.id": "r/local"})  # fmt: skip
    base.update(kw)
    return OtlpSettings(**base)


def _gauges() -> Gauges:
    return Gauges(lambda: 2, lambda: 1, lambda: (5, 1))


def _session(e: OtlpExport, sid: str, t: float, **rec: object) -> None:
    e.session_started(sid, "coding", t)
    e.waited(sid, t, t + 0.2, 0.15, 0.05)
    ok = dict(user_class="coding", session_id=sid, step=1, t_start=t + 0.2, ttft_ms=40.0,
              e2e_ms=250.0, tpot_ms=8.0, prompt_tokens=1200, completion_tokens=30,
              cached_tokens=1024, planned_tool="grep", slo_met=True,
              spec_decode={"num_accepted_draft_tokens": 9, "num_spec_steps": 6,
                           "num_draft_tokens": 18})  # fmt: skip
    ok.update(rec)
    e.request(RequestRecord(**ok))  # type: ignore[arg-type]
    e.waited(sid, t + 0.45, t + 0.6, 0.15, 0.0)
    e.request(RequestRecord(user_class="coding", session_id=sid, step=2, t_start=t + 0.6,
                            status="error", error_kind="http_status", http_status=503,
                            e2e_ms=3.0))  # fmt: skip
    e.session(SessionRecord(user_class="coding", session_id=sid, t_start=t, duration_ms=700.0,
                            outcome="failed", requests=2, errors=1))  # fmt: skip


def test_the_export_carries_genai_names_units_and_attributes() -> None:
    with Receiver() as r:
        e = OtlpExport(_settings(r.url), _gauges(), print)
        _session(e, "coding-u0-s0", time.time())
        e.close()
    points = {(p.name, tuple(sorted(p.attributes.items()))): p for p in r.got.points}
    units = {p.name: p.unit for p in r.got.points}
    assert units["gen_ai.client.operation.duration"] == "s"
    assert units["gen_ai.client.token.usage"] == "{token}"
    assert units["gen_ai.server.time_to_first_token"] == "s"
    assert units["gen_ai.server.time_per_output_token"] == "s"
    genai = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
             "gen_ai.request.model": "m1", "server.address": "127.0.0.1", "server.port": 8000,
             "agentload.class": "coding"}  # fmt: skip
    dur = points[("gen_ai.client.operation.duration", tuple(sorted(genai.items())))]
    assert (dur.count, dur.total, dur.bounds) == (1, 0.25, GENAI_DURATION_BUCKETS)
    failed = {**genai, "error.type": "http_status"}
    assert points[("gen_ai.client.operation.duration", tuple(sorted(failed.items())))].count == 1
    for kind, n in (("input", 1200), ("output", 30)):
        usage = points[("gen_ai.client.token.usage",
                        tuple(sorted({**genai, "gen_ai.token.type": kind}.items())))]  # fmt: skip
        assert (usage.count, usage.total, usage.bounds) == (1, n, tuple(GENAI_TOKEN_BUCKETS))
    by_name = {}
    for p in r.got.points:
        by_name.setdefault(p.name, []).append(p)
    assert sum(p.value for p in by_name["agentload.requests"]) == 2
    assert {p.attributes["agentload.status"] for p in by_name["agentload.requests"]} == {
        "ok", "error"}  # fmt: skip
    assert by_name["agentload.spec_decode.accepted_tokens"][0].value == 9
    assert by_name["agentload.spec_decode.draft_tokens"][0].value == 18
    assert by_name["agentload.sessions.in_flight"][0].value == 2
    assert by_name["agentload.arrivals.dropped"][0].value == 1
    assert r.got.points[0].resource["service.name"] == "agentload"


def test_a_session_reads_as_one_trace_with_its_requests_and_tool_waits() -> None:
    with Receiver() as r:
        e = OtlpExport(_settings(r.url), _gauges(), print)
        _session(e, "coding-u0-s0", time.time())
        e.close()
    spans = r.got.spans
    (root,) = [s for s in spans if not s["parent"]]
    assert root["name"] == "invoke_agent coding"
    assert root["attributes"]["gen_ai.conversation.id"] == "coding-u0-s0"
    assert root["attributes"]["gen_ai.agent.name"] == "coding"
    assert root["attributes"]["agentload.session.outcome"] == "failed" and root["status"] == 2
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    assert all(s["parent"] == root["span_id"] for s in spans if s is not root)
    steps = sorted((s for s in spans if s is not root), key=lambda s: s["start"])
    assert [s["name"] for s in steps] == ["execute_tool", "chat m1", "execute_tool grep", "chat m1"]
    ok = steps[1]["attributes"]
    assert (ok["gen_ai.usage.input_tokens"], ok["gen_ai.usage.output_tokens"],
            ok["gen_ai.usage.cache_read.input_tokens"]) == (1200, 30, 1024)  # fmt: skip
    assert ok["gen_ai.response.time_to_first_chunk"] == 0.04
    assert (ok["agentload.spec_decode.accepted_tokens"],
            ok["agentload.spec_decode.draft_tokens"]) == (9, 18)  # fmt: skip
    assert ok["gen_ai.provider.name"] == "vllm" and ok["gen_ai.request.model"] == "m1"
    assert steps[1]["kind"] == 3  # CLIENT
    assert steps[1]["end"] - steps[1]["start"] == 250_000_000
    assert steps[3]["attributes"]["error.type"] == "http_status" and steps[3]["status"] == 2
    assert steps[2]["attributes"]["gen_ai.tool.name"] == "grep"


def test_only_sampled_sessions_are_traced_and_subagents_follow_their_parent() -> None:
    ids = [f"coding-u{u}-s0" for u in range(20)]
    with Receiver() as r:
        e = OtlpExport(_settings(r.url, sample=0.3), _gauges(), print)
        t = time.time()
        for sid in ids:
            _session(e, sid, t)
        kept = next(i for i in ids if traced(3, i, 0.3))
        dropped = next(i for i in ids if not traced(3, i, 0.3))
        for parent in (kept, dropped):
            e.session_started(parent, "coding", t)
            e.session_started(f"{parent}-sub", "coding", t, parent_id=parent)
            e.session(SessionRecord(user_class="coding", session_id=f"{parent}-sub", t_start=t))
            e.session(SessionRecord(user_class="coding", session_id=parent, t_start=t))
        e.close()
    roots = {s["attributes"]["gen_ai.conversation.id"] for s in r.got.spans
             if s["name"].startswith("invoke_agent") and not s["parent"]}  # fmt: skip
    assert roots == {i for i in ids if traced(3, i, 0.3)}
    chats = [s for s in r.got.spans if s["name"].startswith("chat")]
    assert len(chats) == 2 * len([i for i in ids if traced(3, i, 0.3)])  # whole sessions
    subs = [s for s in r.got.spans if s["attributes"].get("gen_ai.conversation.id", "")
            .endswith("-sub")]  # fmt: skip
    assert [s["attributes"]["gen_ai.conversation.id"] for s in subs] == [f"{kept}-sub"]
    assert subs[0]["parent"] != "" and subs[0]["trace_id"] in {s["trace_id"] for s in r.got.spans
                                                                if not s["parent"]}  # fmt: skip


def test_an_endpoint_that_is_down_is_said_once_and_the_end_waits_little() -> None:
    with Receiver() as r:
        url = r.url  # a port that answered once and is closed now
    said: list[str] = []
    e = OtlpExport(_settings(url, interval_s=0.2), _gauges(), said.append)
    for k in range(3):
        _session(e, f"coding-u{k}-s0", time.time())
    deadline = time.monotonic() + 30
    while not said and time.monotonic() < deadline:
        time.sleep(0.1)
    e.close()
    assert len(said) == 1, said
    assert said[0].startswith(f"agentload: OTLP export to {url} failed (Connection refused)")
    assert e.health.giving_up


def test_an_endpoint_that_refuses_says_why() -> None:
    with Receiver(status=404) as r:
        said: list[str] = []
        e = OtlpExport(_settings(r.url), _gauges(), said.append)
        _session(e, "coding-u0-s0", time.time())
        e.close()
    assert len(said) == 1 and "(HTTP 404)" in said[0], said


def test_a_grpc_port_gets_a_hint() -> None:
    assert "OTLP/gRPC" in short_reason("[Errno 111] Connection refused", "http://h:4317")


# ---------------------------------------------------------------- W3C trace context


def _server_side(header: str) -> trace.SpanContext:
    """What a traced server reads from the header (vLLM: TraceContextTextMapPropagator)."""
    ctx = TraceContextTextMapPropagator().extract({"traceparent": header})
    return trace.get_current_span(ctx).get_span_context()


def test_a_request_sends_its_span_ids_in_traceparent_and_unsampled_ones_say_so() -> None:
    ids = [f"coding-u{u}-s0" for u in range(20)]
    kept = next(i for i in ids if traced(3, i, 0.3))
    dropped = next(i for i in ids if not traced(3, i, 0.3))
    sent: dict[str, str] = {}
    with Receiver() as r:
        e = OtlpExport(_settings(r.url, sample=0.3), _gauges(), print)
        for sid in (kept, dropped):
            e.session_started(sid, "coding", time.time())
            for step in (1, 2):
                req = request(session_id=sid, user_class="coding", step=step,
                              request_id=f"{sid}-{step}")  # fmt: skip
                req.traceparent = e.traceparent(sid, req.request_id)
                rec, tr, _ = exchange(HAPPY, req=req)
                sent[req.request_id] = tr.sent[0]["headers"]["traceparent"]
                e.request(rec)
            e.session(SessionRecord(user_class="coding", session_id=sid, t_start=time.time()))
        e.close()
    chats = {s["attributes"]["agentload.request_id"]: s for s in r.got.spans if s["kind"] == 3}
    (root,) = [s for s in r.got.spans if s["name"].startswith("invoke_agent")]
    assert set(chats) == {f"{kept}-1", f"{kept}-2"}
    for rid, span in chats.items():
        sc = _server_side(sent[rid])
        assert sc.is_valid and sc.trace_flags.sampled
        assert (f"{sc.trace_id:032x}", f"{sc.span_id:016x}") == (span["trace_id"], span["span_id"])
        assert span["parent"] == root["span_id"]
    unsampled = [_server_side(sent[f"{dropped}-{k}"]) for k in (1, 2)]
    assert all(sc.is_valid and not sc.trace_flags.sampled for sc in unsampled)
    assert unsampled[0].trace_id == unsampled[1].trace_id  # one (unrecorded) trace a session
    assert unsampled[0].span_id != unsampled[1].span_id
    assert f"{unsampled[0].trace_id:032x}" not in {s["trace_id"] for s in r.got.spans}


def test_without_traces_no_traceparent_is_sent() -> None:
    with Receiver() as r:
        e = OtlpExport(_settings(r.url, traces=False), _gauges(), print)
        e.session_started("coding-u0-s0", "coding", time.time())
        assert e.traceparent("coding-u0-s0", "r1") is None
        e.close()
    _, tr, _ = exchange(HAPPY, req=request(traceparent=None))
    assert "traceparent" not in tr.sent[0]["headers"]
