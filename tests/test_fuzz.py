"""Property-based fuzzing (issue 14): hostile input never escapes as an unexpected exception.

The profile loader raises only ProfileError, the SSE parser and the client never raise, and
the artifact readers skip (and count) what they cannot read. Each property is bounded.
"""

from __future__ import annotations

import contextlib
import string
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workload.analyze.rundata import load_run
from workload.errors import CompareError
from workload.measure.artifacts import iter_jsonl, read_json
from workload.measure.records import ERROR_KINDS
from workload.measure.sse import SSEParser
from workload.observe.metrics import read_samples
from workload.plan.loading import ProfileError, apply_overrides, load_profile, validate_profile

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_KEYS = st.sampled_from(
    ["classes", "agent", "steps", "weight", "output", "tokens", "dist", "value", "low", "high",
     "tools", "think_time_s", "user_turn", "timeouts", "stall_s", "seed", "run", "users",
     "schema_version", "extends", "min", "max", "components", "x"]
)  # fmt: skip
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_TREES = st.recursive(
    _SCALARS,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.one_of(_KEYS, st.text(max_size=8)), kids, max_size=5),
    ),
    max_leaves=30,
)
_YAMLISH = st.text(
    alphabet=st.sampled_from(list(string.printable) + ["&", "*", "é", "\x00", "\ufeff"]),
    max_size=300,
)


@FUZZ
@given(_TREES)
def test_validate_profile_raises_only_profile_error(tree):
    try:
        validate_profile(tree, label="fuzz")
    except ProfileError as e:
        assert e.problems and all(isinstance(p, str) and p for p in e.problems)


@FUZZ
@given(st.one_of(_YAMLISH, st.binary(max_size=300)))
def test_load_profile_file_raises_only_profile_error(content):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "fuzz.yaml"
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8", errors="surrogatepass")
        try:
            load_profile(str(p))
        except ProfileError as e:
            assert e.problems


@settings(max_examples=60, deadline=None)  # each example reads and validates a built-in
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(
                "{}={}".format,
                st.sampled_from(
                    ["classes.agent.steps", "classes.agent", "classes.agnt.weight", "seed",
                     "classes.agent.output.tokens", "tools.x", "classes..x", "run.users", "classes"]
                ),
                st.one_of(_YAMLISH, st.sampled_from([".nan", "-3", "0", "[1, 2]", "{dist: x}", "*a"])),
            ),
        ),
        max_size=4,
    )
)  # fmt: skip
def test_set_overrides_raise_only_profile_error(items):
    try:
        load_profile("quickstart", items)
    except ProfileError as e:
        assert all(p.startswith(("--set", "/", "quickstart")) or ":" in p for p in e.problems)


@FUZZ
@given(_TREES, st.lists(st.text(max_size=30), max_size=3))
def test_apply_overrides_on_any_tree(tree, items):
    raw = tree if isinstance(tree, dict) else {"x": tree}
    with contextlib.suppress(ProfileError):
        apply_overrides(raw, items)


# ---------------------------------------------------------------- SSE


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return out


_SSE_BYTES = st.lists(
    st.one_of(
        st.sampled_from([b"data: ", b"data:", b"event: x", b": ping", b"id: 1", b"retry: 5",
                         b"\n", b"\r", b"\r\n", b"\n\n", b"[DONE]", b'{"a":1}', b"\xff\xfe", b"\xe2\x82"]),
        st.binary(max_size=12),
    ),
    max_size=30,
).map(b"".join)  # fmt: skip


@FUZZ
@given(_SSE_BYTES, st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_sse_parser_never_raises_and_ignores_how_bytes_are_split(data, cuts):
    whole = SSEParser()
    expect = whole.feed(data) + whole.close()
    parts = SSEParser()
    got = []
    for chunk in _split(data, cuts):
        got += parts.feed(chunk)
    got += parts.close()
    assert [(e.data, e.event, e.id) for e in got] == [(e.data, e.event, e.id) for e in expect]


@FUZZ
@given(_SSE_BYTES, st.sampled_from(["text/event-stream", "text/html", ""]), st.booleans())
def test_client_records_any_reply_without_raising(data, ctype, stream):
    from tests.test_client import FakeClock, FakeResponse, FakeTransport
    from workload.measure.client import Client
    from workload.measure.transport import PreparedRequest

    clock = FakeClock()
    lines = [(1, ln) for ln in data.splitlines(keepends=True)]
    resp = FakeResponse(clock, 200, lines, headers={"content-type": ctype} if ctype else {})
    client = Client("http://t", transport=FakeTransport(clock, resp), clock=clock)
    req = PreparedRequest(
        path="/v1/chat/completions", body=b"{}", stream=stream, endpoint="chat", request_id="r"
    )
    rec = client.exchange(req)
    assert rec.error_kind is None or rec.error_kind in ERROR_KINDS
    orjson.dumps(rec.to_json())


# ---------------------------------------------------------------- artifact readers

_LINES = st.lists(
    st.one_of(
        st.sampled_from([b'{"user_class": "a", "status": "ok", "ttft_ms": 5}', b"[1]", b"null",
                         b"{", b"\xff", b'"s"', b"", b'{"values": {"x": 1}, "t": 1}']),
        st.binary(max_size=20).filter(lambda b: b"\n" not in b and b"\r" not in b),
    ),
    max_size=20,
)  # fmt: skip


@FUZZ
@given(_LINES)
def test_iter_jsonl_counts_what_it_skips(lines):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "requests.jsonl"
        p.write_bytes(b"\n".join(lines))
        skipped: list[str] = []
        rows = list(iter_jsonl(p, skipped, objects=True))
        nonblank = sum(1 for ln in lines if ln.strip())
        assert len(rows) + len(skipped) == nonblank
        assert all(isinstance(r, dict) for r in rows)
        assert isinstance(read_samples(p), list)


@FUZZ
@given(_LINES, _LINES, st.binary(max_size=60))
def test_load_run_never_raises_unexpectedly(req_lines, ses_lines, run_json):
    with tempfile.TemporaryDirectory() as d:
        run = Path(d)
        (run / "requests.jsonl").write_bytes(b"\n".join(req_lines))
        (run / "sessions.jsonl").write_bytes(b"\n".join(ses_lines))
        (run / "run.json").write_bytes(run_json)
        try:
            data = load_run(run)
        except CompareError:
            return
        assert data.skipped_lines >= 0


@FUZZ
@given(st.binary(max_size=60))
def test_read_json_raises_only_value_error(blob):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.json"
        p.write_bytes(blob)
        with contextlib.suppress(ValueError):
            read_json(p)
