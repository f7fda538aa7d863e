"""Client: measurement, parsing and error kinds over a fake transport with a fake clock,
(the real loopback server is in test_transport.py)."""

from __future__ import annotations

import orjson
import pytest
from gevent import GreenletExit

from tests.client_builders import METRICS, ROLE, SPEC, USAGE, chunk, final_chunk, request, sse
from workload.measure.client import Client, ensure_stream_options, request_id_for
from workload.measure.transport import PreparedRequest, TransportError

MS = 1_000_000  # ns


# ---------------------------------------------------------------- fakes and builders


class FakeClock:
    def __init__(self) -> None:
        self.now = 5_000 * MS

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += int(ms * MS)


class FakeResponse:
    """Each read returns the next scripted item after advancing the clock by its delay."""

    def __init__(self, clock: FakeClock, status: int, reads: list, headers=None) -> None:
        self.clock = clock
        self.status = status
        self.headers = headers or {"content-type": "text/event-stream"}
        self.reads = list(reads)
        self.closed = False

    def readline(self) -> bytes:
        if not self.reads:
            return b""
        delay_ms, item = self.reads.pop(0)
        self.clock.advance(delay_ms)
        if isinstance(item, BaseException):
            raise item
        return item

    def read(self) -> bytes:
        out = b""
        while self.reads:
            out += self.readline()
        return out

    def close(self) -> None:
        self.closed = True


class FakeTransport:
    def __init__(self, clock: FakeClock, response=None, error=None, header_ms: float = 0):
        self.clock = clock
        self.response = response
        self.error = error
        self.header_ms = header_ms
        self.sent: list[dict] = []

    def post(self, path, headers, body, *, read_timeout_s, on_send):
        if self.error is not None and self.error.kind == "connect":
            raise self.error
        on_send()
        self.sent.append(dict(path=path, headers=dict(headers), body=body, read=read_timeout_s))
        self.clock.advance(self.header_ms)
        if self.error is not None:
            raise self.error
        return self.response

    def close(self) -> None:
        pass


def run(reads, *, status=200, req=None, header_ms=0.0, error=None, **client_kw):
    clock = FakeClock()
    resp = FakeResponse(clock, status, reads)
    tr = FakeTransport(clock, resp, error=error, header_ms=header_ms)
    client = Client(
        "http://fake:1/", transport=tr, clock=clock, wall=lambda: 1700000000.1234567, **client_kw
    )
    rec = client.exchange(req or request())
    return rec, tr, resp


HAPPY = [
    (5, sse(ROLE)),
    (200, sse(chunk({"content": "Hel"}))),
    (10, sse(chunk({"content": "lo"}))),
    (30, sse(chunk({"content": "!"}, finish="stop"))),
    (1, sse(final_chunk())),
    (2, sse("[DONE]")),
]


# ---------------------------------------------------------------- measurement


def test_role_only_chunk_does_not_count_for_ttft():
    rec, tr, resp = run(HAPPY, header_ms=3)
    assert rec.status == "ok", rec.error_detail
    assert rec.ttft_ms == 208.0  # 3 headers + 5 role + 200: the content chunk, not the role one
    assert rec.itl_gaps_ms == [10.0, 30.0]
    assert rec.itl_ms == {"mean": 20.0, "p50": 20.0, "p99": 29.8, "max": 30.0}
    assert rec.e2e_ms == 251.0  # at [DONE]
    assert rec.tpot_ms == round((251.0 - 208.0) / 2, 3)
    assert rec.chunks == 3
    assert rec.text == "Hello!"
    assert rec.finish_reason == "stop"
    assert resp.closed


def test_record_fields_from_final_usage_chunk():
    rec, _, _ = run(HAPPY)
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (100, 3, 64)
    assert rec.server_metrics == METRICS
    assert rec.spec_decode == SPEC
    assert rec.system_fingerprint == "fp-1"
    assert rec.response_id == "chatcmpl-x"
    assert rec.model == "m"
    assert rec.t_start == 1700000000.123457
    assert (rec.user_class, rec.session_id, rec.step, rec.request_id) == ("coder", "s1", 2, "rid-1")
    row = rec.to_json()
    assert "text" not in row and "itl_gaps_ms" not in row
    orjson.dumps(row)


