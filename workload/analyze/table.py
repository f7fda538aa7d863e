"""The rows of two runs as columns: what the estimates read, extracted once per run.

Every metric of every scope (overall, class, step, slice, block) reads the same few
fields of the same rows. A run's request and session rows are read straight into
numpy columns (`Columns`, a block of rows at a time, so no run is ever held as row
dicts), together with the few facts the side tables need: failures by error kind,
spec-decode acceptance histograms per class, and the first tool-loop failure per
(class, step). A comparison joins two runs' columns (`Pair`): session ids get integer
codes shared by both runs, assigned in sorted order of the ids, so sorting codes sorts
ids (the bootstrap's cluster order depends on it); a scope is an index array into
them (`Rows`).

Missing values follow the dict readers they replace: a latency is NaN where the row
is not ok or the value is not a finite number (estimate._latency), and so on per column.
A value of a type agentload never writes in its field (a hand-edited or damaged file:
`"ttft_ms": "fast"`) is left out, read as if the field were absent, and counted per
field (`Columns.wrong`), so the reader can say so in one line (run_shape).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from workload.analyze.run_shape import count_wrong, kind_of, row_types, values_left_out

STATUS_CODES = {"ok": 0, "cancelled": 2}  # anything else: 1 (failed)
OUTCOME_CODES = {"completed": 0, "tool_loop_failure": 1, "cancelled": 2}  # None: -1, other: 3
LATS = ("ttft", "ttft_content", "itl", "tpot", "e2e")
SESS_KEYS = ("session_id", "user_class", "slo_met", "status", "outcome", "steps_done")
REQ_KEYS = (
    *SESS_KEYS[:5], "step", "itl_ms", "ttft_ms", "ttft_content_ms", "tpot_ms", "e2e_ms", "cached_tokens",
    "completion_tokens", "prompt_tokens", "spec_decode", "tool_calls", "stream",
    "tool_loop_failure", "error_kind", "content_hash",
)  # fmt: skip


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


def _key(x: Any) -> Any:
    """x as a dict key: unhashable values (only in a hand-edited file) by their repr."""
    try:
        hash(x)
    except TypeError:
        return f"<{type(x).__name__} {x!r}>"
    return x


def _codes(vals: Sequence[Any], codes: dict[Any, int]) -> np.ndarray:
    """Integer code per value, new values numbered in order of first appearance."""
    try:
        out = [codes.setdefault(x, len(codes)) for x in vals]
    except TypeError:
        out = [codes.setdefault(_key(x), len(codes)) for x in vals]
    return np.asarray(out, dtype=np.int64).reshape(len(vals))


def _lookup(vals: Sequence[Any], table: dict[str, int], default: int) -> list[int]:
    try:
        return [table.get(x, default) for x in vals]
    except TypeError:  # an unhashable value never matches a name
        return [table.get(x, default) if isinstance(x, str) else default for x in vals]


def _int(x: Any) -> int:
    try:
        v = int(x or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return v if -(2**62) < v < 2**62 else 0


def _hash60(x: Any) -> int:
    """A recorded hex hash as a positive int64 (its first 15 hex digits); 0 when absent."""
    try:
        return int(x[:15], 16) if isinstance(x, str) and x else 0
    except ValueError:
        return 0


def _ints(vals: Sequence[Any], dt: type = np.int64) -> np.ndarray:
    return np.asarray(vals, dtype=dt).reshape(len(vals))


def add_histogram(tot: list[int], h: list[Any]) -> None:
    """Add acceptance histogram `h` into `tot` (extended as needed; non-numbers skipped)."""
    if len(h) > len(tot):
        tot.extend([0] * (len(h) - len(tot)))
    for i, x in enumerate(h):
        if isinstance(x, (int, float)):
            tot[i] += int(x)


class Columns:
    """One run's request (or session) rows as columns, filled a block of rows at a time.

    Session ids and classes get codes local to the run (`ids`, `names`: value -> code,
    in order of first appearance); `Pair` maps them to codes shared by both runs.
    """

    def __init__(self, req: bool) -> None:
        self.req = req
        self.n = 0
        self.ids: dict[Any, int] = {}
        self.names: dict[Any, int] = {}
        self.cols: dict[str, np.ndarray] = {}
        self._parts: dict[str, list[np.ndarray]] = {}
        # side facts (request rows): failures per (class, error kind) in order of first
        # appearance; summed acceptance histograms per class; tool-loop failures, the
        # earliest per (class, step) as (t_start, row number, row)
        self.error_counts: dict[tuple[Any, Any], int] = {}
        self.spec_hists: dict[Any, list[int]] = {}
        self.loops: dict[tuple[str, int], tuple[float, int, dict[str, Any]]] = {}
        # wrong-typed values left out: field -> (how many, the first one's type)
        self.wrong: dict[str, tuple[int, str]] = {}
        self._types = row_types(req)

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]], req: bool) -> Columns:
        """Columns of rows given as dicts."""
        out = cls(req)
        out.add(list(rows))
        return out.done()

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Append a block of rows."""
        n = len(rows)
        # Every field in one C-level pass when the rows share the first row's keys (rows
        # of one writer do); a row without one of them: per field with a default.
        keys = [k for k in (REQ_KEYS if self.req else SESS_KEYS) if rows and k in rows[0]]
        got: dict[str, tuple[Any, ...]] = {}
        if len(keys) > 1:
            try:
                got = dict(zip(keys, zip(*map(itemgetter(*keys), rows), strict=True), strict=True))
            except KeyError:
                got = {}

        seen: dict[str, Sequence[Any]] = {}

        def col(key: str, default: Any = None) -> Sequence[Any]:
            v = seen.get(key)
            if v is None:
                v = got.get(key)
                v = self._typed(key, v if v is not None else [r.get(key, default) for r in rows], default)  # fmt: skip
                seen[key] = v
            return v

        c: dict[str, np.ndarray] = {}
        c["sid"] = _codes(col("session_id", ""), self.ids)
        c["cls"] = _codes(col("user_class"), self.names)
        c["slo"] = _ints([-1 if x is None else (1 if x else 0) for x in col("slo_met")], np.int8)
        status = col("status", "ok")
        pairs = zip(status, col("outcome"), strict=True)
        c["cancelled"] = _ints([s == "cancelled" or o == "cancelled" for s, o in pairs], bool)
        if not self.req:
            outs = col("outcome")
            codes = _lookup(outs, OUTCOME_CODES, 3)
            c["outcome"] = _ints([-1 if o is None else k for o, k in zip(outs, codes, strict=True)], np.int8)  # fmt: skip
            c["steps_done"] = _floats([x or 0 for x in col("steps_done")], None)
            self._append(c, n)
            return
        steps = col("step")
        try:
            c["step"] = _ints([int(x or 0) for x in steps])
        except (TypeError, ValueError, OverflowError):
            c["step"] = _ints([_int(x) for x in steps])
        c["status"] = st = _ints(_lookup(status, STATUS_CODES, 1), np.int8)
        bad = st != 0
        itl = [v.get("mean") if isinstance(v, dict) else None for v in col("itl_ms")]
        for k in LATS:
            c[k] = _floats(col(f"{k}_ms") if k != "itl" else itl, bad)
        c["cached"] = _floats(col("cached_tokens"), bad)
        c["ctok"] = _floats([x or 0 for x in col("completion_tokens")], None)
        c["ptok"] = _floats([x or 0 for x in col("prompt_tokens")], None)
        c["sd_draft"], c["sd_acc"] = np.zeros(n), np.zeros(n)
        c["sd_len"] = np.full(n, math.nan)
        classes = col("user_class")
        for i, sd in enumerate(col("spec_decode")):
            if isinstance(sd, dict):
                self._spec(classes[i], sd, c, i)
        calls = col("tool_calls")
        c["tool"] = _ints([bool(x) for x in calls], bool)
        c["ntool"] = _ints([len(x) if isinstance(x, (list, dict, str)) else 0 for x in calls])
        c["stream"] = _ints([bool(x) for x in col("stream", True)], bool)
        c["content"] = _ints([_hash60(x) for x in col("content_hash")])
        kinds = col("error_kind")
        for i in np.flatnonzero(bad).tolist():
            ek = (_key(classes[i]), _key(kinds[i] or status[i] or "unknown"))
            self.error_counts[ek] = self.error_counts.get(ek, 0) + 1
        for i, (x, e) in enumerate(zip(col("tool_loop_failure"), kinds, strict=True)):
            if x or e == "tool_loop":
                self._loop(rows[i], self.n + i)
        self._append(c, n)

    def _typed(self, key: str, vals: Sequence[Any], default: Any) -> Sequence[Any]:
        """`vals` with each value of a type agentload never writes in `key` as `default` (as
        if absent), counted in `wrong`; `vals` itself when every value fits (one C-level
        pass over their types)."""
        types = self._types.get(key)
        if types is None or set(map(type, vals)) <= types:
            return vals
        out = list(vals)
        for i, v in enumerate(out):
            if type(v) not in types:
                count_wrong(self.wrong, key, 1, kind_of(v))
                out[i] = default
        return out

    def wrong_line(self, where: str) -> str | None:
        """One line naming the wrong-typed values left out of `where`, None when none were."""
        return values_left_out(where, self.wrong, self.req) if self.wrong else None

    def _spec(self, cls: Any, sd: dict[str, Any], c: dict[str, np.ndarray], i: int) -> None:
        try:
            if sd.get("num_draft_tokens"):
                c["sd_draft"][i] = float(sd["num_draft_tokens"])
                c["sd_acc"][i] = float(sd.get("num_accepted_draft_tokens") or 0)
        except (TypeError, ValueError):
            c["sd_draft"][i] = c["sd_acc"][i] = 0.0
        v = sd.get("mean_acceptance_length")
        if isinstance(v, (int, float)):
            c["sd_len"][i] = float(v)
        h = sd.get("acceptance_histogram")
        if isinstance(h, list):
            add_histogram(self.spec_hists.setdefault(_key(cls), []), h)

    def _loop(self, r: dict[str, Any], at: int) -> None:
        try:
            key = (str(r.get("user_class") or ""), int(r.get("step") or 0))
            t = float(r.get("t_start") or 0)
        except (TypeError, ValueError, OverflowError):
            return
        old = self.loops.get(key)
        if old is None or t < old[0]:
            self.loops[key] = (t, at, r)

    def _append(self, c: dict[str, np.ndarray], n: int) -> None:
        for k, v in c.items():
            self._parts.setdefault(k, []).append(v)
        self.n += n

    def done(self) -> Columns:
        """Join the blocks into one array per column."""
        empty = Columns(self.req)
        if not self._parts:
            empty.add([])
        parts = self._parts or empty._parts
        self.cols = {k: np.concatenate(v) if len(v) > 1 else v[0] for k, v in parts.items()}
        self._parts = {}
        return self

    def loop_rows(self) -> list[dict[str, Any]]:
        """The kept tool-loop failures, in row order (enough for `tool_loop_examples`)."""
        return [r for _, _, r in sorted(self.loops.values(), key=lambda x: x[1])]

    @classmethod
    def merge(cls, parts: list[tuple[str, Columns]]) -> Columns:
        """Blocks of an interleaved run as one: session ids prefixed with the block name."""
        req = parts[0][1].req if parts else True
        out = cls(req)
        at = 0
        for prefix, p in parts:
            remap = np.asarray(
                [out.ids.setdefault(f"{prefix}:{s}", len(out.ids)) for s in p.ids], dtype=np.int64
            )
            nmap = np.asarray([out.names.setdefault(s, len(out.names)) for s in p.names], dtype=np.int64)  # fmt: skip
            c = dict(p.cols)
            c["sid"], c["cls"] = remap[c["sid"]], nmap[c["cls"]]
            out._append(c, p.n)
            for k, v in p.error_counts.items():
                out.error_counts[k] = out.error_counts.get(k, 0) + v
            for k, h in p.spec_hists.items():
                add_histogram(out.spec_hists.setdefault(k, []), h)
            for _, i, r in sorted(p.loops.values(), key=lambda x: x[1]):
                out._loop({**r, "session_id": f"{prefix}:{r.get('session_id', '')}"}, at + i)
            at += p.n
        return out.done()


