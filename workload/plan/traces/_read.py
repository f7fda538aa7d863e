"""Trace readers: Mooncake JSONL, Azure LLM inference CSV, run requests.jsonl, our own JSONL.

Every format becomes a list of ``TraceRequest`` (arrival offset in seconds from
the first request, input and output tokens, Mooncake block hash ids when the
format has them, a session key when it has one). Formats::

    mooncake   {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}
               timestamp in ms; one hash id per 512-token block of the prompt
               (len(hash_ids) == ceil(input_length / 512)); equal ids, equal blocks.
               An optional "session_id" (written by `agentload trace export`) is kept.
    azure      TIMESTAMP,ContextTokens,GeneratedTokens
               2023-11-16 18:17:03.9799600,4808,10
               (2023 and 2024 schema; up to 9 fractional digits, optional Z/+00:00)
    requests   a run's requests.jsonl (or a run directory: requests*.jsonl merged):
               t_start (unix s), prompt_tokens, completion_tokens, session_id
    agentload  {"arrival_s": 0.0, "input_tokens": 6758, "output_tokens": 500,
                "hash_ids": [0, 1] | null, "session": "abc" | null}
               what `agentload trace import -o` writes (lossless for the above)

A line that cannot be read is a ``BadLine`` naming file and line. With
``on_bad_line="stop"`` the first one raises ``TraceError``; with ``"skip"`` it
is counted in ``Trace.bad_lines`` and reading goes on. Nothing is dropped
without a BadLine.
"""

from __future__ import annotations

import csv
import datetime as _dt
import math
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from workload.errors import TraceError