def test_usage_without_cache_details_or_metrics_is_none():
    reads = [
        (1, sse(chunk({"content": "a"}))),
        (1, sse(final_chunk(usage={"prompt_tokens": 5, "completion_tokens": 1}, metrics=None))),
        (1, sse("[DONE]")),
    ]
    rec, _, _ = run(reads)
    assert rec.ok
    assert (rec.prompt_tokens, rec.cached_tokens, rec.server_metrics, rec.spec_decode) == (
        5,
        None,
        None,
        None,
    )
    assert rec.tpot_ms is None  # one token: TPOT undefined


@pytest.mark.parametrize(
    "delta",
    [
        {"reasoning_content": "hmm"},
        {"reasoning": "hmm"},
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]},
    ],
)
def test_reasoning_and_tool_call_deltas_count_for_ttft(delta):
    rec, _, _ = run([(1, sse(ROLE)), (40, sse(chunk(delta))), (1, sse("[DONE]"))])
    assert rec.ttft_ms == 41.0


def test_ttft_split_first_token_of_any_kind_vs_first_visible_content():
    reads = [
        (1, sse(ROLE)),
        (40, sse(chunk({"reasoning_content": "let me"}))),
        (10, sse(chunk({"reasoning": " think"}))),
        (25, sse(chunk({"content": "Yes"}))),
        (5, sse(chunk({"content": "."}, finish="stop"))),
        (
            1,
            sse(final_chunk(usage={**USAGE, "completion_tokens_details": {"reasoning_tokens": 2}})),
        ),
        (1, sse("[DONE]")),
    ]
    rec, _, _ = run(reads)
    assert rec.ok and rec.ttft_ms == 41.0 and rec.ttft_content_ms == 76.0
    assert rec.reasoning_chunks == 2 and rec.reasoning_tokens == 2 and rec.chunks == 4
    assert rec.text == "Yes."  # reasoning is not the answer


@pytest.mark.parametrize(
    "first",
    [
        {"content": "hi"},
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]},
    ],
)
def test_without_reasoning_both_ttfts_agree(first):
    rec, _, _ = run([(1, sse(ROLE)), (30, sse(chunk(first))), (1, sse("[DONE]"))])
    assert rec.ttft_ms == rec.ttft_content_ms == 31.0
    assert rec.reasoning_chunks == 0 and rec.reasoning_tokens is None


def test_only_reasoning_leaves_no_content_time():
    rec, _, _ = run([(1, sse(ROLE)), (30, sse(chunk({"reasoning": "x"}))), (1, sse("[DONE]"))])
    assert rec.ttft_ms == 31.0 and rec.ttft_content_ms is None and rec.reasoning_chunks == 1


def test_completions_endpoint_text():
    reads = [
        (7, sse(chunk(text=""))),
        (20, sse(chunk(text="abc"))),
        (5, sse(chunk(text="d", finish="length"))),
        (1, sse(final_chunk())),
        (1, sse("[DONE]")),
    ]
    rec, _, _ = run(reads, req=request(endpoint="completions", path="/v1/completions"))
    assert rec.ok and rec.ttft_ms == 27.0 and rec.text == "abcd" and rec.finish_reason == "length"


def test_event_split_across_reads_is_stamped_when_complete():
    line = sse(chunk({"content": "x"}))
    reads = [(10, line[:7]), (15, line[7:-1]), (4, line[-1:]), (1, sse("[DONE]"))]
    rec, _, _ = run(reads)
    assert rec.ok and rec.ttft_ms == 29.0


def test_tool_call_deltas_assembled_by_index():
    def tc(i, id=None, name=None, args=None):
        fn = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
        d = {"index": i, "type": "function", "function": fn}
        if id:
            d["id"] = id
        return chunk({"tool_calls": [d]})

    reads = [
        (1, sse(ROLE)),
        (1, sse(tc(0, "call_a", "read_file", ""))),
        (1, sse(tc(0, args='{"path": '))),
        (1, sse(tc(1, "call_b", "grep", '{"q"'))),
        (1, sse(tc(0, args='"a.py"}'))),
        (1, sse(tc(1, args=": 1"))),  # never closed: invalid
        (1, sse(chunk({}, finish="tool_calls"))),
        (1, sse("[DONE]")),
    ]
    rec, _, _ = run(reads)
    assert rec.ok
    assert rec.finish_reason == "tool_calls"
    assert rec.tool_calls == [
        {
            "index": 0,
            "id": "call_a",
            "name": "read_file",
            "arguments": '{"path": "a.py"}',
            "arguments_valid": True,
        },
        {
            "index": 1,
            "id": "call_b",
            "name": "grep",
            "arguments": '{"q": 1',
            "arguments_valid": False,
        },
    ]


