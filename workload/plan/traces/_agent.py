"""Agent-session traces: one row per LLM round of a real agent session (format ``agent-session``).

A round is one LLM call of one session: the request left when its last input arrived
(``t_start``: the user message or the last tool result it carries) and the answer was
complete at ``t_end``. Its prompt is ``prefix_tokens`` reused from earlier (what the
provider's prompt cache served) plus ``appended_tokens`` new ones; its output is
``output_tokens`` (``reasoning_tokens`` of them hidden reasoning, when known). The tool
calls the answer emitted run after it; the next round of the session waits for them.
Subagent sessions name their ``parent``, the parent round whose answer spawned them
(``spawn_round``) and the parent round that waits for their result (``join_round``).

One JSON object per line, version 1 (what ``agentload trace import ... -o`` writes)::

    {"v": 1, "session": "claude:92ee", "round": 1, "parent": null, "spawn_round": null,
     "join_round": null, "t_start": 1780292450.938, "t_end": 1780292464.862,
     "input_tokens": 35740, "prefix_tokens": 29380, "appended_tokens": 6360,
     "appended": {"user_messages": 0, "tool_results": 2},
     "output_tokens": 1016, "reasoning_tokens": null, "think_s": 0.0,
     "tools": [{"name": "WebSearch", "latency_s": 12.688, "wait_s": 12.688,
                "parallel": 0, "error": false, "subagent": null}],
     "model": "claude-opus-4-8", "source": "claude-code", "hash_ids": null}

``tools[].wait_s`` is how long after ``t_end`` the tool's result came (0 when it came
before the answer ended: tools start while the answer streams); tools sharing a
``parallel`` group ran at the same time, so the next round waits for the slowest.
``think_s`` is the idle time before the round that no tool explains (a human reading,
the agent's own work). No content is kept: sizes and times only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from workload.errors import TraceError
from workload.plan.traces._read import BadLine, OnBadLine, _Bad, _int, _json_rows, _time

AGENT_FORMAT = "agent-session"
AGENT_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a round's answer emitted, with its measured wall time."""

    name: str
    latency_s: float | None  # result time - emission time (None: no result seen)
    wait_s: float  # after the round's answer ended, until the result (>= 0)
    parallel: int  # calls with one group number overlapped in time
    error: bool = False
    subagent: str | None = None  # the child session that ran this call (a Task tool)

    def to_json(self) -> dict[str, Any]:
        """The tool's entry in a row."""
        return {
            "name": self.name,
            "latency_s": None if self.latency_s is None else round(self.latency_s, 6),
            "wait_s": round(self.wait_s, 6),
            "parallel": self.parallel,
            "error": self.error,
            "subagent": self.subagent,
        }


@dataclass(frozen=True, slots=True)
class AgentRound:
    """One LLM round of an agent session (see the module docstring)."""

    session: str
    round: int  # 0-based within the session
    t_start: float  # unix s: the request left
    t_end: float  # unix s: the answer was complete
    input_tokens: int
    prefix_tokens: int  # of input_tokens, reused from earlier rounds (cache hit)
    output_tokens: int  # reasoning included
    reasoning_tokens: int | None = None
    tools: tuple[ToolCall, ...] = ()
    think_s: float = 0.0  # idle before this round that no tool explains
    appended_user: int = 0  # user messages appended for this round
    appended_tool_results: int = 0
    parent: str | None = None
    spawn_round: int | None = None
    join_round: int | None = None
    model: str | None = None
    source: str | None = None
    hash_ids: tuple[int, ...] | None = None

    @property
    def appended_tokens(self) -> int:
        return self.input_tokens - self.prefix_tokens

    @property
    def tool_wait_s(self) -> float:
        """How long the next round waits for this round's tools (the slowest one)."""
        return max((t.wait_s for t in self.tools), default=0.0)

    @property
    def parallel_tools(self) -> int:
        """The most tools of this round that ran at once (by parallel group)."""
        groups: dict[int, int] = {}
        for t in self.tools:
            groups[t.parallel] = groups.get(t.parallel, 0) + 1
        return max(groups.values(), default=0)

    def to_json(self) -> dict[str, Any]:
        """The row of the ``agent-session`` format."""
        return {
            "v": AGENT_SCHEMA,
            "session": self.session,
            "round": self.round,
            "parent": self.parent,
            "spawn_round": self.spawn_round,
            "join_round": self.join_round,
            "t_start": round(self.t_start, 6),
            "t_end": round(self.t_end, 6),
            "input_tokens": self.input_tokens,
            "prefix_tokens": self.prefix_tokens,
            "appended_tokens": self.appended_tokens,
            "appended": {
                "user_messages": self.appended_user,
                "tool_results": self.appended_tool_results,
            },
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "think_s": round(self.think_s, 6),
            "tools": [t.to_json() for t in self.tools],
            "model": self.model,
            "source": self.source,
            "hash_ids": list(self.hash_ids) if self.hash_ids is not None else None,
        }


