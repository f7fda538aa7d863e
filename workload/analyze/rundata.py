"""A run directory read into memory for comparison and reports.

A run directory holds `run.json` (the run's facts), `requests*.jsonl` and
`sessions*.jsonl` (one row per request / session), `metrics*.jsonl` (/metrics
scrapes) and optionally `stats.json`. An interleaved canary side is a directory
of `block-*` run directories, merged here. The files are read with
workload.measure.artifacts (`read_json`, `iter_jsonl`), the one reader of them.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload.analyze.catalogue import CompareError
from workload.measure.artifacts import iter_jsonl, read_json


@dataclass
class RunData:
    """One run directory read into memory (blocks of an interleaved run merged)."""

    path: Path
    run: dict[str, Any]
    requests: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    stats: dict[str, Any] | None
    duration_s: float | None
    # "file:line: why" for every JSONL line left out as corrupt (shown as a warning, not dropped
    # silently); see workload.measure.artifacts.iter_jsonl
    skipped: list[str] = field(default_factory=list)

    @property
    def skipped_lines(self) -> int:
        """How many corrupt JSONL lines were left out of this run."""
        return len(self.skipped)

    def skipped_warning(self) -> str | None:
        """One warning line about corrupt lines left out, or None when there were none."""
        if not self.skipped:
            return None
        more = f" (and {len(self.skipped) - 1} more)" if len(self.skipped) > 1 else ""
        return (
            f"{self.path}: skipped {len(self.skipped)} corrupt JSONL line"
            f"{'s' if len(self.skipped) != 1 else ''}: {self.skipped[0]}{more}"
        )

    # Interleaved side: block name -> its duration (s); session ids carry "BLOCK:" prefixes.
    block_durations: dict[str, float | None] = field(default_factory=dict)

    @property
    def classes(self) -> list[str]:
        names = {r.get("user_class") or "" for r in self.requests}
        names |= {s.get("user_class") or "" for s in self.sessions}
        return sorted(names)


def _parse_iso(s: Any) -> float | None:
    if not isinstance(s, str):
        return None
    try:
        return _dt.datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


def _rows(run_dir: Path, kind: str, skipped: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in sorted(run_dir.glob(f"{kind}*.jsonl")):
        if not p.is_file():
            skipped.append(f"{p}: not a regular file")
            continue
        try:
            rows.extend(iter_jsonl(p, skipped, objects=True))
        except OSError as e:
            skipped.append(f"{p}: unreadable ({e.strerror or e})")
    return rows


def _duration(run: dict[str, Any]) -> float | None:
    a, b = _parse_iso(run.get("started_at")), _parse_iso(run.get("ended_at"))
    if a is not None and b is not None and b > a:
        return b - a
    d = run.get("duration_s")
    return float(d) if isinstance(d, (int, float)) and d > 0 else None


def _load_one(run_dir: Path) -> RunData:
    try:
        run = read_json(run_dir / "run.json")
    except FileNotFoundError:
        run = {}
    except Exception as e:  # noqa: BLE001 - any unreadable run.json is bad input
        raise CompareError(f"{run_dir}/run.json: unreadable ({e})") from None
    if not isinstance(run, dict):
        raise CompareError(f"{run_dir}/run.json: not a JSON object")
    stats = None
    if (run_dir / "stats.json").exists():
        try:
            stats = read_json(run_dir / "stats.json")
        except Exception:  # noqa: BLE001 - optional file; the raw rows suffice
            stats = None
    skipped: list[str] = []
    metrics = _rows(run_dir, "metrics", skipped)
    return RunData(
        run_dir,
        run,
        _rows(run_dir, "requests", skipped),
        _rows(run_dir, "sessions", skipped),
        metrics,
        stats,
        _duration(run),
        skipped,
    )


def load_run(path: Path | str) -> RunData:
    """Read a run directory; a directory of `block-*` runs (interleaved canary) is merged.

    Session ids of blocks are prefixed with the block name, because every block
    replays the same seeded sessions.
    """
    path = Path(path)
    if not path.is_dir():
        raise CompareError(f"{path}: not a run directory")
    blocks = sorted(p for p in path.glob("block-*") if p.is_dir())
    if not blocks:
        data = _load_one(path)
        if not data.requests and not data.sessions and not data.run:
            raise CompareError(f"{path}: no run.json, requests*.jsonl or sessions*.jsonl")
        return data
    parts = [_load_one(b) for b in blocks]
    reqs, sess, mets = [], [], []
    for b, d in zip(blocks, parts, strict=True):
        for r in d.requests:
            reqs.append({**r, "session_id": f"{b.name}:{r.get('session_id', '')}"})
        for s in d.sessions:
            sess.append({**s, "session_id": f"{b.name}:{s.get('session_id', '')}"})
        mets.extend(d.metrics)
    durs = [d.duration_s for d in parts if d.duration_s]
    run = dict(parts[0].run)
    run["blocks"] = [b.name for b in blocks]
    skipped = [w for d in parts for w in d.skipped]
    bd = {b.name: d.duration_s for b, d in zip(blocks, parts, strict=True)}
    return RunData(path, run, reqs, sess, mets, None, sum(durs) if durs else None, skipped, bd)
