"""The shape of a run.json read back from disk: a wrong-typed field is left out, and said.

A run directory is input like any other: edited by hand, written by another version,
damaged. `checked_run(d)` keeps every field whose type is the one agentload writes and
leaves out (with one "run.json: FIELD is a str, not an object: left out" line each) those
that are not, so the report and compare read only what they expect; a field left out
reads as absent, as in a run from an older version. Unknown fields pass untouched.

The shape (`RUN_SHAPE`) is a nested literal: a tuple of types for a leaf, a dict for an
object with known keys, `Map(x)` for an object whose every value has shape x and
`List(x)` for a list whose every item has shape x.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NUM = (int, float)
TEXT = (str,)
MAYBE_NUM = (int, float, type(None))
MAYBE_TEXT = (str, type(None))


@dataclass(frozen=True)
class Map:
    """An object whose every value has shape `of` (by class, by step, by kind)."""

    of: Any


@dataclass(frozen=True)
class List:
    """A list whose every item has shape `of`."""

    of: Any


STATS = Map(MAYBE_NUM)  # {"count": 43, "mean": 6.1, "p95": 13.3, ...}
SECTION: dict[str, Any] = {
    **{
        k: NUM
        for k in (
            "requests", "ok", "errors", "cancelled", "good_requests", "prompt_tokens",
            "completion_tokens", "cached_tokens", "cached_prompt_tokens", "cached_reported",
            "tool_calls", "tool_calls_planned", "tool_loop_failures", "tool_calls_returned",
        )
    },
    **{k: MAYBE_NUM for k in ("error_ratio", "request_goodput_ratio", "cached_ratio",
                              "request_goodput_per_s")},
    "errors_by_kind": Map(NUM),
    **{k: STATS for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "session_duration_ms",
                          "worst_ttft_ms")},
    "throughput": Map(MAYBE_NUM),
    "spec_decode": dict,
    "sessions": Map(MAYBE_NUM),
}  # fmt: skip
SLO_RESULT: dict[str, Any] = {
    "class_name": TEXT, "metric": TEXT, "threshold": MAYBE_NUM, "observed": MAYBE_NUM,
    "passed": (bool,), "unit": MAYBE_TEXT, "bound": MAYBE_TEXT, "skipped": (bool,),
    "message": MAYBE_TEXT, "judged": (bool,), "status": MAYBE_TEXT,
}  # fmt: skip
RUN_SHAPE: dict[str, Any] = {
    "schema_version": (int,),
    "argv": (str, list, type(None)),  # a str since the spec; a list in older runs
    **{k: MAYBE_TEXT for k in ("run_id", "started_at", "ended_at", "profile_name",
                               "model", "tokenizer", "stopped_by", "partial_reason",
                               "exit_reason")},
    **{k: MAYBE_NUM for k in ("duration_s", "seed", "workers", "users", "exit_code")},
    "profile": dict,
    "labels": Map((str, int, float, bool, type(None))),
    "target": {"url": MAYBE_TEXT, "model": MAYBE_TEXT, "models": List(TEXT),
               "max_model_len": MAYBE_NUM, "root": MAYBE_TEXT},
    "fingerprint": Map((dict, str, type(None))),
    "summary": {"schema": MAYBE_TEXT, "duration_s": MAYBE_NUM, "overall": SECTION,
                "by_class": Map(SECTION), "by_step": Map(Map(SECTION))},
    "server": dict,
    # rows of numbers, but also accepted_per_position's lists and server_absent: the report
    # formats each value defensively, so only the object itself is checked
    "spec_decode_crosscheck": (dict, type(None)),
    "stages": (dict, list, type(None)),  # {"stages": [...], ...} as finalize writes it
    "slos": Map(Map(NUM)),
    "slo_results": List(SLO_RESULT),
    "partial": (bool,),
    "lost_workers": List(dict),
    "generator_health": (dict, type(None)),
    "blocks": List(TEXT),
}  # fmt: skip

_DROP = object()


def argv_words(argv: object) -> list[str]:
    """run.json's `argv` as words: a str (what `agentload run` writes) or a list (older runs)."""
    if isinstance(argv, str):
        return argv.split()
    return [str(a) for a in argv] if isinstance(argv, list) else []


def checked_run(
    run: dict[str, Any], problems: list[str], where: str = "run.json"
) -> dict[str, Any]:
    """`run` with every wrong-typed field left out; one line per field left out appended to
    `problems`."""
    out = _check(run, RUN_SHAPE, where, problems)
    return out if isinstance(out, dict) else {}


