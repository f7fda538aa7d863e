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
        nan = math.nan
        sid, cls, slo, cancelled = [], [], [], []
        for r in rows:
            get = r.get
            sid.append(codes[get("session_id", "")])
            cls.append(classes[get("user_class")])
            met = get("slo_met")
            slo.append(-1 if met is None else (1 if met else 0))
            cancelled.append("cancelled" in (get("status"), get("outcome")))
        self.sid = np.asarray(sid, dtype=np.int64).reshape(n)
        self.cls = np.asarray(cls, dtype=np.int64).reshape(n)
        self.slo = np.asarray(slo, dtype=np.int8).reshape(n)
        self.cancelled = np.asarray(cancelled, dtype=bool).reshape(n)
        if not req:
            self.outcome = np.asarray(
                [-1 if (o := s.get("outcome")) is None else OUTCOME_CODES.get(o, 3) for s in rows],
                dtype=np.int8,
            ).reshape(n)
            return
        step, status, ctok, ptok, cached, tool, stream = [], [], [], [], [], [], []
        ttft, itl, tpot, e2e = [], [], [], []
        sd_draft, sd_acc, sd_len = [], [], []
        num, fl, status_code = _num, float, STATUS_CODES.get
        for r in rows:
            get = r.get
            step.append(int(get("step") or 0))
            st = status_code(get("status", "ok"), 1)
            status.append(st)
            if st == 0:
                ttft.append(num(get("ttft_ms")))
                v = get("itl_ms")
                itl.append(num(v.get("mean")) if isinstance(v, dict) else nan)
                tpot.append(num(get("tpot_ms")))
                e2e.append(num(get("e2e_ms")))
                c = get("cached_tokens")
                cached.append(nan if c is None else fl(c))
            else:
                ttft.append(nan)
                itl.append(nan)
                tpot.append(nan)
                e2e.append(nan)
                cached.append(nan)
            ctok.append(fl(get("completion_tokens") or 0))
            p = get("prompt_tokens")
            ptok.append(fl(p) if p else 0.0)
            sd = get("spec_decode")
            if isinstance(sd, dict):
                if sd.get("num_draft_tokens"):
                    sd_draft.append(fl(sd["num_draft_tokens"]))
                    sd_acc.append(fl(sd.get("num_accepted_draft_tokens") or 0))
                else:
                    sd_draft.append(0.0)
                    sd_acc.append(0.0)
                v = sd.get("mean_acceptance_length")
                sd_len.append(fl(v) if isinstance(v, (int, float)) else nan)
            else:
                sd_draft.append(0.0)
                sd_acc.append(0.0)
                sd_len.append(nan)
            tool.append(bool(get("tool_calls")))
            stream.append(bool(get("stream", True)))

        def arr(x: list, dt: Any = np.float64) -> np.ndarray:
            return np.asarray(x, dtype=dt).reshape(n)

        self.step, self.status = arr(step, np.int64), arr(status, np.int8)
        self.lat = {"ttft": arr(ttft), "itl": arr(itl), "tpot": arr(tpot), "e2e": arr(e2e)}
        self.ctok, self.ptok, self.cached = arr(ctok), arr(ptok), arr(cached)
        self.sd_draft, self.sd_acc, self.sd_len = arr(sd_draft), arr(sd_acc), arr(sd_len)
        self.tool, self.stream = arr(tool, bool), arr(stream, bool)


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