def test_tool_arguments_that_are_json_but_not_an_object_are_invalid():
    d = {"index": 0, "id": "c", "function": {"name": "f", "arguments": "[1, 2]"}}
    rec, _, _ = run([(1, sse(chunk({"tool_calls": [d]}))), (1, sse("[DONE]"))])
    assert rec.tool_calls[0]["arguments_valid"] is False


def test_non_stream_body():
    body = {
        "id": "chatcmpl-y",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "ok",
                    "tool_calls": [
                        {
                            "id": "c9",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": 1}'},
                        }
                    ],
                },
            }
        ],
        "usage": USAGE,
        "metrics": METRICS,
    }
    req = request(stream=False, body=b"{}")
    rec, tr, _ = run(
        [(120, orjson.dumps(body))],
        req=req,
    )
    assert rec.ok, rec.error_detail
    assert rec.ttft_ms is None and rec.e2e_ms == 120.0 and rec.itl_ms is None
    assert rec.text == "ok" and rec.response_id == "chatcmpl-y"
    assert rec.tool_calls == [
        {"index": 0, "id": "c9", "name": "f", "arguments": '{"a": 1}', "arguments_valid": True}
    ]
    assert rec.spec_decode == SPEC and rec.cached_tokens == 64
    assert tr.sent[0]["headers"]["Accept"] == "application/json"
    assert tr.sent[0]["read"] > req.timeout_s  # no stall timeout on silent non-stream replies