# ------------------------------------------------------------------ building rounds
@dataclass(slots=True)
class RawTool:
    """A tool call as an importer sees it: absolute times (unix s)."""

    name: str
    emitted: float
    result: float | None = None
    error: bool = False
    call_id: str = ""
    subagent: str | None = None


@dataclass(slots=True)
class RawRound:
    """A round as an importer assembles it, before gaps and groups are derived."""

    t_start: float
    t_end: float
    input_tokens: int
    prefix_tokens: int
    output_tokens: int
    reasoning_tokens: int | None = None
    tools: list[RawTool] = field(default_factory=list)
    appended_user: int = 0
    appended_tool_results: int = 0
    model: str | None = None
    line: int = 0  # where the round was read (for a bad-line report)


def _tool_calls(raw: RawRound) -> tuple[ToolCall, ...]:
    out: list[ToolCall] = []
    group, group_end = -1, -math.inf
    for t in sorted(raw.tools, key=lambda t: t.emitted):
        if t.emitted >= group_end:
            group += 1
            group_end = -math.inf
        end = t.result if t.result is not None else t.emitted
        group_end = max(group_end, end)
        out.append(
            ToolCall(
                name=t.name,
                latency_s=None if t.result is None else max(0.0, t.result - t.emitted),
                wait_s=0.0 if t.result is None else max(0.0, t.result - raw.t_end),
                parallel=group,
                error=t.error,
                subagent=t.subagent,
            )
        )
    return tuple(out)


def build_session(session: str, raws: Sequence[RawRound], *, source: str) -> list[AgentRound]:
    """Rounds of one session from raw rounds in order: tool groups, waits and think gaps."""
    out: list[AgentRound] = []
    ready = -math.inf  # when the previous round's answer and tools were done
    for k, raw in enumerate(raws):
        think = 0.0 if k == 0 else max(0.0, raw.t_start - ready)
        tools = _tool_calls(raw)
        out.append(
            AgentRound(
                session=session,
                round=k,
                t_start=raw.t_start,
                t_end=max(raw.t_end, raw.t_start),
                input_tokens=raw.input_tokens,
                prefix_tokens=min(raw.prefix_tokens, raw.input_tokens),
                output_tokens=raw.output_tokens,
                reasoning_tokens=raw.reasoning_tokens,
                tools=tools,
                think_s=think,
                appended_user=raw.appended_user,
                appended_tool_results=raw.appended_tool_results,
                model=raw.model,
                source=source,
            )
        )
        ready = max(raw.t_end, raw.t_start) + max((t.wait_s for t in tools), default=0.0)
    return out


