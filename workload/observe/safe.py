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


# "Bearer <token>" as an echoed Authorization header or a quoted one ("Bearer sk-…").
_BEARER = re.compile(r"(?i)\b(bearer)(\s+|%20)[^\s\"'<>,;&]+")


def redact_secrets(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """``text`` with every ``Bearer <token>`` and every value in ``secrets`` (the API key)
    replaced by ``***``: a proxy that echoes the request's Authorization header in its
    error body must not put the key into requests.jsonl or report.html."""
    for secret in secrets:
        if secret and len(secret) >= 4:  # a one-letter "key" would blank the whole text
            text = text.replace(secret, "***")
    return _BEARER.sub(r"\1 ***", text)


def clean_server_text(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """A server string fit to store and show: no control characters or escape sequences,
    no credentials (URL userinfo, Bearer tokens, the API key)."""
    return redact_urls_in(redact_secrets(sanitize(text), secrets))