def kind_of(value: object) -> str:
    """How a warning names a value's type: "a str", "a list", "an object", "null"."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _want(shape: Any) -> str:
    if isinstance(shape, dict | Map) or shape is dict:
        return "an object"
    if isinstance(shape, List) or shape is list:
        return "a list"
    word = {int: "number", float: "number", dict: "an object", list: "a list"}
    names = [word.get(t, t.__name__) for t in shape if t is not type(None)]
    return " or ".join(dict.fromkeys(names))


def _fits(value: object, shape: Any) -> bool:
    if isinstance(shape, dict | Map):
        return isinstance(value, dict)
    if isinstance(shape, List):
        return isinstance(value, list)
    types = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(value, bool) and bool not in types:
        return False  # True is an int to Python, never a count or a latency here
    return isinstance(value, types)


def _check(value: Any, shape: Any, path: str, problems: list[str]) -> Any:
    if not _fits(value, shape):
        problems.append(f"{path} is {kind_of(value)}, not {_want(shape)}: left out")
        return _DROP
    if isinstance(shape, dict):
        out = {}
        for k, v in value.items():
            sub = _check(v, shape[k], f"{path}.{k}", problems) if k in shape else v
            if sub is not _DROP:
                out[k] = sub
        return out
    if isinstance(shape, Map):
        checked = {k: _check(v, shape.of, f"{path}.{k}", problems) for k, v in value.items()}
        return {k: v for k, v in checked.items() if v is not _DROP}
    if isinstance(shape, List):
        items = [_check(v, shape.of, f"{path}[{i}]", problems) for i, v in enumerate(value)]
        return [v for v in items if v is not _DROP]
    return value


_ROW_TEXT = (
    "run_id",
    "target",
    "worker",
    "user_class",
    "session_id",
    "request_id",
    "endpoint",
    "model",
    "status",
    "error_kind",
    "error_detail",
    "finish_reason",
    "outcome",
    "reason",
    "body_hash",
    "content_hash",
    "planned_tool",
    "arrival_stream",
    "tool_loop_failure",
)
_ROW_NUM = (
    "step",
    "attempt",
    "t_start",
    "http_status",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "chunks",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "retry_after_s",
    "steps_planned",
    "steps_done",
    "duration_ms",
    "requests",
    "errors",
    "tool_calls_planned",
    "t_scheduled",
    "arrival_index",
    "worst_ttft_ms",
    "trace_index",
    "ttft_content_ms",
)
ROW_SHAPE: dict[str, Any] = {
    **{k: MAYBE_TEXT for k in _ROW_TEXT},
    **{k: MAYBE_NUM for k in _ROW_NUM},
    "itl_ms": (dict, type(None)),
    "server_metrics": (dict, type(None)),
    "spec_decode": (dict, type(None)),
    "slo_met": (bool, type(None)),
    "stream": (bool, type(None)),
}  # fmt: skip
# tool_calls: what the server returned, as a list of calls in a request row, a count in a
# session row
REQUEST_SHAPE: dict[str, Any] = {**ROW_SHAPE, "tool_calls": (list, type(None))}
SESSION_SHAPE: dict[str, Any] = {**ROW_SHAPE, "tool_calls": MAYBE_NUM}


def row_types(requests: bool) -> dict[str, frozenset[type]]:
    """Per row field, the types agentload writes there (bool only where named: a count is
    never True), as a set to test a column's `set(map(type, values))` against."""
    shape = REQUEST_SHAPE if requests else SESSION_SHAPE
    return {k: frozenset(v) for k, v in shape.items()}


def values_left_out(where: str, bad: dict[str, tuple[int, str]], requests: bool) -> str:
    """One line for the wrong-typed values left out of a file: how many, and per field
    how many and of what type ("requests.jsonl: left out 5 wrong-typed values: ttft_ms
    4 (a str, not number), itl_ms 1 (an int, not an object)")."""
    shape = REQUEST_SHAPE if requests else SESSION_SHAPE
    n = sum(c for c, _ in bad.values())
    fields = ", ".join(f"{k} {c} ({kind}, not {_want(shape[k])})" for k, (c, kind) in bad.items())
    return f"{where}: left out {n} wrong-typed value{'s' if n != 1 else ''}: {fields}"


def count_wrong(bad: dict[str, tuple[int, str]], key: str, n: int, kind: str) -> None:
    """Add `n` wrong-typed values of `key` to `bad` (the kind named is the first one met)."""
    old = bad.get(key)
    bad[key] = (old[0] + n, old[1]) if old else (n, kind)


def checked_rows(
    rows: list[dict[str, Any]], where: str, problems: list[str], *, requests: bool = True
) -> None:
    """Leave out (in place) every field of `rows` whose type agentload never writes there;
    one line for the file in `problems` (`values_left_out`) when any was."""
    shape = REQUEST_SHAPE if requests else SESSION_SHAPE
    bad: dict[str, tuple[int, str]] = {}
    for row in rows:
        for k, want in shape.items():
            if k in row and not _fits(row[k], want):
                count_wrong(bad, k, 1, kind_of(row[k]))
                del row[k]
    if bad:
        problems.append(values_left_out(where, bad, requests))