def test_headers_and_exact_body():
    req = request(body=b'{"exact": "bytes"}', request_id="abc123")
    _, tr, _ = run(HAPPY, req=req, api_key="sk-test")
    sent = tr.sent[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"] == b'{"exact": "bytes"}'
    assert sent["headers"]["X-Request-Id"] == "abc123"
    assert sent["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["headers"]["Accept"] == "text/event-stream"
    assert sent["read"] == req.stall_timeout_s


def test_no_authorization_without_key():
    _, tr, _ = run(HAPPY)
    assert "Authorization" not in tr.sent[0]["headers"]


def test_request_id_for_is_deterministic_and_unique_per_attempt():
    a = request_id_for(7, "s1", 3, 0)
    assert a == request_id_for(7, "s1", 3, 0)
    assert len(a) == 24 and int(a, 16) >= 0
    others = {
        request_id_for(7, "s1", 3, 1),
        request_id_for(8, "s1", 3, 0),
        request_id_for(7, "s2", 3, 0),
        request_id_for(7, "s1", 4, 0),
        request_id_for(7, "s1", 3, 0, run_tag="b"),
    }
    assert a not in others and len(others) == 5


def test_ensure_stream_options():
    assert ensure_stream_options({"stream": True}) == {
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    b = {"stream": True, "stream_options": {"continuous_usage_stats": False}}
    assert ensure_stream_options(b)["stream_options"] == {
        "continuous_usage_stats": False,
        "include_usage": True,
    }
    assert ensure_stream_options({"stream": False}) == {"stream": False}


# ---------------------------------------------------------------- error kinds


def test_connect_error():
    rec, _, _ = run([], error=TransportError("connect", "refused"))
    assert (rec.status, rec.error_kind) == ("error", "connect")
    assert rec.e2e_ms is None and rec.t_start == 0.0


def test_http_status_with_bounded_excerpt():
    rec, _, _ = run([(3, b'{"error": "' + b"x" * 2000 + b'"}')], status=400)
    assert (rec.status, rec.error_kind, rec.http_status) == ("error", "http_status", 400)
    assert rec.error_detail.startswith("HTTP 400: {")
    assert len(rec.error_detail) <= 500 + len("HTTP 400: ")


def test_stream_reset_keeps_what_was_measured():
    reads = [
        (1, sse(ROLE)),
        (50, sse(chunk({"content": "a"}))),
        (5, TransportError("stream_reset", "connection lost mid-body")),
    ]
    rec, _, resp = run(reads)
    assert (rec.status, rec.error_kind) == ("error", "stream_reset")
    assert rec.ttft_ms == 51.0 and rec.e2e_ms == 56.0 and rec.text == "a"
    assert resp.closed


def test_stall():
    reads = [(1, sse(ROLE)), (5000, TransportError("stall", "no bytes"))]
    rec, _, _ = run(reads)
    assert (rec.status, rec.error_kind) == ("error", "stall")
    assert rec.ttft_ms is None


def test_malformed_chunk_is_an_error_but_the_stream_is_read_to_the_end():
    reads = [
        (1, sse(chunk({"content": "a"}))),
        (1, b"data: {not json\n\n"),
        (1, sse(chunk({"content": "b"}))),
        (1, sse(final_chunk())),
        (1, sse("[DONE]")),
    ]
    rec, _, _ = run(reads)
    assert (rec.status, rec.error_kind) == ("error", "malformed_chunk")
    assert "not JSON" in rec.error_detail
    assert rec.text == "ab" and rec.completion_tokens == 3 and rec.spec_decode == SPEC
    assert rec.e2e_ms == 5.0


@pytest.mark.parametrize(
    "bad",
    [b"data: [1, 2]\n\n", b'data: {"choices": 5}\n\n', b'data: {"choices": [{"delta": "x"}]}\n\n'],
)
def test_wrong_shapes_are_malformed(bad):
    rec, _, _ = run([(1, bad), (1, sse("[DONE]"))])
    assert rec.error_kind == "malformed_chunk"


def test_reset_after_malformed_reports_reset_and_keeps_both():
    reads = [(1, b"data: nope\n\n"), (1, TransportError("stream_reset", "gone"))]
    rec, _, _ = run(reads)
    assert rec.error_kind == "stream_reset"
    assert "malformed_chunk" in rec.error_detail


def test_missing_done():
    rec, _, _ = run([(1, sse(chunk({"content": "a"}))), (1, sse(final_chunk()))])
    assert (rec.status, rec.error_kind) == ("error", "missing_done")
    assert rec.ttft_ms == 1.0 and rec.completion_tokens == 3


def test_empty_200_stream_is_missing_done():
    rec, _, _ = run([])
    assert rec.error_kind == "missing_done"


def test_stream_that_is_not_sse_is_bad_response():
    rec, _, _ = run(
        [(1, b"<html>\n"), (1, b"<body>oops</body>\n")],
    )
    assert rec.error_kind == "bad_response" and "<html>" in rec.error_detail


def test_error_event_mid_stream_is_bad_response():
    rec, _, _ = run(
        [
            (1, sse(chunk({"content": "a"}))),
            (1, sse({"error": {"message": "engine died", "code": 500}})),
            (1, sse("[DONE]")),
        ]
    )
    assert rec.error_kind == "bad_response" and "engine died" in rec.error_detail


def test_cancelled():
    rec, _, resp = run([(1, sse(chunk({"content": "a"}))), (10, GreenletExit())])
    assert (rec.status, rec.error_kind) == ("cancelled", "cancelled")
    assert rec.ttft_ms == 1.0 and resp.closed


def test_timeout_by_deadline_on_the_fake_clock():
    reads = [(1, sse(chunk({"content": "a"})))] + [(400, b": keep-alive\n")] * 100
    rec, _, _ = run(reads, req=request(timeout_s=2.0))
    assert (rec.status, rec.error_kind) == ("error", "timeout")
    assert rec.e2e_ms == 2001.0


@pytest.mark.parametrize("body", [b"<html>no</html>", b'{"object": "list"}', b"[]"])
def test_non_stream_bad_response(body):
    rec, _, _ = run([(1, body)], req=request(stream=False))
    assert (rec.status, rec.error_kind) == ("error", "bad_response")


def test_unexpected_transport_exception_becomes_data():
    rec, _, _ = run([(1, RuntimeError("boom"))])
    assert rec.status == "error" and "boom" in rec.error_detail


# ---------------------------------------------------------------- truthful records (issue 14)


def _one(status, reads, headers=None, stream=True):
    clock = FakeClock()
    resp = FakeResponse(clock, status, reads, headers=headers)
    client = Client(
        "http://t", transport=FakeTransport(clock, resp), clock=clock, wall=lambda: 1000.0
    )
    req = PreparedRequest(
        path="/v1/chat/completions", body=b"{}", stream=stream, endpoint="chat", request_id="r"
    )
    return client.exchange(req)


def test_html_page_on_streaming_call_is_bad_response():
    rec = _one(
        200, [(1, b"<html><body>Gateway says hi</body></html>")], {"content-type": "text/html"}
    )
    assert rec.error_kind == "bad_response"
    assert "text/html" in rec.error_detail and "Gateway says hi" in rec.error_detail


def test_json_body_on_streaming_call_is_bad_response():
    rec = _one(200, [(1, b'{"id": "x"}')], {"content-type": "application/json"})
    assert rec.error_kind == "bad_response" and "not text/event-stream" in rec.error_detail


def test_stream_without_any_choices_is_bad_response():
    rec = _one(200, [(1, b'data: {"id": "x"}\n'), (0, b"\n"), (1, b"data: [DONE]\n"), (0, b"\n")])
    assert rec.error_kind == "bad_response" and "choices" in rec.error_detail


def test_non_stream_json_without_choices_is_bad_response():
    rec = _one(200, [(1, b'{"id": "x", "object": "chat.completion"}')],
               {"content-type": "application/json"}, stream=False)  # fmt: skip
    assert rec.error_kind == "bad_response"


def test_retry_after_recorded_on_429_and_503():
    rec = _one(429, [(1, b"slow down")], {"content-type": "text/plain", "retry-after": "7"})
    assert rec.error_kind == "http_status" and rec.retry_after_s == 7.0
    date = "Thu, 01 Jan 1970 00:16:50 GMT"  # wall 1000 s + 10 s
    rec = _one(503, [(1, b"busy")], {"content-type": "text/plain", "retry-after": date})
    assert rec.retry_after_s == 10.0
    rec = _one(503, [(1, b"busy")], {"content-type": "text/plain", "retry-after": "soon"})
    assert rec.retry_after_s is None
    assert "retry_after_s" in rec.to_json()


def test_parse_retry_after():
    from workload.measure.client import parse_retry_after

    assert parse_retry_after(None, 0) is None
    assert parse_retry_after("nan", 0) is None
    assert parse_retry_after(" 3 ", 0) == 3.0


def test_cancel_during_a_silent_stream_says_how_long_it_was_silent():
    rec = _one(200, [(5, b'data: {"choices": []}\n'), (30_000, GreenletExit())])
    assert rec.status == "cancelled" and "after 30.0s without bytes" in rec.error_detail


def test_records_never_carry_url_credentials():
    clock = FakeClock()
    resp = FakeResponse(clock, 200, [(1, b"data: [DONE]\n")])
    client = Client("http://u:secret@t:9", transport=FakeTransport(clock, resp), clock=clock)
    rec = client.exchange(
        PreparedRequest(path="/v1/x", body=b"{}", stream=True, endpoint="chat", request_id="r")
    )
    assert rec.target == "http://***@t:9" and "secret" not in orjson.dumps(rec.to_json()).decode()


def test_record_carries_the_planned_tool():
    rec, _, _ = run(HAPPY, req=request(planned_tool="read_file"))
    assert rec.planned_tool == "read_file" and rec.to_json()["planned_tool"] == "read_file"
    assert run(HAPPY)[0].planned_tool is None


def test_gap_rounding_is_round_to_the_microsecond():
    """The ITL gaps skip a round() per gap; the floats are the ones round(d / 1e6, 3) gives,
    ties (d % 1000 == 500) and negative gaps included."""
    from workload.measure.client import _gaps_ms

    ds = [0, 1, 499, 500, 501, 999, 1000, 1500, 2500, 20_000_500, 20_001_499, 123_456_789_500]
    ds += [-1, -500, -1500, 7 * 10**12 + 500]
    for d in ds:
        assert repr(_gaps_ms([10**15, 10**15 + d])[0]) == repr(round(d / 1e6, 3)), d
    assert _gaps_ms([5]) == []


# ---------------------------------------------------------------- kernel receive stamps


class StampedResponse(FakeResponse):
    """A transport response with kernel receive stamps: each scripted read also says how long
    before the read returned its newest bytes arrived (``rx_ns`` on the wall_ns clock)."""

    WALL0 = 1_700_000_000 * 10**9

    def __init__(self, clock: FakeClock, reads: list) -> None:
        super().__init__(clock, 200, [(d, item) for d, _age, item in reads])
        self.ages = [age for _d, age, _item in reads]
        self.rx_ns = 0

    def wall_ns(self) -> int:
        return self.WALL0 + self.clock.now  # realtime moves with the fake monotonic clock

    def read_some(self) -> bytes:
        out = self.readline()
        age = self.ages.pop(0) if self.ages else None
        self.rx_ns = 0 if age is None else self.wall_ns() - int(age * MS)
        return out


def run_stamped(reads, **kw):
    clock = FakeClock()
    resp = StampedResponse(clock, reads)
    tr = FakeTransport(clock, resp, header_ms=kw.pop("header_ms", 0.0))
    client = Client("http://fake:1/", transport=tr, clock=clock, wall_ns=resp.wall_ns)
    return client.exchange(request())


def test_kernel_stamps_move_each_read_back_to_when_its_bytes_arrived():
    # read delays (ms after the last read), the kernel's age of the bytes at the read, event
    rec = run_stamped(
        [
            (5, None, sse(ROLE)),  # no kernel stamp for this read: user-space time
            (300, 250, sse(chunk({"content": "Hel"}))),  # arrived at 55 ms, read at 305
            (10, 5, sse(chunk({"content": "lo"}))),  # arrived at 310
            (30, 0, sse(chunk({"content": "!"}, finish="stop"))),  # at 345
            (1, 0.5, sse(final_chunk()) + sse("[DONE]")),  # at 345.5
        ]
    )
    assert rec.status == "ok", rec.error_detail
    assert rec.ttft_ms == 55.0
    assert rec.itl_gaps_ms == [255.0, 35.0]
    assert rec.e2e_ms == 345.5


def test_kernel_stamps_never_go_before_the_previous_read_or_the_send():
    rec = run_stamped(
        [
            (50, 500, sse(chunk({"content": "a"}))),  # "arrived" before the request was sent
            (20, 100, sse(chunk({"content": "b"}))),  # before the previous read's stamp
            (10, -40, sse(chunk({"content": "c"}, finish="stop"))),  # in the future: read time
            (1, 0, sse(final_chunk()) + sse("[DONE]")),
        ],
        header_ms=2,
    )
    assert rec.status == "ok", rec.error_detail
    assert rec.ttft_ms == 0.0  # clamped to the send stamp
    assert rec.itl_gaps_ms == [0.0, 82.0]  # clamped to the previous; then the user-space stamp
    assert rec.e2e_ms == 83.0


def test_an_echoed_api_key_and_bearer_token_never_reach_the_record():
    echo = b'{"error": "bad key in header Authorization: Bearer sk-live-123456 for sk-live-123456"}'
    rec, _, _ = run([(1, echo)], status=401, api_key="sk-live-123456")
    assert rec.error_kind == "http_status" and "sk-live" not in rec.error_detail
    assert "Bearer ***" in rec.error_detail
    other = b'{"error": "proxy saw authorization=Bearer%20abc.def-ghi"}'
    rec, _, _ = run([(1, other)], status=403)
    assert "abc.def" not in rec.error_detail


def test_terminal_escapes_in_server_strings_never_reach_the_record():
    evil = b"<h1>\x1b[2J\x1b]0;pwned\x07down\x00</h1>"
    rec, _, _ = run([(1, evil)], status=500)
    assert "\x1b" not in rec.error_detail and "\x07" not in rec.error_detail
    assert "down" in rec.error_detail
    rec, _, _ = run(
        [
            (1, sse(chunk({"content": "x"}, finish="stop", model="m\x1b]0;t\x07"))),
            (1, sse("[DONE]")),
        ]
    )
    assert rec.model == "m"


def test_a_stream_of_only_done_is_an_empty_response_error():
    rec, _, _ = run([(5, sse("[DONE]"))])
    assert rec.status == "error" and rec.error_kind == "empty_response"
    assert "no content" in rec.error_detail
    assert run(HAPPY)[0].status == "ok"  # a reply with content is answered
