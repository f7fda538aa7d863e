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


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else f"a {type(value).__name__}"


def _want(shape: Any) -> str:
    if isinstance(shape, dict | Map) or shape is dict:
        return "an object"
    if isinstance(shape, List) or shape is list:
        return "a list"
    names = ["number" if t in NUM else t.__name__ for t in shape if t is not type(None)]
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
        problems.append(f"{path} is {_kind(value)}, not {_want(shape)}: left out")
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


def checked_rows(rows: list[dict[str, Any]], where: str, problems: list[str]) -> None:
    """Leave out (in place) every field of `rows` whose type agentload never writes there;
    one line per field name in `problems` ("requests.jsonl: e2e_ms is a str in 3 rows")."""
    bad: dict[str, tuple[int, str]] = {}
    for row in rows:
        for k, shape in ROW_SHAPE.items():
            if k in row and not _fits(row[k], shape):
                n, kind = bad.get(k, (0, _kind(row[k])))
                bad[k] = (n + 1, kind)
                del row[k]
    for k, (n, kind) in bad.items():
        problems.append(f"{where}: {k} is {kind}, not {_want(ROW_SHAPE[k])}, in {n} "
                        f"row{'s' if n != 1 else ''}: left out")  # fmt: skip