# ------------------------------------------------------------------ the trace
@dataclass(slots=True)
class AgentTrace:
    """Sessions of rounds (in round order), root sessions in start order, bad lines."""

    sessions: dict[str, list[AgentRound]]
    source: str
    format: str
    bad_lines: list[BadLine] = field(default_factory=list)

    @property
    def roots(self) -> list[str]:
        """Sessions without a parent, by start time (then name)."""
        roots = [s for s, rs in self.sessions.items() if rs[0].parent is None]
        return sorted(roots, key=lambda s: (self.sessions[s][0].t_start, s))

    def children(self, session: str) -> list[str]:
        """The subagent sessions of a session, by start time."""
        kids = [s for s, rs in self.sessions.items() if rs[0].parent == session]
        return sorted(kids, key=lambda s: (self.sessions[s][0].t_start, s))

    @property
    def rounds(self) -> int:
        return sum(len(r) for r in self.sessions.values())

    def iter_rounds(self) -> Iterator[AgentRound]:
        """Every round, session by session (roots first, each followed by its subagents)."""
        done: set[str] = set()

        def walk(s: str) -> Iterator[AgentRound]:
            done.add(s)
            yield from self.sessions[s]
            for c in self.children(s):
                if c not in done:
                    yield from walk(c)

        for s in self.roots:
            yield from walk(s)
        for s in self.sessions:  # children of a parent not in the trace
            if s not in done:
                yield from walk(s)

    def limited(self, sessions: int | None) -> AgentTrace:
        """The first ``sessions`` root sessions (with their subagents); all when None."""
        if sessions is None:
            return self
        keep: set[str] = set()
        stack = list(self.roots[:sessions])
        while stack:
            s = stack.pop()
            keep.add(s)
            stack.extend(self.children(s))
        kept = {s: r for s, r in self.sessions.items() if s in keep}
        return AgentTrace(kept, self.source, self.format, list(self.bad_lines))


def trace_of(
    rounds: Iterable[AgentRound], source: str, fmt: str, bad: list[BadLine] | None = None
) -> AgentTrace:
    """An AgentTrace from rounds in any order (each session sorted by round)."""
    sessions: dict[str, list[AgentRound]] = {}
    for r in rounds:
        sessions.setdefault(r.session, []).append(r)
    for rs in sessions.values():
        rs.sort(key=lambda r: r.round)
    return AgentTrace(sessions, source, fmt, bad or [])


def write_agent_trace(trace: AgentTrace, path: str | Path) -> int:
    """Write the ``agent-session`` JSONL; returns the row count."""
    n = 0
    with open(path, "wb") as fh:
        for r in trace.iter_rounds():
            fh.write(orjson.dumps(r.to_json()) + b"\n")
            n += 1
    return n


# ------------------------------------------------------------------ reading our format
def _opt_int(row: dict[str, Any], key: str, lo: int = 0) -> int | None:
    return None if row.get(key) is None else _int(row, key, lo)


def _str(row: dict[str, Any], key: str, required: bool) -> str | None:
    v = row.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v:
        raise _Bad(f"{key} must be a non-empty string, got {v!r}")
    return v


def _tool(t: Any) -> ToolCall:
    if not isinstance(t, dict):
        raise _Bad("tools[] entries must be objects")
    lat = t.get("latency_s")
    return ToolCall(
        name=str(t.get("name") or "tool"),
        latency_s=None if lat is None else max(0.0, _time(t, "latency_s")),
        wait_s=max(0.0, _time(t, "wait_s")),
        parallel=_int(t, "parallel", 0),
        error=bool(t.get("error")),
        subagent=_str(t, "subagent", False),
    )


def round_from_json(row: dict[str, Any]) -> AgentRound:
    """One ``agent-session`` row (raises _Bad naming the field)."""
    if row.get("v") != AGENT_SCHEMA:
        raise _Bad(f"v must be {AGENT_SCHEMA} (agent-session format version), got {row.get('v')!r}")
    inp = _int(row, "input_tokens", 1)
    prefix = _int(row, "prefix_tokens", 0)
    if prefix > inp:
        raise _Bad(f"prefix_tokens {prefix} > input_tokens {inp}")
    t0, t1 = _time(row, "t_start"), _time(row, "t_end")
    if t1 < t0:
        raise _Bad(f"t_end {t1} is before t_start {t0}")
    tools = row.get("tools") or []
    if not isinstance(tools, list):
        raise _Bad("tools must be a list")
    appended = row.get("appended") or {}
    ids = row.get("hash_ids")
    return AgentRound(
        session=_str(row, "session", True) or "",
        round=_int(row, "round", 0),
        t_start=t0,
        t_end=t1,
        input_tokens=inp,
        prefix_tokens=prefix,
        output_tokens=_int(row, "output_tokens", 0),
        reasoning_tokens=_opt_int(row, "reasoning_tokens"),
        tools=tuple(_tool(t) for t in tools),
        think_s=max(0.0, _time(row, "think_s")) if row.get("think_s") is not None else 0.0,
        appended_user=int(appended.get("user_messages") or 0) if isinstance(appended, dict) else 0,
        appended_tool_results=int(appended.get("tool_results") or 0)
        if isinstance(appended, dict)
        else 0,
        parent=_str(row, "parent", False),
        spawn_round=_opt_int(row, "spawn_round"),
        join_round=_opt_int(row, "join_round"),
        model=row.get("model") if isinstance(row.get("model"), str) else None,
        source=row.get("source") if isinstance(row.get("source"), str) else None,
        hash_ids=tuple(int(x) for x in ids) if isinstance(ids, list) else None,
    )


