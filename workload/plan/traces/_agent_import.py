"""Importers of real agent sessions into ``agent-session`` rounds: TraceLab, Claude Code, Codex.

Formats (each a JSONL file, or a folder of them read recursively; the pretty-printed
excerpts with ``===== record NNNN =====`` separators that TraceLab publishes read too)::

    tracelab     normalized rounds: session_id, round_index, input_tokens_total,
                 prefix_tokens (cache hit), output_tokens, reasoning_output_tokens,
                 timing_events[] (user_message / tool_result / reasoning / text / tool_call
                 with timestamps), tools[] (tool_name, emitted_at, result_at, is_error)
    claude-code  ~/.claude/projects/*/<session>.jsonl: assistant records (one LLM call =
                 one message.id, split over several records that repeat message.usage:
                 input = input_tokens + cache_creation_input_tokens + cache_read_input_tokens,
                 prefix = cache_read_input_tokens), tool_use blocks and the user records
                 whose tool_result blocks answer them (by tool_use_id), user messages.
                 isSidechain records (in the file, or agent-*.jsonl subagent files) are
                 subagent sessions: child sessions of the session whose Task/Agent call
                 ran them (by toolUseResult.agentId, else by time): the main thread or
                 another subagent (nested)
    codex        a Codex CLI rollout: response_item (message, reasoning, function_call,
                 function_call_output, custom_tool_call[_output]) and event_msg token_count
                 (info.last_token_usage: input_tokens, cached_input_tokens, output_tokens,
                 reasoning_output_tokens) that closes each round; session_meta names it

A round's request left when its last input arrived (user message or tool result) and its
answer ended at its last output record. Lines that are not JSON objects, or rounds that
cannot be formed (no usage, bad numbers), are ``BadLine``s with file and line.
Only sizes and times are kept, never content.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from workload.errors import TraceError
from workload.plan.traces._agent import (
    AGENT_FORMAT,
    AgentRound,
    AgentTrace,
    RawRound,
    RawTool,
    build_session,
    note,
    read_agent_rows,
    trace_of,
)
from workload.plan.traces._read import BadLine, OnBadLine, _Bad, _json_rows, detect_format

AGENT_FORMATS = (AGENT_FORMAT, "tracelab", "claude-code", "codex")
_CLAUDE_TYPES = {"user", "assistant", "summary", "mode", "permission-mode", "system"}
_CODEX_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
_SUBAGENT_TOOLS = {"Task", "Agent"}
_SEPARATOR = b"===== record"


# ------------------------------------------------------------------ records
def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, object) of a JSONL file or of a '===== record N =====' excerpt, streamed."""
    with open(path, "rb") as fh:
        head = b""
        for line in fh:
            s = line.strip()
            if s and not s.startswith(b"#"):
                head = s
                break
    if not head.startswith(_SEPARATOR):
        yield from _json_rows(path)
        return
    buf: list[bytes] = []
    start = 0
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if line.startswith(_SEPARATOR):
                if buf:
                    yield start, _parse(b"".join(buf))
                buf, start = [], n + 1
            elif start and line.strip():
                buf.append(line)
    if buf:
        yield start, _parse(b"".join(buf))


def _parse(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return _Bad(f"not valid JSON ({e.args[0] if e.args else e})")


RECORDING_TRACE = "trace.jsonl"  # what `agentload record --out DIR` writes in DIR
RECORDING_MARK = "exchanges.jsonl"


def recording_trace(path: str | Path) -> Path | None:
    """The trace of an `agentload record` directory (DIR/trace.jsonl), else None."""
    p = Path(path)
    if p.is_dir() and (p / RECORDING_TRACE).is_file() and (p / RECORDING_MARK).is_file():
        return p / RECORDING_TRACE
    return None


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise TraceError(f"{path}: no such file or folder")
    if path.is_file():
        return [path]
    rec = recording_trace(path)
    if rec is not None:  # a recording: its trace, not its exchange log or bodies
        return [rec]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".txt"))
    if not files:
        raise TraceError(f"{path}: a folder without .jsonl files")
    return files


def detect_agent_format(path: str | Path) -> str | None:
    """The agent-session format of a file or folder from its first record; None if not one."""
    files = _files(Path(path))
    for _n, rec in _records(files[0]):
        if not isinstance(rec, dict):
            return None
        if rec.get("v") == 1 and "session" in rec and "round" in rec:
            return AGENT_FORMAT
        if "round_index" in rec and "prefix_tokens" in rec:
            return "tracelab"
        if "payload" in rec and rec.get("type") in _CODEX_TYPES:
            return "codex"
        if "sessionId" in rec or "parentUuid" in rec or rec.get("type") in _CLAUDE_TYPES:
            return "claude-code"
        return None
    return None