BLOCK_TOKENS = 512  # Mooncake block size (tokens per hash id)
# The largest trace file read (a Mooncake or Azure trace of millions of requests is a few
# hundred MiB); past it, or on a FIFO or a device (/dev/zero), reading would not end.
MAX_TRACE_BYTES = 4 << 30
FORMATS = ("mooncake", "azure", "requests", "agentload")
OnBadLine = Literal["skip", "stop"]


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace. Times in seconds, sizes in tokens."""

    arrival_s: float  # offset from the trace's first request (before any speedup)
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None  # one id per BLOCK_TOKENS block of the prompt
    session: str | None = None  # conversation / session key when the format has one

    def to_json(self) -> dict[str, Any]:
        """The row of our own JSONL format ('agentload')."""
        return {
            "arrival_s": round(self.arrival_s, 6),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "hash_ids": list(self.hash_ids) if self.hash_ids is not None else None,
            "session": self.session,
        }


@dataclass(frozen=True, slots=True)
class BadLine:
    path: str
    line: int  # 1-based
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(slots=True)
class Trace:
    """Requests in arrival order, plus where they came from and what could not be read."""

    requests: list[TraceRequest]
    source: str
    format: str
    bad_lines: list[BadLine] = field(default_factory=list)
    block_tokens: int = BLOCK_TOKENS
    # A run directory's prefix reuse: how it was kept, or why not ("" for other formats).
    reuse: str = ""

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0

    @property
    def has_hash_ids(self) -> bool:
        return bool(self.requests) and all(r.hash_ids is not None for r in self.requests)


class _Bad(Exception):
    """A row problem; becomes a BadLine with file and line."""


# ------------------------------------------------------------------------- detection
def check_trace_file(p: Path) -> None:
    """A regular file of at most MAX_TRACE_BYTES, checked before it is opened (a FIFO is
    never opened: that would block); TraceError otherwise."""
    try:
        st = p.stat()
    except OSError as e:
        raise TraceError(f"{p}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or special file"
        raise TraceError(f"{p} is {what}, not a trace file: give a regular file")
    if st.st_size > MAX_TRACE_BYTES:
        raise TraceError(
            f"{p} is {st.st_size >> 20} MiB, larger than the {MAX_TRACE_BYTES >> 20} MiB a "
            "trace may be: cut it (e.g. head -n) or use --limit on a shorter file"
        )


def detect_format(path: str | Path) -> str:
    """The format of a trace file (or 'requests' for a run directory); TraceError if unknown."""
    p = Path(path)
    if not p.is_dir():
        check_trace_file(p)
    if p.is_dir():
        if any(p.glob("requests*.jsonl")):
            return "requests"
        raise TraceError(f"{p}: a directory without requests*.jsonl (not a run directory)")
    first = ""
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    first = line.strip()
                    break
    except OSError as e:
        raise TraceError(f"{p}: cannot read ({e.strerror or e})") from None
    if not first:
        raise TraceError(f"{p}: empty file, nothing to import")
    if first.startswith("{"):
        try:
            keys = set(orjson.loads(first))
        except orjson.JSONDecodeError:
            raise TraceError(f"{p}:1: first line is not valid JSON") from None
        if "arrival_s" in keys:
            return "agentload"
        if "input_length" in keys or "hash_ids" in keys:
            return "mooncake"
        if "t_start" in keys or "prompt_tokens" in keys:
            return "requests"
    else:
        cols = {c.strip() for c in first.split(",")}
        if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
            return "azure"
    raise TraceError(
        f"{p}: cannot detect the trace format from its first line {first[:80]!r}; "
        f"give one of {', '.join(FORMATS)}"
    )


# ------------------------------------------------------------------------- rows
def _int(row: dict[str, Any], key: str, lo: int) -> int:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or int(v) != v:
        raise _Bad(f"{key} must be a whole number, got {v!r}")
    if v < lo:
        raise _Bad(f"{key} must be >= {lo}, got {v!r}")
    return int(v)


def _time(row: dict[str, Any], key: str) -> float:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _Bad(f"{key} must be a number, got {v!r}")
    return float(v)


def _hash_ids(
    row: dict[str, Any], key: str, input_tokens: int, required: bool
) -> tuple[int, ...] | None:
    v = row.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v
    ):
        raise _Bad(f"{key} must be a list of non-negative integers")
    need = math.ceil(input_tokens / BLOCK_TOKENS)
    if len(v) != need:
        raise _Bad(
            f"{len(v)} hash_ids for {input_tokens} input tokens (need ceil(n/{BLOCK_TOKENS}) = {need})"
        )
    return tuple(v)


def _json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield n, orjson.loads(line)
            except orjson.JSONDecodeError as e:
                yield n, _Bad(f"not valid JSON ({e.args[0] if e.args else e})")


def _mooncake(row: dict[str, Any]) -> tuple[float, int, int, tuple[int, ...] | None, str | None]:
    inp = _int(row, "input_length", 1)
    out = _int(row, "output_length", 0)
    sess = row.get("session_id")
    return (
        _time(row, "timestamp") / 1000.0,
        inp,
        out,
        _hash_ids(row, "hash_ids", inp, True),
        (str(sess) if sess is not None else None),
    )


def _agentload(row: dict[str, Any]) -> tuple[float, int, int, tuple[int, ...] | None, str | None]:
    inp = _int(row, "input_tokens", 1)
    out = _int(row, "output_tokens", 0)
    sess = row.get("session")
    return (
        _time(row, "arrival_s"),
        inp,
        out,
        _hash_ids(row, "hash_ids", inp, False),
        (str(sess) if sess is not None else None),
    )


def _requests(row: dict[str, Any]) -> tuple[float, int, int, tuple[int, ...] | None, str | None]:
    if row.get("prompt_tokens") is None:
        raise _Bad(f"no prompt_tokens (request status {row.get('status')!r}: no usage reported)")
    inp = _int(row, "prompt_tokens", 1)
    out = 0 if row.get("completion_tokens") is None else _int(row, "completion_tokens", 0)
    sess = row.get("session_id")
    return _time(row, "t_start"), inp, out, None, (str(sess) if sess else None)


_ROW = {"mooncake": _mooncake, "agentload": _agentload, "requests": _requests}

_AZURE_TS = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?$"
)


def parse_azure_timestamp(text: str) -> float:
    """'2023-11-16 18:17:03.9799600' (7 fractional digits; Z or +00:00 allowed) -> unix seconds."""
    m = _AZURE_TS.match(text.strip())
    if not m:
        raise _Bad(f"TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS[.fffffff][+HH:MM]'")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    offset = 0
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    try:
        base = _dt.datetime(
            int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=_dt.timezone.utc
        )
    except ValueError as e:
        raise _Bad(f"TIMESTAMP {text!r}: {e}") from None
    # Fractions kept as a separate float: datetime would round 7 digits to microseconds.
    return base.timestamp() - offset + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _azure_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh)
        header: list[str] | None = None
        for row in reader:
            n = reader.line_num
            if not row or not any(c.strip() for c in row):
                continue
            if header is None:
                header = [c.strip() for c in row]
                missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(header)
                if missing:
                    raise TraceError(
                        f"{path}:{n}: Azure CSV header lacks {', '.join(sorted(missing))}"
                    )
                continue
            if len(row) != len(header):
                yield n, _Bad(f"{len(row)} fields, the header has {len(header)}")
                continue
            yield n, dict(zip(header, (c.strip() for c in row), strict=True))


def _azure(row: dict[str, Any]) -> tuple[float, int, int, tuple[int, ...] | None, str | None]:
    vals: dict[str, Any] = {}
    for k in ("ContextTokens", "GeneratedTokens"):
        try:
            vals[k] = int(row[k])
        except ValueError:
            raise _Bad(f"{k} must be a whole number, got {row[k]!r}") from None
    return (
        parse_azure_timestamp(row["TIMESTAMP"]),
        _int(vals, "ContextTokens", 1),
        _int(vals, "GeneratedTokens", 0),
        None,
        None,
    )


# ------------------------------------------------------------------------- read
def read_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    limit: int | None = None,
    on_bad_line: OnBadLine = "skip",
) -> Trace:
    """Read a trace file (or a run directory) into arrival-ordered TraceRequests.

    ``limit`` keeps the first N readable rows of the file; ``on_bad_line`` is
    "skip" (count and report in ``bad_lines``) or "stop" (raise TraceError).
    Arrival offsets start at 0 at the earliest request.
    """
    if on_bad_line not in ("skip", "stop"):
        raise ValueError(f"on_bad_line must be 'skip' or 'stop', not {on_bad_line!r}")
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    kind = detect_format(p) if fmt == "auto" else fmt
    if kind not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; use auto or one of {', '.join(FORMATS)}")
    files = sorted(p.glob("requests*.jsonl")) if p.is_dir() else [p]
    convert = _azure if kind == "azure" else _ROW[kind]
    rows: list[tuple[float, int, int, tuple[int, ...] | None, str | None]] = []
    bad: list[BadLine] = []
    for f in files:
        check_trace_file(f)
        source = _azure_rows(f) if kind == "azure" else _json_rows(f)
        for n, row in source:
            if limit is not None and len(rows) >= limit:
                break
            try:
                if isinstance(row, _Bad):
                    raise row
                if not isinstance(row, dict):
                    raise _Bad("not a JSON object")
                rows.append(convert(row))
            except _Bad as e:
                b = BadLine(str(f), n, str(e))
                if on_bad_line == "stop":
                    raise TraceError(f"{b} (use --on-bad-line skip to skip such lines)") from None
                bad.append(b)
    rows.sort(key=lambda r: r[0])  # stable: equal timestamps keep file order
    t0 = rows[0][0] if rows else 0.0
    reqs = [TraceRequest(t - t0, i, o, h, s) for t, i, o, h, s in rows]
    return Trace(reqs, str(p), kind, bad)


def write_trace(trace: Trace | list[TraceRequest], path: str | Path) -> int:
    """Write requests in our own JSONL format ('agentload'); returns the row count."""
    reqs = trace.requests if isinstance(trace, Trace) else trace
    with open(path, "wb") as fh:
        for r in reqs:
            fh.write(orjson.dumps(r.to_json()) + b"\n")
    return len(reqs)
