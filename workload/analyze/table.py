"""The rows of two runs as columns: what the estimates read, extracted once per comparison.

Every metric of every scope (overall, class, step, slice, block) reads the same few
fields of the same rows. Reading them from the row dicts once per metric and scope
costs a Python loop over every row each time; here each run's request and session
rows become numpy columns in one pass, and a scope is an index array into them
(`Rows`). Session ids get integer codes shared by both runs, assigned in sorted order
of the ids, so sorting codes sorts ids (the bootstrap's cluster order depends on it).

Missing values follow the dict readers they replace: a latency is NaN where the row
is not ok or the value is not a finite number (estimate._latency), and so on per column.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

STATUS_CODES = {"ok": 0, "cancelled": 2}  # anything else: 1 (failed)
OUTCOME_CODES = {"completed": 0, "tool_loop_failure": 1, "cancelled": 2}  # None: -1, other: 3
LATS = ("ttft", "itl", "tpot", "e2e")


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


class Table:
    """Columns of one run's request (or session) rows."""

    def __init__(self, rows: list[dict], codes: dict[Any, int], classes: dict[Any, int], req: bool):
        self.n = n = len(rows)
        # (session, step) keys: set by Pair from the steps of both runs
        self.step_min, self.step_span = 0, 1

        def col(key: str, default: Any = None) -> list:
            return [r.get(key, default) for r in rows]

        def ints(x: list, dt: Any = np.int64) -> np.ndarray:
            return np.asarray(x, dtype=dt).reshape(n)

        self.sid = ints([codes[x] for x in col("session_id", "")])
        self.cls = ints([classes[x] for x in col("user_class")])
        self.slo = ints([-1 if x is None else (1 if x else 0) for x in col("slo_met")], np.int8)
        pairs = zip(col("status"), col("outcome"), strict=True)
        self.cancelled = ints([s == "cancelled" or o == "cancelled" for s, o in pairs], bool)
        if not req:
            self.outcome = ints(
                [-1 if o is None else OUTCOME_CODES.get(o, 3) for o in col("outcome")], np.int8
            )
            return
        self.step = ints([int(x or 0) for x in col("step")])
        self.status = ints([STATUS_CODES.get(x, 1) for x in col("status", "ok")], np.int8)
        bad = self.status != 0
        itl = [v.get("mean") if isinstance(v, dict) else None for v in col("itl_ms")]
        self.lat = {k: _floats(col(f"{k}_ms") if k != "itl" else itl, bad) for k in LATS}
        self.cached = _floats(col("cached_tokens"), bad)
        self.ctok = _floats([x or 0 for x in col("completion_tokens")], None)
        self.ptok = _floats([x or 0 for x in col("prompt_tokens")], None)
        self.sd_draft, self.sd_acc = np.zeros(n), np.zeros(n)
        self.sd_len = np.full(n, math.nan)
        for i, sd in enumerate(col("spec_decode")):
            if isinstance(sd, dict):
                if sd.get("num_draft_tokens"):
                    self.sd_draft[i] = float(sd["num_draft_tokens"])
                    self.sd_acc[i] = float(sd.get("num_accepted_draft_tokens") or 0)
                v = sd.get("mean_acceptance_length")
                if isinstance(v, (int, float)):
                    self.sd_len[i] = float(v)
        self.tool = ints([bool(x) for x in col("tool_calls")], bool)
        self.stream = ints([bool(x) for x in col("stream", True)], bool)


_NUMBER_TYPES = {int, float, bool, type(None)}


def _floats(vals: list, blank: np.ndarray | None) -> np.ndarray:
    """Numbers as floats, NaN for None and non-finite values (and where `blank`).

    Values of other types go through `_num` (NaN) one by one, as the row readers did.
    """
    if set(map(type, vals)) <= _NUMBER_TYPES:
        out = np.asarray(vals, dtype=np.float64).reshape(len(vals))  # None -> NaN
        out[~np.isfinite(out)] = math.nan
    else:
        out = np.asarray([_num(v) for v in vals], dtype=np.float64).reshape(len(vals))
    if blank is not None:
        out[blank] = math.nan
    return out


class Rows:
    """Some rows of a Table (an index array into it, in file order)."""

    __slots__ = ("t", "idx")

    def __init__(self, t: Table, idx: np.ndarray | None = None) -> None:
        self.t = t
        self.idx = np.arange(t.n) if idx is None else idx

    def __len__(self) -> int:
        return len(self.idx)

    def col(self, name: str) -> np.ndarray:
        return getattr(self.t, name)[self.idx]

    def lat(self, name: str) -> np.ndarray:
        return self.t.lat[name][self.idx]

    def where(self, mask: np.ndarray) -> Rows:
        return Rows(self.t, self.idx[mask])

    def key(self) -> np.ndarray:
        """One integer per request for its (session, step), ordered like (session id, step)."""
        t = self.t
        return t.sid[self.idx] * t.step_span + (t.step[self.idx] - t.step_min)


class Pair:
    """Request and session columns of runs A and B, with shared session and class codes."""

    def __init__(self, reqs: tuple[list, list], sess: tuple[list, list]) -> None:
        ids = set()
        names = set()
        for rows in (*reqs, *sess):
            for r in rows:
                ids.add(r.get("session_id", ""))
                names.add(r.get("user_class"))
        self.ids = sorted(ids, key=lambda x: (not isinstance(x, str), str(x)))
        codes = {s: i for i, s in enumerate(self.ids)}
        self.class_codes = {c: i for i, c in enumerate(sorted(names, key=str))}
        self.req = tuple(Table(r, codes, self.class_codes, True) for r in reqs)
        self.sess = tuple(Table(s, codes, self.class_codes, False) for s in sess)
        self.n_ids = len(self.ids)
        steps = [t.step for t in self.req if t.n]
        self.step_min = int(min(s.min() for s in steps)) if steps else 0
        self.step_span = (int(max(s.max() for s in steps)) - self.step_min + 1) if steps else 1
        for t in self.req:
            t.step_min, t.step_span = self.step_min, self.step_span

    def of_class(self, rows: Rows, cls: str | None) -> Rows:
        if cls is None:
            return rows
        code = self.class_codes.get(cls)
        return rows.where(rows.col("cls") == (-1 if code is None else code))
