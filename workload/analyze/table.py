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
        n = len(rows)
        self.n = n
        sid = np.empty(n, dtype=np.int64)
        cls = np.empty(n, dtype=np.int64)
        slo = np.empty(n, dtype=np.int8)
        cancelled = np.zeros(n, dtype=bool)
        for i, r in enumerate(rows):
            sid[i] = codes[r.get("session_id", "")]
            cls[i] = classes[r.get("user_class")]
            met = r.get("slo_met")
            slo[i] = -1 if met is None else (1 if met else 0)
            cancelled[i] = "cancelled" in (r.get("status"), r.get("outcome"))
        self.sid, self.cls, self.slo, self.cancelled = sid, cls, slo, cancelled
        if not req:
            self.outcome = np.asarray(
                [
                    -1 if (o := s.get("outcome")) is None else OUTCOME_CODES.get(o, 3)
                    for s in rows
                ],
                dtype=np.int8,
            )
            return
        step = np.empty(n, dtype=np.int64)
        status = np.empty(n, dtype=np.int8)
        lat = {k: np.full(n, math.nan) for k in LATS}
        ctok = np.empty(n)
        ptok = np.empty(n)
        cached = np.full(n, math.nan)
        sd_draft = np.zeros(n)
        sd_acc = np.zeros(n)
        sd_len = np.full(n, math.nan)
        tool = np.zeros(n, dtype=bool)
        stream = np.ones(n, dtype=bool)
        ttft, itl, tpot, e2e = (lat[k] for k in LATS)
        for i, r in enumerate(rows):
            step[i] = int(r.get("step") or 0)
            st = STATUS_CODES.get(r.get("status", "ok"), 1)
            status[i] = st
            if st == 0:
                ttft[i] = _num(r.get("ttft_ms"))
                v = r.get("itl_ms")
                itl[i] = _num(v.get("mean") if isinstance(v, dict) else None)
                tpot[i] = _num(r.get("tpot_ms"))
                e2e[i] = _num(r.get("e2e_ms"))
                c = r.get("cached_tokens")
                if c is not None:
                    cached[i] = float(c)
            ctok[i] = float(r.get("completion_tokens") or 0)
            p = r.get("prompt_tokens")
            ptok[i] = float(p) if p else 0.0
            sd = r.get("spec_decode")
            if isinstance(sd, dict):
                if sd.get("num_draft_tokens"):
                    sd_draft[i] = float(sd["num_draft_tokens"])
                    sd_acc[i] = float(sd.get("num_accepted_draft_tokens") or 0)
                v = sd.get("mean_acceptance_length")
                if isinstance(v, (int, float)):
                    sd_len[i] = float(v)
            tool[i] = bool(r.get("tool_calls"))
            stream[i] = bool(r.get("stream", True))
        self.step, self.status, self.lat = step, status, lat
        self.ctok, self.ptok, self.cached = ctok, ptok, cached
        self.sd_draft, self.sd_acc, self.sd_len = sd_draft, sd_acc, sd_len
        self.tool, self.stream = tool, stream


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
