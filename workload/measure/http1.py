"""HTTP/1.1 framing: heads parsed, bodies decoded beside the raw bytes.

The recording proxy (workload.record) forwards what it reads as it reads it; these helpers
only tell it where a message ends (Content-Length, chunked, or the connection's close) and
hand back the decoded body for the record. The calibration's kernel-stamped reader
(workload.sim.stamped) frames its responses with the same pieces. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024  # a request or response head larger than this is refused


class FramingError(Exception):
    """A message that is not HTTP/1.1 as this proxy reads it (private: becomes a 400/502)."""


@dataclass(slots=True)
class Head:
    """A parsed request or response head; ``raw`` is the bytes as they came (CRLFCRLF included)."""

    start: tuple[str, str, str]  # (method, target, version) or (version, status, reason)
    headers: list[tuple[str, str]]  # names as sent, in order
    raw: bytes

    def get(self, name: str, default: str = "") -> str:
        """The first header ``name`` (case-insensitive)."""
        low = name.lower()
        for k, v in self.headers:
            if k.lower() == low:
                return v
        return default

    def tokens(self, name: str) -> set[str]:
        """Comma-separated values of every ``name`` header, lower-cased."""
        low = name.lower()
        out: set[str] = set()
        for k, v in self.headers:
            if k.lower() == low:
                out.update(t.strip().lower() for t in v.split(",") if t.strip())
        return out

    @property
    def version(self) -> str:
        return self.start[2] if self.start[0][:5] != "HTTP/" else self.start[0]

    def keep_alive(self) -> bool:
        """Whether the connection stays open after this message (RFC 9112 9.3)."""
        conn = self.tokens("connection")
        if "close" in conn:
            return False
        return self.version == "HTTP/1.1" or "keep-alive" in conn

    def body_kind(self) -> tuple[str, int]:
        """('chunked', 0) | ('length', n) | ('none', 0) for a request (see ``response_body_kind``)."""
        if "chunked" in self.tokens("transfer-encoding"):
            return "chunked", 0
        cl = self.get("content-length")
        if cl:
            try:
                n = int(cl)
            except ValueError:
                raise FramingError(f"bad Content-Length {cl!r}") from None
            if n < 0:
                raise FramingError(f"bad Content-Length {cl!r}")
            return "length", n
        return "none", 0


def parse_head(raw: bytes) -> Head:
    """A head from its bytes (request line or status line, then headers); FramingError."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity
        raise FramingError("undecodable head") from None
    lines = text.rstrip("\r\n").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2:
        raise FramingError(f"bad start line {lines[0][:80]!r}")
    start = (parts[0], parts[1], parts[2] if len(parts) > 2 else "")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise FramingError(f"bad header line {line[:80]!r}")
        headers.append((name, value.strip()))
    return Head(start, headers, raw)


def response_body_kind(head: Head, method: str) -> tuple[str, int]:
    """How a response's body is framed: none, length n, chunked, or until the close ('close')."""
    status = int(head.start[1]) if head.start[1].isdigit() else 0
    if method == "HEAD" or status < 200 or status in (204, 304):
        return "none", 0
    kind, n = head.body_kind()
    return ("close", 0) if kind == "none" else (kind, n)


def replace_host(head: Head, host: str, target: str) -> bytes:
    """The request head with its Host header set to ``host`` and its target to ``target``;
    every other byte as it came."""
    method, _, version = head.start
    out = [f"{method} {target} {version}".encode("latin-1")]
    seen = False
    for line in head.raw.split(b"\r\n")[1:]:
        if not line:
            continue
        if line[:5].lower() == b"host:":
            if seen:
                continue
            seen = True
            out.append(b"Host: " + host.encode("latin-1"))
        else:
            out.append(line)
    if not seen:
        out.insert(1, b"Host: " + host.encode("latin-1"))
    return b"\r\n".join(out) + b"\r\n\r\n"


class ChunkedDecoder:
    """Incremental decoder of a chunked body: ``feed(raw)`` -> decoded bytes; ``done`` at the end.

    ``feed`` returns how many of the raw bytes belonged to the body (a keep-alive peer may send
    the next message right behind it); trailers are skipped.
    """

    __slots__ = ("_buf", "_left", "_state", "done")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._left = 0  # data bytes still to come in the current chunk
        self._state = "size"  # size | data | crlf | trailer
        self.done = False

    def feed(self, raw: bytes, out: bytearray) -> int:
        """Decode ``raw`` into ``out``; the number of bytes of ``raw`` that were the body's."""
        i, n = 0, len(raw)
        while i < n and not self.done:
            if self._state == "data":
                take = min(self._left, n - i)
                out += raw[i : i + take]
                i += take
                self._left -= take
                if self._left == 0:
                    self._state = "crlf"
                continue
            j = raw.find(b"\n", i)
            if j < 0:
                self._buf += raw[i:]
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise FramingError("chunk header too long")
                return n
            line = bytes(self._buf) + raw[i:j]
            self._buf.clear()
            i = j + 1
            line = line.rstrip(b"\r")
            if self._state == "crlf":
                if line:
                    raise FramingError("chunk data not followed by CRLF")
                self._state = "size"
            elif self._state == "size":
                try:
                    self._left = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise FramingError(f"bad chunk size {line[:40]!r}") from None
                self._state = "trailer" if self._left == 0 else "data"
            elif not line:  # the empty line after the last chunk (and any trailers)
                self.done = True
        return i