class Table:
    """Columns of one run's request (or session) rows, with codes shared by both runs."""

    # The columns `Columns.add` fills, set as attributes from `cols` in __init__:
    # both kinds of rows
    slo: np.ndarray
    cancelled: np.ndarray
    # session rows
    outcome: np.ndarray
    steps_done: np.ndarray
    # request rows
    step: np.ndarray
    status: np.ndarray
    cached: np.ndarray
    ctok: np.ndarray
    ptok: np.ndarray
    sd_draft: np.ndarray
    sd_acc: np.ndarray
    sd_len: np.ndarray
    tool: np.ndarray
    ntool: np.ndarray
    stream: np.ndarray
    content: np.ndarray

    def __init__(self, c: Columns, codes: np.ndarray, classes: np.ndarray) -> None:
        self.n = c.n
        # (session, step) keys: set by Pair from the steps of both runs
        self.step_min, self.step_span = 0, 1
        cols = dict(c.cols)
        self.sid = codes[cols.pop("sid")]
        self.cls = classes[cols.pop("cls")]
        self.lat = {k: cols.pop(k) for k in LATS if k in cols}
        for k, v in cols.items():
            setattr(self, k, v)
        self._lat_order: dict[str, np.ndarray] = {}

    def lat_order(self, name: str) -> np.ndarray:
        """Row numbers in order of latency `name` (stable: ties in row order, NaN last), sorted once."""
        o = self._lat_order.get(name)
        if o is None:
            o = self._lat_order[name] = np.argsort(self.lat[name], kind="stable")
        return o


