"""The run directory: what a run leaves behind for people and scripts.

Layout (documented in docs/artifacts.md)::

    runs/<timestamp>/
      run.json              run id, times, argv, resolved profile, seed, labels,
                            target facts, fingerprint, summary, SLO results, exit code
      stats.json            mergeable aggregate (Aggregate.to_dict)
      requests.jsonl        one line per request attempt (requests-<worker>.jsonl
                            per worker in distributed runs), appended as each completes
      sessions.jsonl        one line per session (sessions-<worker>.jsonl likewise)
      metrics.jsonl         server /metrics samples over time
      report.html, junit.xml

JSONL files are appended and flushed line by line so a crash loses nothing that
had finished.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

SCHEMA_VERSION = 1


def new_run_id() -> str:
    """A short unique id for one run (wall-clock label plus randomness)."""
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def default_out_dir(run_id: str) -> Path:
    return Path("runs") / run_id


def iso_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


class JsonlWriter:
    """Append-only JSON-lines file, flushed after every line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[bytes] | None = None
        self.lines = 0

    def write(self, obj: Any) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "ab")  # noqa: SIM115 - long-lived handle, closed in close()
        self._fh.write(_dumps(obj) + b"\n")
        self._fh.flush()
        self.lines += 1

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class RunWriter:
    """Per-process writer of request and session lines (one file pair per worker)."""

    def __init__(self, out_dir: Path, worker: str | None = None) -> None:
        self.out_dir = Path(out_dir)
        suffix = f"-{worker}" if worker is not None else ""
        self.requests = JsonlWriter(self.out_dir / f"requests{suffix}.jsonl")
        self.sessions = JsonlWriter(self.out_dir / f"sessions{suffix}.jsonl")

    def close(self) -> None:
        self.requests.close()
        self.sessions.close()


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write a whole file atomically: a temp file beside it, flushed and synced, then renamed.

    Every summary artifact (run.json, stats.json, junit.xml, report.html) is written
    this way, so a run stopped mid-write (a second Ctrl-C, a kill) leaves either the
    previous complete file or none, never half a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    payload = data.encode() if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temp file + rename) so readers never see half a file."""
    write_atomic(
        path,
        orjson.dumps(
            obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
        ),
    )


def count_lines(run_dir: Path, kind: str) -> int:
    """Complete lines in `kind`*.jsonl ('requests' | 'sessions'), over every worker's file."""
    n = 0
    for p in Path(run_dir).glob(f"{kind}*.jsonl"):
        with open(p, "rb") as fh:
            for line in fh:
                if line.endswith(b"\n") and line.strip():
                    n += 1
    return n


def read_json(path: Path) -> Any:
    """One JSON file; raises OSError or ValueError (orjson.JSONDecodeError) when unusable."""
    return orjson.loads(Path(path).read_bytes())


def iter_jsonl(
    path: Path, skipped: list[str] | None = None, *, objects: bool = False
) -> Iterator[Any]:  # parsed JSON: dicts with objects=True
    """Yield objects from one JSONL file; a line that is not JSON is skipped, never raised.

    Pass a list as ``skipped`` to learn what was left out: one ``"file:line: why"`` entry per
    corrupt line (a torn last line from a killed run counts too). ``objects=True`` also skips
    (and counts) lines that are JSON but not an object.
    """
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            row = _parse_line(line, n, path, skipped, objects)
            if row is not _SKIP:
                yield row


_SKIP = object()  # _parse_line: the line gives no row (blank, corrupt, or not an object)


def _parse_line(line: bytes, n: int, path: Path, skipped: list[str] | None, objects: bool) -> Any:
    """One JSONL line's row, or _SKIP (a corrupt line is noted in ``skipped``)."""
    line = line.strip()
    if not line:
        return _SKIP
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        if skipped is not None:
            skipped.append(f"{path}:{n}: not JSON")
        return _SKIP
    if objects and not isinstance(row, dict):
        if skipped is not None:
            skipped.append(f"{path}:{n}: not a JSON object")
        return _SKIP
    return row


JSONL_CHUNK_BYTES = 1 << 24  # bytes read at once by iter_jsonl_chunks


def iter_jsonl_chunks(
    path: Path, skipped: list[str] | None = None, *, objects: bool = False
) -> Iterator[list[Any]]:  # parsed JSON, as iter_jsonl
    """`iter_jsonl`, a list of rows at a time (about JSONL_CHUNK_BYTES of lines each).

    The same rows and the same ``skipped`` entries, at a fraction of the per-line cost:
    each block of lines is parsed in one list comprehension, and only a block holding a
    corrupt line goes through the line-by-line checks.
    """
    loads, err = orjson.loads, orjson.JSONDecodeError
    with open(path, "rb") as fh:
        first, tail = 1, b""  # line number of the block's first line; its unfinished end
        while True:
            buf = fh.read(JSONL_CHUNK_BYTES)
            if buf:
                buf = tail + buf
                cut = buf.rfind(b"\n")
                if cut < 0:
                    tail = buf
                    continue
                lines, tail = buf[:cut].split(b"\n"), buf[cut + 1 :]
            elif tail:
                lines, tail = [tail], b""
            else:
                return
            try:
                rows = [loads(x) for x in lines if x.strip()]
                fast = not objects or all(type(r) is dict for r in rows)
            except err:
                fast = False
            if not fast:  # a corrupt line in the block: line by line, as iter_jsonl
                parsed = (
                    _parse_line(line, n, path, skipped, objects)
                    for n, line in enumerate(lines, first)
                )
                rows = [r for r in parsed if r is not _SKIP]
            first += len(lines)
            if rows:
                yield rows


def read_records(
    run_dir: Path, kind: str, skipped: list[str] | None = None
) -> list[dict[str, Any]]:
    """All rows of `kind` ('requests' | 'sessions'), merged over worker files; corrupt lines
    are left out and, when ``skipped`` is given, listed there (see ``iter_jsonl``)."""
    run_dir = Path(run_dir)
    rows: list[dict[str, Any]] = []
    for p in sorted(run_dir.glob(f"{kind}*.jsonl")):
        rows.extend(iter_jsonl(p, skipped, objects=True))
    return rows
