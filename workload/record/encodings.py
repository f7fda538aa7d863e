"""Content-Encoding for the record: bodies are forwarded as they came, decoded only to be read.

gzip, x-gzip and deflate (zlib-wrapped or raw) always; br when the ``brotli`` module is
importable, zstd when ``zstandard`` is. A body in any other coding, or one that does not
decode, is not read: its exchange is marked "not parsed: encoding X" and counts nothing.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from types import ModuleType


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:  # bodies in its coding are then forwarded but not read
        return None


brotli = _optional("brotli")
zstandard = _optional("zstandard")

MAX_DECODED = 256 << 20  # a body that inflates past this is not read (a compression bomb)


def _gzip(b: bytes) -> bytes:
    d = zlib.decompressobj(47)  # 32 + 15: a gzip or a zlib header
    out = d.decompress(b, MAX_DECODED)
    if d.unconsumed_tail:
        raise ValueError("it inflates past 256 MiB")
    return out


def _deflate(b: bytes) -> bytes:
    try:
        return _gzip(b)  # "deflate" is the zlib format (RFC 9110 8.4.1.2) ...
    except zlib.error:
        d = zlib.decompressobj(-15)  # ... which some servers send without its header
        out = d.decompress(b, MAX_DECODED)
        if d.unconsumed_tail:
            raise ValueError("it inflates past 256 MiB") from None
        return out


def _brotli(b: bytes) -> bytes:
    assert brotli is not None
    out: bytes = brotli.decompress(b)
    return out


def _zstd(b: bytes) -> bytes:
    assert zstandard is not None
    out: bytes = zstandard.ZstdDecompressor().decompress(b, max_output_size=MAX_DECODED)
    return out


def decoders() -> dict[str, Callable[[bytes], bytes]]:
    """The codings this process can read."""
    out: dict[str, Callable[[bytes], bytes]] = {"gzip": _gzip, "x-gzip": _gzip, "deflate": _deflate}
    if brotli is not None:
        out["br"] = _brotli
    if zstandard is not None:
        out["zstd"] = _zstd
    return out


DECODERS = decoders()


def decode_body(body: bytes, encoding: str) -> tuple[bytes, str | None]:
    """(the body as its sender wrote it before coding, None) or (body, why it is not read).

    ``encoding`` is the Content-Encoding header as sent (codings applied in order)."""
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings or not body:
        return body, None
    for c in reversed(codings):
        dec = DECODERS.get(c)
        if dec is None:
            return body, f"not parsed: encoding {c}"
        try:
            body = dec(body)
        except Exception as e:  # noqa: BLE001 - each codec raises its own error type
            return body, f"not parsed: encoding {c} ({type(e).__name__}: {e})"[:200]
    return body, None
