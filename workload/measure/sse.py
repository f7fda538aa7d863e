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
    """Feed raw bytes with ``feed``; call ``close`` once at end of stream."""

    __slots__ = ("_buf", "_skip_lf", "_data", "_event", "_last_id", "_retry", "_has_data")

    def __init__(self) -> None:
        self._buf = b""  # bytes of an incomplete line
        self._skip_lf = False  # previous feed ended with "\r": a leading "\n" belongs to it
        self._data: list[str] = []
        self._has_data = False
        self._event = ""
        self._last_id: str | None = None  # persists across events, as the spec says
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` and return the events it completed (often none)."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        if not self._buf and chunk.find(b"\n") == len(chunk) - 1 and b"\r" not in chunk:
            # fast path: exactly one LF-terminated line, which is what readline() hands us
            ev = self._line(chunk[:-1])
            return [] if ev is None else [ev]
        buf = self._buf + chunk if self._buf else chunk
        events: list[SSEEvent] = []
        if b"\r" not in buf:
            # fast path: LF-only lines, many per read (a socket read with a backlog of events)
            lines = buf.split(b"\n")
            self._buf = lines.pop()
            line = self._line
            for raw in lines:
                ev = line(raw)
                if ev is not None:
                    events.append(ev)
            return events
        start = 0
        for m in _LINE_END.finditer(buf):
            ev = self._line(buf[start : m.start()])
            if ev is not None:
                events.append(ev)
            start = m.end()
        # Only a "\r" that ends this read can be the first half of a CRLF split across reads.
        if start == len(buf) and buf[-1:] == b"\r":
            self._skip_lf = True
        self._buf = buf[start:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: flush an unterminated last line and a pending event."""
        events: list[SSEEvent] = []
        if self._buf:
            ev = self._line(self._buf)
            self._buf = b""
            if ev is not None:
                events.append(ev)
        ev = self._dispatch()
        if ev is not None:
            events.append(ev)
        return events

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            return self._dispatch()
        if raw[:6] == b"data: ":  # the common line, decoded as the general path below would
            self._data.append(raw[6:].decode("utf-8", "replace"))
            self._has_data = True
            return None
        if raw[:1] == b":":  # comment / keep-alive
            return None
        line = raw.decode("utf-8", "replace")
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._has_data:
            self._event = ""
            return None
        data = self._data
        ev = SSEEvent(
            data=data[0] if len(data) == 1 else "\n".join(data),
            event=self._event or "message",
            id=self._last_id,
            retry=self._retry,
        )
        self._data = []
        self._has_data = False
        self._event = ""
        return ev
