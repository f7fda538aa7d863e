"""What one exchange says, read from its bodies: the conversation, the answer, tokens, tools.

Pure functions over the decoded request and response bodies (never on the proxy's loop).
A chat conversation becomes a list of ``Canon`` messages: role, text, tool calls and the
tool_call_id, in a canonical byte form, so an agent that sends an answer back (as the SDK
serialises it, with its extra null fields) matches the answer as the server streamed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from workload.measure.sse import SSEParser

ROUND_PATHS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
}


@dataclass(frozen=True, slots=True)
class Canon:
    """A chat message reduced to what identifies it in a conversation."""

    role: str
    text: str
    tool_calls: tuple[tuple[str, str, str], ...] = ()  # (id, name, arguments)
    tool_call_id: str = ""
    name: str = ""

    @property
    def key(self) -> bytes:
        return orjson.dumps([self.role, self.text, self.name, self.tool_call_id, self.tool_calls])

    def body(self) -> str:
        """Its text and tool calls, as a model generates them (what completion tokens count)."""
        return self.text + "".join(f"{n}({a})" for _, n, a in self.tool_calls)

    def render(self) -> str:
        """The text a tokenizer counts for it (a neutral template: role, text, calls)."""
        calls = "".join(f"\n{n}({a})" for _, n, a in self.tool_calls)
        return f"<|{self.role}|>\n{self.text}{calls}\n"


@dataclass(slots=True)
class Facts:
    """One exchange as the record reads it."""

    kind: str  # chat | completions | responses | other
    ok: bool  # 2xx, bodies readable, the answer complete
    model: str | None = None
    user: str | None = None
    messages: list[Canon] = field(default_factory=list)  # chat: the conversation sent
    tools: Canon | None = None  # chat: the tools offered (part of the prompt the server sees)
    prompt_text: str | None = None  # completions: the prompt
    answer: Canon | None = None  # the answer as a message the agent may send back
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (id, name)
    prompt_tokens: int | None = None  # from usage
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    response_id: str | None = None
    previous_response_id: str | None = None
    problem: str | None = None  # why ok is False when the bodies were the reason


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text kept, other parts by their JSON
        out = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            else:
                out.append(orjson.dumps(part, option=orjson.OPT_SORT_KEYS).decode())
        return "".join(out)
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()


def _calls(raw: Any) -> tuple[tuple[str, str, str], ...]:
    out = []
    for c in raw or ():
        if not isinstance(c, dict):
            continue
        fn: dict[str, Any] = c["function"] if isinstance(c.get("function"), dict) else {}
        out.append((str(c.get("id") or ""), str(fn.get("name") or ""), _text(fn.get("arguments"))))
    return tuple(out)


def canon(msg: Any) -> Canon:
    """A message of a chat request in canonical form (anything not an object: its JSON)."""
    if not isinstance(msg, dict):
        return Canon("?", _text(msg))
    return Canon(
        role=str(msg.get("role") or ""),
        text=_text(msg.get("content")),
        tool_calls=_calls(msg.get("tool_calls")),
        tool_call_id=str(msg.get("tool_call_id") or ""),
        name=str(msg.get("name") or "") if msg.get("role") != "tool" else "",
    )


def _usage(f: Facts, usage: Any) -> None:
    if not isinstance(usage, dict):
        return

    def num(d: Any, *keys: str) -> int | None:
        for k in keys:
            v = d.get(k) if isinstance(d, dict) else None
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                return v
        return None

    f.prompt_tokens = num(usage, "prompt_tokens", "input_tokens")
    f.completion_tokens = num(usage, "completion_tokens", "output_tokens")
    details = usage.get("completion_tokens_details") or usage.get("output_tokens_details")
    f.reasoning_tokens = num(details, "reasoning_tokens")
    pdet = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    f.cached_tokens = num(pdet, "cached_tokens")


def _sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON objects a recorded event stream carried (the client's own SSE parser)."""
    parser = SSEParser()
    out = []
    for data in parser.feed_data(body) + parser.close_data():
        data = data.strip()
        if not data or data == b"[DONE]":
            continue
        try:
            ev = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def _chat_answer(f: Facts, body: bytes, streamed: bool) -> None:
    text: list[str] = []
    calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
    if streamed:
        for ev in _sse_events(body):
            f.response_id = f.response_id or ev.get("id")
            _usage(f, ev.get("usage"))
            for ch in ev.get("choices") or ():
                if not isinstance(ch, dict) or ch.get("index", 0) != 0:
                    continue
                d = ch.get("delta") or {}
                if isinstance(d.get("content"), str):
                    text.append(d["content"])
                for tc in d.get("tool_calls") or ():
                    if not isinstance(tc, dict):
                        continue
                    slot = calls.setdefault(int(tc.get("index") or 0), ["", "", ""])
                    fn = tc.get("function") or {}
                    slot[0] = slot[0] or str(tc.get("id") or "")
                    slot[1] += str(fn.get("name") or "")
                    slot[2] += str(fn.get("arguments") or "")
        tool_calls = tuple((c[0], c[1], c[2]) for _, c in sorted(calls.items()))
        f.answer = Canon("assistant", "".join(text), tool_calls)
    else:
        doc = orjson.loads(body)
        f.response_id = doc.get("id")
        _usage(f, doc.get("usage"))
        ch = (doc.get("choices") or [{}])[0]
        msg = ch.get("message") or {}
        f.answer = Canon("assistant", _text(msg.get("content")), _calls(msg.get("tool_calls")))
    f.tool_calls = [(i, n) for i, n, _ in f.answer.tool_calls]