def _ts(v: Any) -> float:
    """ISO 8601 ('2026-06-01T05:40:20.151Z') or unix seconds -> unix seconds."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if not isinstance(v, str):
        raise _Bad(f"timestamp must be ISO 8601 or a number, got {v!r}")
    try:
        t = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise _Bad(f"timestamp {v!r} is not ISO 8601") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def _count(v: Any, key: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _Bad(f"{key} must be a whole number >= 0, got {v!r}")
    return v


# ------------------------------------------------------------------ tracelab
def _tracelab_round(row: dict[str, Any]) -> tuple[str, int, RawRound]:
    sid, k = row.get("session_id"), row.get("round_index")
    if not isinstance(sid, str) or not sid:
        raise _Bad("session_id must be a non-empty string")
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise _Bad(f"round_index must be a whole number >= 0, got {k!r}")
    inp = _count(row.get("input_tokens_total"), "input_tokens_total")
    if inp < 1:
        raise _Bad("input_tokens_total must be >= 1")
    events = row.get("timing_events") or []
    ins = [_ts(e["timestamp"]) for e in events if e.get("event_type") in _INPUT_EVENTS]
    outs = [_ts(e["timestamp"]) for e in events if e.get("event_type") not in _INPUT_EVENTS]
    if not ins and not outs:
        raise _Bad("no timing_events: the round has no time")
    t_start = max(ins) if ins else min(outs)
    tools = [
        RawTool(
            name=str(t.get("tool_name") or "tool"),
            emitted=_ts(t["emitted_at"]),
            result=_ts(t["result_at"]) if t.get("result_at") else None,
            error=bool(t.get("is_error")),
            call_id=str(t.get("tool_call_id") or ""),
        )
        for t in row.get("tools") or []
        if t.get("emitted_at")
    ]
    reasoning = row.get("reasoning_output_tokens")
    raw = RawRound(
        t_start=t_start,
        t_end=max(outs) if outs else t_start,
        input_tokens=inp,
        prefix_tokens=min(inp, _count(row.get("prefix_tokens"), "prefix_tokens")),
        output_tokens=_count(row.get("output_tokens"), "output_tokens"),
        reasoning_tokens=None if reasoning is None else _count(reasoning, "reasoning"),
        tools=tools,
        appended_user=_count(row.get("current_user_message_count"), "user messages"),
        appended_tool_results=_count(row.get("current_tool_result_count"), "tool results"),
        model=row.get("model") if isinstance(row.get("model"), str) else None,
    )
    return sid, k, raw


_INPUT_EVENTS = {"user_message", "tool_result"}


def _read_tracelab(files: list[Path], on_bad: OnBadLine, bad: list[BadLine]) -> AgentTrace:
    by_session: dict[str, list[tuple[int, RawRound]]] = {}
    for f in files:
        for n, row in _records(f):
            try:
                if isinstance(row, _Bad):
                    raise row
                if not isinstance(row, dict):
                    raise _Bad("not a JSON object")
                sid, k, raw = _tracelab_round(row)
                raw.line = n
                by_session.setdefault(sid, []).append((k, raw))
            except (_Bad, KeyError, TypeError) as e:
                note(bad, BadLine(str(f), n, _reason(e)), on_bad)
    rounds: list[AgentRound] = []
    for sid, items in by_session.items():
        items.sort(key=lambda kr: kr[0])
        rounds.extend(build_session(sid, [r for _, r in items], source="tracelab"))
    return trace_of(rounds, str(files[0]) if len(files) == 1 else "", "tracelab", bad)


def _reason(e: Exception) -> str:
    if isinstance(e, KeyError):
        return f"missing field {e.args[0]!r}"
    return str(e)


# ------------------------------------------------------------------ claude code
@dataclass(slots=True)
class _Chain:
    """One conversation chain being read: the main thread or one sidechain (subagent)."""

    session: str
    agent_id: str | None = None
    sidechain: bool = False
    rounds: list[RawRound] = field(default_factory=list)
    message: str | None = None  # message.id of the round being read
    last_input: float | None = None
    users: int = 0
    results: int = 0


@dataclass(slots=True)
class _ClaudeState:
    chains: dict[tuple[str, str], _Chain] = field(default_factory=dict)
    chain_of: dict[str, tuple[str, str]] = field(default_factory=dict)  # uuid -> chain key
    tools: dict[str, RawTool] = field(default_factory=dict)  # tool_use id -> call
    agent_of_tool: dict[str, str] = field(default_factory=dict)  # Task tool id -> agentId
    messages: set[str] = field(default_factory=set)  # message ids already read (resumes)


def _claude_chain(st: _ClaudeState, rec: dict[str, Any], path: Path) -> _Chain:
    sid = str(rec.get("sessionId") or path.stem)
    agent = rec.get("agentId")
    if not rec.get("isSidechain"):
        key = (sid, "")
    elif isinstance(agent, str) and agent:
        key = (sid, f"agent-{agent}")
    else:
        parent = st.chain_of.get(str(rec.get("parentUuid")))
        key = parent if parent and parent[1] else (sid, f"side-{str(rec.get('uuid'))[:8]}")
    ch = st.chains.get(key)
    if ch is None:
        name = sid if not key[1] else f"{sid}/{key[1]}"
        ch = _Chain(name, agent if isinstance(agent, str) else None, bool(key[1]))
        st.chains[key] = ch
    if rec.get("uuid"):
        st.chain_of[str(rec["uuid"])] = key
    return ch


def _claude_user(st: _ClaudeState, ch: _Chain, rec: dict[str, Any], ts: float) -> None:
    content = (rec.get("message") or {}).get("content")
    blocks = content if isinstance(content, list) else []
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    for b in results:
        call = st.tools.get(str(b.get("tool_use_id")))
        if call is not None:
            call.result = ts
            call.error = bool(b.get("is_error"))
    tur = rec.get("toolUseResult")
    if results and isinstance(tur, dict) and isinstance(tur.get("agentId"), str):
        st.agent_of_tool[str(results[0].get("tool_use_id"))] = tur["agentId"]
    ch.results += len(results)
    ch.users += int(not results)
    ch.last_input = ts


def _claude_assistant(
    st: _ClaudeState, ch: _Chain, rec: dict[str, Any], ts: float, line: int
) -> None:
    msg = rec.get("message") or {}
    usage = msg.get("usage")
    if not isinstance(usage, dict):
        return  # no usage: not an LLM call (a synthetic notice)
    mid = str(msg.get("id") or rec.get("uuid"))
    if mid != ch.message:
        if mid in st.messages:
            return  # a resumed session repeats earlier messages: read once
        inp = sum(
            _count(usage.get(k), k)
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        if inp < 1:
            return  # zero usage: Claude Code's own synthetic messages
        st.messages.add(mid)
        ch.message = mid
        ch.rounds.append(
            RawRound(
                t_start=ch.last_input if ch.last_input is not None else ts,
                t_end=ts,
                input_tokens=inp,
                prefix_tokens=_count(usage.get("cache_read_input_tokens"), "cache_read"),
                output_tokens=_count(usage.get("output_tokens"), "output_tokens"),
                appended_user=ch.users,
                appended_tool_results=ch.results,
                model=msg.get("model") if isinstance(msg.get("model"), str) else None,
                line=line,
            )
        )
        ch.users = ch.results = 0
    r = ch.rounds[-1]
    r.t_end = max(r.t_end, ts)
    # split records repeat usage; streamed ones may grow it: keep the largest
    r.output_tokens = max(r.output_tokens, _count(usage.get("output_tokens"), "output_tokens"))
    for b in msg.get("content") or []:
        if isinstance(b, dict) and b.get("type") == "tool_use":
            call = RawTool(str(b.get("name") or "tool"), ts, call_id=str(b.get("id") or ""))
            st.tools[call.call_id] = call
            r.tools.append(call)


def _read_claude_file(st: _ClaudeState, f: Path, on_bad: OnBadLine, bad: list[BadLine]) -> None:
    for n, rec in _records(f):
        try:
            if isinstance(rec, _Bad):
                raise rec
            if not isinstance(rec, dict):
                raise _Bad("not a JSON object")
            kind = rec.get("type")
            if kind not in ("user", "assistant"):
                continue  # runtime bookkeeping (mode, snapshots, titles, summaries)
            ts = _ts(rec.get("timestamp"))
            ch = _claude_chain(st, rec, f)
            if kind == "user":
                _claude_user(st, ch, rec, ts)
            else:
                _claude_assistant(st, ch, rec, ts, n)
        except _Bad as e:
            note(bad, BadLine(str(f), n, str(e)), on_bad)


def _link_subagent(
    st: _ClaudeState, parents: list[_Chain], child: _Chain
) -> tuple[_Chain, int, RawTool]:
    """The chain, round and Task call that ran this sidechain: by agentId, else the latest
    call whose run spans it (a subagent's own Task call for a nested subagent)."""
    first, last = child.rounds[0].t_start, child.rounds[-1].t_end
    best: tuple[float, _Chain, int, RawTool] | None = None
    for ch in parents:
        for k, r in enumerate(ch.rounds):
            for t in r.tools:
                if t.name not in _SUBAGENT_TOOLS or t.subagent is not None:
                    continue
                agent = st.agent_of_tool.get(t.call_id)
                if agent is not None and agent == child.agent_id:
                    return ch, k, t
                spans = (
                    agent is None and t.emitted <= first + 1.0 and (t.result or last) >= last - 1.0
                )
                if spans and (best is None or t.emitted > best[0]):
                    best = (t.emitted, ch, k, t)
    if best is None:
        raise LookupError
    return best[1], best[2], best[3]


def _claude_trace(st: _ClaudeState, source: str, bad: list[BadLine]) -> AgentTrace:
    """Long because it links every sidechain to the chain that ran it (a subagent may run
    its own: nested subagents), then builds the sessions with their links."""
    rounds: list[AgentRound] = []
    mains = {sid: ch for (sid, side), ch in st.chains.items() if not side and ch.rounds}
    links: dict[str, tuple[str, int, int | None]] = {}

    def started(ch: _Chain) -> tuple[float, str]:
        return (ch.rounds[0].t_start, ch.session)

    # innermost first: a nested subagent's Task call also lies inside its parent's span
    sides = sorted(
        (ch for (sid, side), ch in st.chains.items() if side and ch.rounds and sid in mains),
        key=started,
        reverse=True,
    )
    for ch in sides:
        sid = next(k[0] for k, v in st.chains.items() if v is ch)
        main = mains[sid]
        # a parent started before its child (no cycles); the main thread first
        parents = [main] + [
            p for (s2, side), p in st.chains.items()
            if s2 == sid and side and p.rounds and started(p) < started(ch)
        ]  # fmt: skip
        try:
            pch, k, call = _link_subagent(st, parents, ch)
        except LookupError:
            links[ch.session] = (main.session, _round_at(main.rounds, ch.rounds[0].t_start), None)
            continue
        call.subagent = ch.session
        join = next(
            (j for j, r in enumerate(pch.rounds) if j > k and r.t_start >= (call.result or 0.0)),
            None,
        )
        links[ch.session] = (pch.session, k, join)
    for ch in st.chains.values():
        if not ch.rounds:
            continue
        built = build_session(ch.session, ch.rounds, source="claude-code")
        link = links.get(ch.session)
        if link is not None:
            built = [
                replace(r, parent=link[0], spawn_round=link[1], join_round=link[2]) for r in built
            ]
        rounds.extend(built)
    return trace_of(rounds, source, "claude-code", bad)


def _round_at(rounds: list[RawRound], t: float) -> int:
    """The last round that started at or before ``t`` (0 if none)."""
    k = 0
    for j, r in enumerate(rounds):
        if r.t_start <= t:
            k = j
    return k


# ------------------------------------------------------------------ codex
@dataclass(slots=True)
class _CodexTurn:
    last_input: float | None = None
    start: float | None = None  # the input time when the first output came
    end: float | None = None
    tools: list[RawTool] = field(default_factory=list)
    users: int = 0
    results: int = 0
    line: int = 0


_CODEX_CALLS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
_CODEX_OUTPUTS = {"function_call_output", "custom_tool_call_output"}


def _codex_item(cur: _CodexTurn, calls: dict[str, RawTool], p: dict[str, Any], ts: float) -> None:
    kind = p.get("type")
    if kind in _CODEX_OUTPUTS:
        call = calls.get(str(p.get("call_id")))
        if call is not None:
            call.result = ts
        cur.results += 1
        cur.last_input = ts
    elif kind == "message" and p.get("role") != "assistant":
        cur.users += int(p.get("role") == "user")
        cur.last_input = ts
    elif kind in _CODEX_CALLS or kind in ("message", "reasoning"):
        if cur.start is None:
            cur.start = cur.last_input if cur.last_input is not None else ts
        cur.end = ts
        if kind in _CODEX_CALLS:
            call = RawTool(str(p.get("name") or kind), ts, call_id=str(p.get("call_id") or ""))
            calls[call.call_id] = call
            cur.tools.append(call)


def _read_codex_file(f: Path, on_bad: OnBadLine, bad: list[BadLine]) -> list[AgentRound]:
    sid, model = f.stem, None
    raws: list[RawRound] = []
    calls: dict[str, RawTool] = {}
    cur = _CodexTurn()
    last_total: Any = None
    for n, rec in _records(f):
        try:
            if isinstance(rec, _Bad):
                raise rec
            if not isinstance(rec, dict):
                raise _Bad("not a JSON object")
            p = rec.get("payload")
            if not isinstance(p, dict):
                continue
            kind = rec.get("type")
            if kind == "session_meta":
                sid = str(p.get("id") or sid)
                continue
            if kind == "turn_context":
                model = p.get("model") if isinstance(p.get("model"), str) else model
                continue
            ts = _ts(rec.get("timestamp"))
            if kind == "response_item":
                if cur.start is None:
                    cur.line = n
                _codex_item(cur, calls, p, ts)
            elif kind == "event_msg" and p.get("type") == "token_count":
                info = p.get("info")
                if not isinstance(info, dict) or not isinstance(info.get("last_token_usage"), dict):
                    continue  # rate-limit-only update
                if info.get("total_token_usage") == last_total:
                    continue  # the same count repeated
                last_total = info.get("total_token_usage")
                u = info["last_token_usage"]
                inp = _count(u.get("input_tokens"), "input_tokens")
                start = cur.start if cur.start is not None else (cur.last_input or ts)
                raws.append(
                    RawRound(
                        t_start=start,
                        t_end=cur.end if cur.end is not None else ts,
                        input_tokens=max(1, inp),
                        prefix_tokens=_count(u.get("cached_input_tokens"), "cached_input_tokens"),
                        output_tokens=_count(u.get("output_tokens"), "output_tokens"),
                        reasoning_tokens=_count(u.get("reasoning_output_tokens"), "reasoning"),
                        tools=cur.tools,
                        appended_user=cur.users,
                        appended_tool_results=cur.results,
                        model=model,
                        line=n,
                    )
                )
                cur = _CodexTurn(last_input=cur.last_input)
        except _Bad as e:
            note(bad, BadLine(str(f), n, str(e)), on_bad)
    if cur.start is not None:
        note(bad, BadLine(str(f), cur.line, "model output with no token_count after it"), on_bad)
    return build_session(sid, raws, source="codex")


# ------------------------------------------------------------------ read
def read_agent_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    limit: int | None = None,
    on_bad_line: OnBadLine = "skip",
) -> AgentTrace:
    """Read an agent-session trace (any of ``AGENT_FORMATS``) from a file or a folder.

    ``limit`` keeps the first N root sessions (by start time) with their subagents.
    """
    p = Path(path)
    files = _files(p)
    kind = detect_agent_format(p) if fmt == "auto" else fmt
    if kind not in AGENT_FORMATS:
        raise TraceError(f"{p}: not an agent-session trace (formats: {', '.join(AGENT_FORMATS)})")
    bad: list[BadLine] = []
    if kind == AGENT_FORMAT:
        rows = [r for f in files for r in read_agent_rows(f, on_bad_line, bad)]
        trace = trace_of(rows, str(p), kind, bad)
    elif kind == "tracelab":
        trace = _read_tracelab(files, on_bad_line, bad)
    elif kind == "codex":
        rounds = [r for f in files for r in _read_codex_file(f, on_bad_line, bad)]
        trace = trace_of(rounds, str(p), kind, bad)
    else:
        st = _ClaudeState()
        for f in files:
            _read_claude_file(st, f, on_bad_line, bad)
        trace = _claude_trace(st, str(p), bad)
    trace.source = str(p)
    return trace.limited(limit)


def detect_any(path: str | Path) -> str:
    """The format of any trace agentload reads (request-level or agent-session); TraceError."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    if recording_trace(p) is not None:
        return AGENT_FORMAT
    if p.is_dir() and any(p.glob("requests*.jsonl")):
        return "requests"  # a run directory
    try:
        kind = detect_agent_format(p)
    except TraceError:
        kind = None
    return kind or detect_format(p)
