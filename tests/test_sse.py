"""SSE parser: line ends, fields, comments, and arbitrary read splits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workload.measure.sse import SSEEvent, SSEParser


def parse(*chunks: bytes) -> list[SSEEvent]:
    p = SSEParser()
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(p.feed(c))
    out.extend(p.close())
    return out


def test_vllm_style_stream():
    raw = b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
    assert [e.data for e in parse(raw)] == ['{"a":1}', '{"b":2}', "[DONE]"]


def test_events_complete_as_soon_as_blank_line_arrives():
    p = SSEParser()
    assert p.feed(b"data: x\n") == []
    assert [e.data for e in p.feed(b"\n")] == ["x"]


def test_crlf_cr_and_lf_line_ends():
    for nl in (b"\r\n", b"\r", b"\n"):
        raw = b"data: one" + nl + nl + b"data: two" + nl + nl
        assert [e.data for e in parse(raw)] == ["one", "two"], nl


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\n") == []  # the LF of the CRLF, not a blank line
    assert [e.data for e in p.feed(b"\r\n")] == ["a"]


def test_comments_and_keepalives_ignored():
    raw = b": keep-alive\n\n:ping\ndata: x\n: mid\n\n"
    assert [e.data for e in parse(raw)] == ["x"]


def test_multiline_data_joined_with_newline():
    raw = b"data: line1\ndata:line2\ndata\ndata:  spaced\n\n"
    assert [e.data for e in parse(raw)] == ["line1\nline2\n\n spaced"]


def test_event_id_retry_fields():
    raw = b"event: delta\nid: 7\nretry: 150\ndata: x\n\ndata: y\n\n"
    a, b = parse(raw)
    assert (a.event, a.id, a.retry, a.data) == ("delta", "7", 150, "x")
    # event type resets per event; last id persists (spec)
    assert (b.event, b.id, b.data) == ("message", "7", "y")


def test_blank_lines_without_data_dispatch_nothing():
    assert parse(b"\n\n\nevent: x\n\n") == []


def test_trailing_event_without_blank_line_flushed_at_close():
    assert [e.data for e in parse(b"data: a\n\ndata: last")] == ["a", "last"]
    assert [e.data for e in parse(b"data: a\n\ndata: last\n")] == ["a", "last"]


def test_utf8_split_inside_multibyte_character():
    raw = "data: héllo ✓ 😀\n\n".encode()
    cut = raw.index("😀".encode()) + 2
    assert [e.data for e in parse(raw[:cut], raw[cut:])] == ["héllo ✓ 😀"]


def test_invalid_utf8_replaced_not_raised():
    assert parse(b"data: \xff\xfe\n\n")[0].data == "\ufffd\ufffd"


# ---- property: any split of a valid stream parses like the unsplit stream ----

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\0"),
    max_size=30,
)
_nl = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw) -> bytes:
    out = []
    for _ in range(draw(st.integers(0, 6))):
        nl = draw(_nl)
        if draw(st.booleans()):
            out.append(b":" + draw(_text).encode() + nl)
        if draw(st.booleans()):
            out.append(b"event: " + draw(_text).encode() + nl)
        if draw(st.booleans()):
            out.append(b"id: " + draw(_text).encode() + nl)
        for line in draw(st.lists(_text, min_size=1, max_size=3)):
            out.append(b"data: " + line.encode() + nl)
        out.append(nl)
    if draw(st.booleans()):  # an unterminated trailing event
        out.append(b"data: " + draw(_text).encode())
    return b"".join(out)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_arbitrary_splits_parse_identically(data):
    raw = data.draw(streams())
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=False)]
    assert parse(*pieces) == parse(raw)
    # byte-at-a-time is the extreme split
    assert parse(*[raw[i : i + 1] for i in range(len(raw))]) == parse(raw)


def test_cr_inside_a_read_does_not_swallow_the_next_reads_lf():
    # Found by hypothesis: a read holding "\r\r" mid-buffer, cut just before the "\n" ending
    # the following line, used to make the next read's leading "\n" vanish.
    raw = b"data: a\r\rid: 7\ndata: b\n\n"
    cut = raw.index(b"\ndata: b")
    assert parse(raw[:cut], raw[cut:]) == parse(raw)


# ---- feed_data: the client's path, the same parser without event objects ----


def parse_data(*chunks: bytes) -> list[bytes]:
    p = SSEParser()
    out: list[bytes] = []
    for c in chunks:
        out.extend(p.feed_data(c))
    out.extend(p.close_data())
    return out


_bytes_pieces = st.sampled_from(
    [b"data: ", b"data:", b"data", b"event: x", b"id: 7", b"id: a\0b", b"retry: 12", b": c",
     b"\n", b"\r\n", b"\r", b"\n\n", b'{"a":1}', b"\xe2\x82", b"\xac", b"\xff", b"x", b":"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_feed_data_is_the_utf8_of_what_feed_gives(data):
    """Any bytes (invalid UTF-8, CR/LF/CRLF, fields), any split: feed_data hands out the data
    of the same events, as bytes that decode (with replacement) to what feed gives."""
    raw = b"".join(data.draw(st.lists(_bytes_pieces, max_size=30)))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=False)]
    want = [e.data for e in parse(*pieces)]
    assert [d.decode("utf-8", "replace") for d in parse_data(*pieces)] == want


def test_feed_data_passes_data_bytes_through():
    raw = b'data: {"a":1}\n\n: ping\ndata: l1\ndata:l2\n\ndata: \xff\n\ndata: [DONE]\n\n'
    assert parse_data(raw[:9], raw[9:]) == [b'{"a":1}', b"l1\nl2", b"\xff", b"[DONE]"]


def test_an_empty_read_between_the_cr_and_lf_of_a_crlf_keeps_them_one_line_end():
    """Found by the property test above: feed_data spent the pending skip on an empty read."""
    pieces = [b'{"a":1}\ndata: retry: 12retry: 12\r', b"", b"\ndata: "]
    want = [e.data for e in parse(*pieces)]
    assert [d.decode() for d in parse_data(*pieces)] == want == ["retry: 12retry: 12\n"]