def _completion_answer(f: Facts, body: bytes, streamed: bool) -> None:
    if streamed:
        parts = []
        for ev in _sse_events(body):
            _usage(f, ev.get("usage"))
            for ch in ev.get("choices") or ():
                if (
                    isinstance(ch, dict)
                    and ch.get("index", 0) == 0
                    and isinstance(ch.get("text"), str)
                ):
                    parts.append(ch["text"])
        f.answer = Canon("assistant", "".join(parts))
    else:
        doc = orjson.loads(body)
        _usage(f, doc.get("usage"))
        ch = (doc.get("choices") or [{}])[0]
        f.answer = Canon("assistant", _text(ch.get("text")))


def _responses_answer(f: Facts, body: bytes, streamed: bool) -> None:
    doc: Any = None
    if streamed:
        for ev in _sse_events(body):
            if isinstance(ev.get("response"), dict) and ev.get("type") == "response.completed":
                doc = ev["response"]
    else:
        doc = orjson.loads(body)
    if not isinstance(doc, dict):
        raise ValueError("no completed response")
    f.response_id = doc.get("id")
    _usage(f, doc.get("usage"))
    for item in doc.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "function_call":
            f.tool_calls.append((str(item.get("call_id") or ""), str(item.get("name") or "")))


def read_exchange(path: str, status: int, request: bytes, response: bytes, streamed: bool) -> Facts:
    """The facts of one exchange (``ok`` False with a ``problem`` when they cannot be read)."""
    kind = ROUND_PATHS.get(path.rstrip("/"), "other")
    f = Facts(kind=kind, ok=False)
    if kind == "other":
        return f
    try:
        req = orjson.loads(request) if request else {}
    except orjson.JSONDecodeError:
        f.problem = "the request body is not JSON"
        return f
    if not isinstance(req, dict):
        f.problem = "the request body is not a JSON object"
        return f
    f.model = req.get("model") if isinstance(req.get("model"), str) else None
    f.user = req.get("user") if isinstance(req.get("user"), str) and req.get("user") else None
    if kind == "chat":
        f.messages = [canon(m) for m in req.get("messages") or ()]
        if req.get("tools"):
            f.tools = Canon(
                "tools", orjson.dumps(req["tools"], option=orjson.OPT_SORT_KEYS).decode()
            )
    elif kind == "completions":
        p = req.get("prompt")
        f.prompt_text = p if isinstance(p, str) else _text(p)
    else:
        prev = req.get("previous_response_id")
        f.previous_response_id = prev if isinstance(prev, str) else None
        f.prompt_text = _text(req.get("input"))
    if not 200 <= status < 300:
        f.problem = f"status {status}"
        return f
    try:
        {"chat": _chat_answer, "completions": _completion_answer, "responses": _responses_answer}[
            kind
        ](f, bytes(response), streamed)
    except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError, IndexError) as e:
        f.problem = f"the response could not be read ({type(e).__name__})"
        return f
    f.ok = True
    return f