_NUMBER_TYPES = {int, float, bool, type(None)}


def _floats(vals: Sequence[Any], blank: np.ndarray | None) -> np.ndarray:
    """Numbers as floats, NaN for None and non-finite values (and where `blank`).

    Values of other types go through `_num` (NaN) one by one, as the row readers did.
    """
    if set(map(type, vals)) <= _NUMBER_TYPES:
        try:
            out = np.asarray(vals, dtype=np.float64).reshape(len(vals))  # None -> NaN
        except OverflowError:  # an integer beyond float range
            out = np.asarray([_num(v) for v in vals], dtype=np.float64).reshape(len(vals))
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
        col: np.ndarray = getattr(self.t, name)
        return col[self.idx]

    def lat(self, name: str) -> np.ndarray:
        return self.t.lat[name][self.idx]

    def where(self, mask: np.ndarray) -> Rows:
        return Rows(self.t, self.idx[mask])

    def sorted_by(self, lat: str, keep: np.ndarray) -> np.ndarray:
        """Row numbers of the rows `keep` marks, in order of their `lat` values: a stable sort
        (ties in the order of the rows here).

        Rows in row order (every scope's) that are a good part of the table are picked out of
        the table's one sort (`Table.lat_order`), not sorted again: the same order, since
        that sort leaves ties in row order too.
        """
        rows: np.ndarray = self.idx[keep]
        t = self.t
        if len(rows) * 8 < t.n or not (rows[1:] > rows[:-1]).all():
            return rows[np.argsort(t.lat[lat][rows], kind="stable")]
        mark = np.zeros(t.n, dtype=bool)
        mark[rows] = True
        o = t.lat_order(lat)
        picked: np.ndarray = o[mark[o]]
        return picked

    def key(self) -> np.ndarray:
        """One integer per request for its (session, step), ordered like (session id, step)."""
        t = self.t
        keys: np.ndarray = t.sid[self.idx] * t.step_span + (t.step[self.idx] - t.step_min)
        return keys


def _sort_key(x: Any) -> tuple[bool, str]:
    return (not isinstance(x, str), str(x))


class Pair:
    """Request and session columns of runs A and B, with shared session and class codes.

    Takes each run's `Columns`, or its rows as lists of dicts.
    """

    def __init__(self, reqs: tuple[Any, Any], sess: tuple[Any, Any]) -> None:
        rq = [r if isinstance(r, Columns) else Columns.of(r, True) for r in reqs]
        ss = [s if isinstance(s, Columns) else Columns.of(s, False) for s in sess]
        ids: set[Any] = set()
        names: set[Any] = set()
        for c in (*rq, *ss):
            ids.update(c.ids)
            names.update(c.names)
        self.ids = sorted(ids, key=_sort_key)
        codes = {s: i for i, s in enumerate(self.ids)}
        self.class_codes = {c: i for i, c in enumerate(sorted(names, key=str))}

        def table(c: Columns) -> Table:
            idmap = np.asarray([codes[s] for s in c.ids], dtype=np.int64)
            clmap = np.asarray([self.class_codes[s] for s in c.names], dtype=np.int64)
            return Table(c, idmap, clmap)

        self.req = tuple(table(c) for c in rq)
        self.sess = tuple(table(c) for c in ss)
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