def read_agent_rows(path: Path, on_bad_line: OnBadLine, bad: list[BadLine]) -> list[AgentRound]:
    """The rows of one ``agent-session`` file (bad lines counted in ``bad``, or raised)."""
    out: list[AgentRound] = []
    seen: set[tuple[str, int]] = set()
    for n, row in _json_rows(path):
        try:
            if isinstance(row, _Bad):
                raise row
            if not isinstance(row, dict):
                raise _Bad("not a JSON object")
            r = round_from_json(row)
            if (r.session, r.round) in seen:
                raise _Bad(f"session {r.session!r} round {r.round} appears twice")
            seen.add((r.session, r.round))
            out.append(r)
        except _Bad as e:
            note(bad, BadLine(str(path), n, str(e)), on_bad_line)
    return out


def note(bad: list[BadLine], b: BadLine, on_bad_line: OnBadLine) -> None:
    """Count a bad line, or stop at it (TraceError) when asked."""
    if on_bad_line == "stop":
        raise TraceError(f"{b} (use --on-bad-line skip to skip such lines)")
    bad.append(b)


# ------------------------------------------------------------------ summary
def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "max": None}
    x = sorted(values)

    def q(p: float) -> float:
        return round(x[min(len(x) - 1, int(p * (len(x) - 1) + 0.5))], 3)

    return {"n": len(x), "p50": q(0.5), "p90": q(0.9), "max": round(x[-1], 3)}


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def nested_subagents(trace: AgentTrace) -> int:
    """Subagents whose parent is itself a subagent (a subagent that ran its own)."""
    subs = {s for s, rs in trace.sessions.items() if rs[0].parent is not None}
    return sum(1 for s in subs if trace.sessions[s][0].parent in subs)


def summarize_agents(trace: AgentTrace) -> dict[str, Any]:
    """What a replay of the trace would play: sessions, rounds, subagents, reuse, tool waits."""
    rounds = list(trace.iter_rounds())
    inp = sum(r.input_tokens for r in rounds)
    per_tool: dict[str, list[float]] = {}
    for r in rounds:
        for t in r.tools:
            if t.latency_s is not None:
                per_tool.setdefault(t.name, []).append(t.latency_s)
    reasoning = [r.reasoning_tokens for r in rounds if r.reasoning_tokens is not None]
    return {
        "source": trace.source,
        "format": trace.format,
        "sessions": len(trace.sessions),
        "root_sessions": len(trace.roots),
        "subagents": len(trace.sessions) - len(trace.roots),
        "nested_subagents": nested_subagents(trace),
        "rounds": len(rounds),
        "rounds_per_session": _mean([len(rs) for rs in trace.sessions.values()]),
        "tool_rounds": sum(1 for r in rounds if r.tools),
        "parallel_tool_rounds": sum(1 for r in rounds if r.parallel_tools >= 2),
        "tool_calls": sum(len(r.tools) for r in rounds),
        "prefix_reuse": round(sum(r.prefix_tokens for r in rounds) / inp, 4) if inp else None,
        "mean_input_tokens": _mean([r.input_tokens for r in rounds]),
        "mean_prefix_tokens": _mean([r.prefix_tokens for r in rounds]),
        "mean_appended_tokens": _mean([r.appended_tokens for r in rounds]),
        "mean_output_tokens": _mean([r.output_tokens for r in rounds]),
        "mean_reasoning_tokens": _mean([float(x) for x in reasoning]),
        "tool_wait_s": _pcts([r.tool_wait_s for r in rounds if r.tools]),
        "think_s": _pcts([r.think_s for r in rounds if r.round > 0]),
        "tool_latency_s": {k: _pcts(v) for k, v in sorted(per_tool.items())},
        "bad_lines": len(trace.bad_lines),
    }
