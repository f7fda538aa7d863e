"""A run directory read into memory for comparison and reports.

A run directory holds `run.json` (the run's facts), `requests*.jsonl` and
`sessions*.jsonl` (one row per request / session), `metrics*.jsonl` (/metrics
scrapes) and optionally `stats.json`. An interleaved canary side is a directory
of `block-*` run directories, merged here. The files are read with
workload.measure.artifacts (`read_json`, `iter_jsonl`), the one reader of them.
"""

from __future__ import annotations

import datetime as _dt
import gc
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from workload.analyze.run_shape import checked_rows, checked_run
from workload.analyze.table import Columns
from workload.errors import CompareError
from workload.measure.artifacts import iter_jsonl_chunks, read_json


class RunData:
    """One run directory read into memory (blocks of an interleaved run merged).

    The request and session rows are read into columns (`req_cols`, `sess_cols`:
    workload.analyze.table.Columns), which is all a comparison needs. `requests` and
    `sessions`, the rows as dicts, are kept only when `load_run(..., rows=True)` asked
    for them (the run report), and read from the files again on first use otherwise.
    """

    def __init__(
        self,
        path: Path,
        run: dict[str, Any],
        req_cols: Columns,
        sess_cols: Columns,
        metrics: list[dict[str, Any]],
        stats: dict[str, Any] | None,
        duration_s: float | None,
        skipped: list[str] | None = None,
        block_durations: dict[str, float | None] | None = None,
        rows: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None,
        left_out: list[str] | None = None,
        values_left_out: list[str] | None = None,
        health: dict[str, Any] | None = None,
    ) -> None:
        self.path = path
        self.run = run
        self.req_cols, self.sess_cols = req_cols, sess_cols
        self.metrics = metrics
        self.stats = stats
        self.duration_s = duration_s
        # "file:line: why" for every JSONL line left out as corrupt (shown as a warning, not
        # dropped silently); see workload.measure.artifacts.iter_jsonl
        self.skipped = skipped or []
        # Interleaved side: block name -> its duration (s); session ids carry "BLOCK:" prefixes.
        self.block_durations = block_durations or {}
        self._rows = rows
        # "run.json.FIELD is a str, not an object: left out" per wrong-typed field (run_shape)
        self.left_out = left_out or []
        # one line per JSONL file with wrong-typed values left out (run_shape.values_left_out)
        self.values_left_out = values_left_out or []
        # The load generator's health (run.json generator_health) per block name ("" for a
        # run without blocks): a block whose generator was short of CPU measured it, too.
        self.health = health if health is not None else {"": run.get("generator_health")}

    def _dicts(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if self._rows is None:
            self._rows = _read_rows(self.path, list(self.block_durations))
        return self._rows

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The request rows as dicts (read on first use unless loaded with rows=True)."""
        return self._dicts()[0]

    @property
    def sessions(self) -> list[dict[str, Any]]:
        """The session rows as dicts (read on first use unless loaded with rows=True)."""
        return self._dicts()[1]

    @property
    def skipped_lines(self) -> int:
        """How many corrupt JSONL lines were left out of this run."""
        return len(self.skipped)

    def skipped_warning(self) -> str | None:
        """One warning line about corrupt lines, wrong-typed run.json fields and wrong-typed
        JSONL values left out (every file named, with its fields and counts), or None when
        there were none."""
        parts = []
        if self.skipped:
            more = f" (and {len(self.skipped) - 1} more)" if len(self.skipped) > 1 else ""
            parts.append(
                f"skipped {len(self.skipped)} corrupt JSONL line"
                f"{'s' if len(self.skipped) != 1 else ''}: {self.skipped[0]}{more}"
            )
        if self.left_out:
            n = len(self.left_out)
            more = f" (and {n - 1} more)" if n > 1 else ""
            parts.append(f"left out {n} wrong-typed field{'s' if n != 1 else ''}: "
                         f"{self.left_out[0]}{more}")  # fmt: skip
        parts += self.values_left_out
        return f"{self.path}: {'; '.join(parts)}" if parts else None

    @property
    def classes(self) -> list[str]:
        # str(): a class name of another type in a damaged file must not break the sort
        names = {str(c or "") for c in (*self.req_cols.names, *self.sess_cols.names)}
        return sorted(names)


def _parse_iso(s: Any) -> float | None:
    if not isinstance(s, str):
        return None
    try:
        return _dt.datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


def _files(run_dir: Path, kind: str, skipped: list[str]) -> Iterator[list[dict[str, Any]]]:
    """Blocks of rows of `kind` over its worker files, in file order (corrupt lines skipped)."""
    for p in sorted(run_dir.glob(f"{kind}*.jsonl")):
        if not p.is_file():
            skipped.append(f"{p}: not a regular file")
            continue
        try:
            yield from iter_jsonl_chunks(p, skipped, objects=True)
        except OSError as e:
            skipped.append(f"{p}: unreadable ({e.strerror or e})")


def _rows(run_dir: Path, kind: str, skipped: list[str]) -> list[dict[str, Any]]:
    return [r for rows in _files(run_dir, kind, skipped) for r in rows]


def _columns(
    run_dir: Path, kind: str, skipped: list[str], keep: list[dict[str, Any]] | None
) -> Columns:
    """`kind`'s rows as columns (and, given a list as `keep`, as dicts there too)."""
    cols = Columns(kind == "requests")
    # Millions of short-lived row dicts, none in a reference cycle: the cyclic collector
    # would walk them over and over (a quarter of the time) and can find nothing.
    was = gc.isenabled()
    gc.disable()
    try:
        for rows in _files(run_dir, kind, skipped):
            cols.add(rows)
            if keep is not None:
                keep.extend(rows)
    finally:
        if was:
            gc.enable()
    return cols.done()


def _read_rows(path: Path, blocks: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The request and session rows as dicts; blocks merged with prefixed session ids."""
    if not blocks:
        reqs, sess = _rows(path, "requests", []), _rows(path, "sessions", [])
        checked_rows(reqs, "requests.jsonl", [])
        checked_rows(sess, "sessions.jsonl", [], requests=False)
        return reqs, sess
    out: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for b in blocks:
        for kind, dest in (("requests", out[0]), ("sessions", out[1])):
            rows = _rows(path / b, kind, [])
            checked_rows(rows, f"{b}/{kind}.jsonl", [], requests=kind == "requests")
            for r in rows:
                dest.append({**r, "session_id": f"{b}:{r.get('session_id', '')}"})
    return out


def _duration(run: dict[str, Any]) -> float | None:
    a, b = _parse_iso(run.get("started_at")), _parse_iso(run.get("ended_at"))
    if a is not None and b is not None and b > a:
        return b - a
    d = run.get("duration_s")
    return float(d) if isinstance(d, (int, float)) and d > 0 else None


def _load_one(run_dir: Path, rows: bool = False) -> RunData:
    try:
        run = read_json(run_dir / "run.json")
    except FileNotFoundError:
        run = {}
    except Exception as e:  # noqa: BLE001 - any unreadable run.json is bad input
        raise CompareError(f"{run_dir}/run.json: unreadable ({e})") from None
    if not isinstance(run, dict):
        raise CompareError(f"{run_dir}/run.json: not a JSON object")
    left_out: list[str] = []  # run.json fields
    values: list[str] = []  # per JSONL file, its wrong-typed values
    run = checked_run(run, left_out, f"{run_dir.name}/run.json")
    stats = None
    if (run_dir / "stats.json").exists():
        try:
            stats = read_json(run_dir / "stats.json")
        except Exception:  # noqa: BLE001 - optional file; the raw rows suffice
            stats = None
    skipped: list[str] = []
    metrics = _rows(run_dir, "metrics", skipped)
    keep: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = ([], []) if rows else None
    reqs = _columns(run_dir, "requests", skipped, keep[0] if keep else None)
    sess = _columns(run_dir, "sessions", skipped, keep[1] if keep else None)
    where = (f"{run_dir.name}/requests.jsonl", f"{run_dir.name}/sessions.jsonl")
    if keep:  # the rows as dicts feed the report's views: checked field by field (the
        # columns' fields among them, so the same counts)
        checked_rows(keep[0], where[0], values)
        checked_rows(keep[1], where[1], values, requests=False)
    else:  # the columns' own count of what they left out
        values += [w for w in (reqs.wrong_line(where[0]), sess.wrong_line(where[1])) if w]
    return RunData(
        run_dir, run, reqs, sess, metrics, stats, _duration(run), skipped, rows=keep,
        left_out=left_out, values_left_out=values,
    )  # fmt: skip


def load_run(path: Path | str, *, rows: bool = False) -> RunData:
    """Read a run directory; a directory of `block-*` runs (interleaved canary) is merged.

    Session ids of blocks are prefixed with the block name, because every block
    replays the same seeded sessions. `rows=True` also keeps the rows as dicts
    (`RunData.requests` / `.sessions`), read in the same pass.
    """
    path = Path(path)
    if not path.is_dir():
        raise CompareError(f"{path}: not a run directory")
    blocks = sorted(p for p in path.glob("block-*") if p.is_dir())
    if not blocks:
        data = _load_one(path, rows)
        if not data.req_cols.n and not data.sess_cols.n and not data.run:
            raise CompareError(f"{path}: no run.json, requests*.jsonl or sessions*.jsonl")
        return data
    parts = [_load_one(b, rows) for b in blocks]
    mets = [m for d in parts for m in d.metrics]
    durs = [d.duration_s for d in parts if d.duration_s]
    run = dict(parts[0].run)
    run["blocks"] = [b.name for b in blocks]
    skipped = [w for d in parts for w in d.skipped]
    left_out = [w for d in parts for w in d.left_out]
    values = [w for d in parts for w in d.values_left_out]
    bd = {b.name: d.duration_s for b, d in zip(blocks, parts, strict=True)}
    reqs = Columns.merge([(b.name, d.req_cols) for b, d in zip(blocks, parts, strict=True)])
    sess = Columns.merge([(b.name, d.sess_cols) for b, d in zip(blocks, parts, strict=True)])
    keep: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
    if rows:
        keep = ([], [])
        for b, d in zip(blocks, parts, strict=True):
            for src, dest in ((d.requests, keep[0]), (d.sessions, keep[1])):
                dest.extend({**r, "session_id": f"{b.name}:{r.get('session_id', '')}"} for r in src)
    dur = sum(durs) if durs else None
    health = {b.name: d.run.get("generator_health") for b, d in zip(blocks, parts, strict=True)}
    return RunData(
        path, run, reqs, sess, mets, None, dur, skipped, bd, keep, left_out, values, health
    )  # fmt: skip


# requests*.jsonl per run from which `load_pair` reads the two runs at once (about 250,000
# rows): below it, starting a second interpreter costs more than it saves.
PARALLEL_BYTES = 64 * 2**20


def _request_bytes(path: Path) -> int:
    """Bytes of request rows in a run directory (its blocks included); 0 when unreadable."""
    try:
        files = [*path.glob("requests*.jsonl"), *path.glob("block-*/requests*.jsonl")]
        return sum(f.stat().st_size for f in files if f.is_file())
    except OSError:
        return 0


def _spawn_safe() -> bool:
    """Whether a spawned child can start without running the caller's script again.

    Spawn re-imports the parent's __main__ in the child unless it was run with `-m`
    (`python -m workload.cli`, pytest) or is a console script (guarded by
    `if __name__ == "__main__"`, as pip writes them). A user's own script calling
    compare_runs may not be guarded: re-running it in the child could start anything it
    starts (a canary, a load test), so such callers read one run after the other.
    """
    main = sys.modules.get("__main__")
    name: str | None = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name == "__main__" or name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    return path is None or Path(path).name == "agentload"


def load_pair(path_a: Path | str, path_b: Path | str) -> tuple[RunData, RunData]:
    """`load_run` of both runs of a comparison; large ones at once, A in a second process.

    Reading is mostly Python (a JSON parse and the columns, a row at a time), so the two
    runs of a comparison take one core each when there are two. The child is a fresh
    interpreter (spawn: nothing of the caller's threads or state is forked), and sends
    the columns back pickled. Errors are A's first, as when read one after the other.
    """
    a, b = Path(path_a), Path(path_b)
    big = min(_request_bytes(a), _request_bytes(b)) >= PARALLEL_BYTES
    if not big or (os.cpu_count() or 1) < 2 or not _spawn_safe():
        return load_run(a), load_run(b)
    try:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            fut = pool.submit(load_run, a)
            try:
                rb = load_run(b)
            except CompareError:
                fut.result()  # A's error, if any, comes first
                raise
            return fut.result(), rb
    except (BrokenProcessPool, OSError):  # no second process to be had: one after the other
        return load_run(a), load_run(b)
