"""Safe output: strings from a server (or a URL from a user) made fit for a terminal or a log.

``sanitize`` drops terminal control characters and escape sequences (a model id or an error
body could otherwise move the cursor, retitle the window or hide text); ``redact_url``
replaces the userinfo of a URL (``http://user:pass@host``) so a password never reaches
stderr, a log or an artifact.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), other two-byte ESC sequences, 8-bit CSI/OSC.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[@-Z\\-_]?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
# C0 controls except tab and newline, DEL, C1 controls, and bidi overrides that reorder text.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def sanitize(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` without escape sequences or control characters (newlines kept only if asked)."""
    s = text if isinstance(text, str) else str(text)
    s = _ESCAPES.sub("", s)
    s = _CONTROLS.sub("", s)
    if not keep_newlines:
        s = s.replace("\n", " ")
    return s


def redact_url(url: object) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``; other text unchanged."""
    s = url if isinstance(url, str) else str(url)
    try:
        parts = urlsplit(s)
    except ValueError:
        return _USERINFO.sub(r"\1***@", s)
    if "@" not in parts.netloc:
        return _USERINFO.sub(r"\1***@", s)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")


def redact_urls_in(text: str) -> str:
    """Every ``scheme://user:pass@`` inside free text redacted (error messages quoting a URL)."""
    return _USERINFO.sub(r"\1***@", text)
