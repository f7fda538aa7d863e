"""Incremental Server-Sent Events parser: bytes in, events out.

Follows the WHATWG event-stream rules (https://html.spec.whatwg.org/#event-stream-interpretation)
with one deliberate difference: an event still being collected when the stream closes is
dispatched by ``close()`` instead of being dropped, because a server that closes right after its
last ``data:`` line has still told us something worth measuring.

Bytes may be split anywhere across ``feed`` calls: inside a UTF-8 character (lines are decoded
only once complete, and ``\\r``/``\\n`` never occur inside a multibyte sequence) and between the
``\\r`` and ``\\n`` of a CRLF (a trailing ``\\r`` ends the line at once and a ``\\n`` that starts
the next feed is skipped). No timing happens here; the caller stamps reads before feeding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event; ``data`` lines are joined with ``\\n``."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEParser:
    """Feed raw bytes with ``feed``; call ``close`` once at end of stream.

    ``feed_data`` / ``close_data`` are the same parser for a caller that only wants each
    event's data: the UTF-8 bytes of what ``SSEEvent.data`` would hold, without building an
    event object or decoding. Bytes that are not valid UTF-8 are passed through as they came;
    ``.decode("utf-8", "replace")`` gives what ``feed`` returns. A parser is fed one way.
    """

    __slots__ = ("_buf", "_skip_lf", "_data", "_event", "_last_id", "_retry")

    def __init__(self) -> None:
        self._buf = b""  # bytes of an incomplete line
        self._skip_lf = False  # previous feed ended with "\r": a leading "\n" belongs to it
        self._data: list[bytes] = []  # the event's data lines so far (non-empty: has data)
        self._event = ""
        self._last_id: str | None = None  # persists across events, as the spec says
        self._retry: int | None = None

    def _take(self, chunk: bytes) -> bytes:
        """``chunk`` less a "\n" that ends a CRLF split across reads."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                return chunk[1:]
        return chunk

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` and return the events it completed (often none)."""
        if not chunk:
            return []
        chunk = self._take(chunk)
        if not chunk:
            return []
        if not self._buf and chunk.find(b"\n") == len(chunk) - 1 and b"\r" not in chunk:
            # fast path: exactly one LF-terminated line, which is what readline() hands us
            if self._line(chunk[:-1]):
                ev = self._dispatch()
                return [] if ev is None else [ev]
            return []
        events: list[SSEEvent] = []
        for raw in self._lines(chunk):
            if self._line(raw):
                ev = self._dispatch()
                if ev is not None:
                    events.append(ev)
        return events

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Parse ``chunk``; return the data of the events it completed (see the class doc)."""
        if not chunk:  # before _take: an empty read must not spend a pending CRLF's skip
            return []
        if self._skip_lf:
            chunk = self._take(chunk)
        if not chunk:
            return []
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            lines = self._lines(chunk)
        else:  # LF-only lines, many per read (a socket read with a backlog of events)
            lines = buf.split(b"\n")
            self._buf = lines.pop()
        out: list[bytes] = []
        data = self._data
        for raw in lines:
            if not raw:  # blank line: dispatch
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = self._data = []
                self._event = ""
            elif raw[:6] == b"data: ":  # the common line
                data.append(raw[6:])
            else:
                self._line(raw)  # appends to the same ``data`` list
        return out

    def _lines(self, chunk: bytes) -> list[bytes]:
        """The complete lines of the buffer plus ``chunk`` (CR, LF or CRLF); keeps the rest."""
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" not in buf:
            lines = buf.split(b"\n")
            self._buf = lines.pop()
            return lines
        lines = []
        start = 0
        for m in _LINE_END.finditer(buf):
            lines.append(buf[start : m.start()])
            start = m.end()
        # Only a "\r" that ends this read can be the first half of a CRLF split across reads.
        if start == len(buf) and buf[-1:] == b"\r":
            self._skip_lf = True
        self._buf = buf[start:]
        return lines

    def close(self) -> list[SSEEvent]:
        """End of stream: flush an unterminated last line and a pending event."""
        if self._buf:
            self._line(self._buf)
            self._buf = b""
        ev = self._dispatch()
        return [] if ev is None else [ev]

    def close_data(self) -> list[bytes]:
        """``close`` for ``feed_data``: the data of a pending event, if any."""
        if self._buf:
            self._line(self._buf)
            self._buf = b""
        data = self._data
        self._data = []
        self._event = ""
        return [b"\n".join(data)] if data else []

    def _line(self, raw: bytes) -> bool:
        """Take one line; True when it is blank (the caller dispatches)."""
        if not raw:
            return True
        if raw[:6] == b"data: ":  # the common line
            self._data.append(raw[6:])
            return False
        if raw[:1] == b":":  # comment / keep-alive
            return False
        # Field names are ASCII and b":" never occurs inside a UTF-8 sequence, so splitting the
        # bytes gives what splitting the decoded line would; values are decoded where kept.
        name, sep, value = raw.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():  # bytes.isdigit: ASCII digits only
            self._retry = int(value)
        return False

    def _dispatch(self) -> SSEEvent | None:
        data = self._data
        if not data:
            self._event = ""
            return None
        ev = SSEEvent(
            data=(data[0] if len(data) == 1 else b"\n".join(data)).decode("utf-8", "replace"),
            event=self._event or "message",
            id=self._last_id,
            retry=self._retry,
        )
        self._data = []
        self._event = ""
        return ev
