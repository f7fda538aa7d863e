"""Pure request building: a step's messages and options -> OpenAI request JSON bytes.

Bodies are serialised with orjson and sorted keys, so the same inputs give the
same bytes on every machine. vLLM extras (priority, ignore_eos, min_tokens,
session_id, cache_salt) appear only when the caller passes them (the profile
enables them); nothing run-unique goes in a body (request ids go in headers).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
PATHS = {"chat": CHAT_PATH, "completions": COMPLETIONS_PATH}

_OPTS = orjson.OPT_SORT_KEYS


@dataclass(slots=True)
class BodyOptions:
    """Everything in a body besides the conversation."""

    model: str
    max_tokens: int
    stream: bool = True
    temperature: float = 0.0
    tool_choice: str | dict[str, Any] | None = None  # only sent when tools are sent
    priority: int | None = None
    ignore_eos: bool = False
    min_tokens: int | None = None
    session_id: str | None = None
    cache_salt: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _common(o: BodyOptions) -> dict[str, Any]:
    d: dict[str, Any] = {
        "model": o.model,
        "max_tokens": o.max_tokens,
        "stream": o.stream,
        "temperature": o.temperature,
    }
    if o.stream:
        d["stream_options"] = {"include_usage": True}
    if o.priority is not None:
        d["priority"] = o.priority
    if o.ignore_eos:
        d["ignore_eos"] = True
    if o.min_tokens is not None:
        d["min_tokens"] = o.min_tokens
    if o.session_id is not None:
        d["session_id"] = o.session_id
    if o.cache_salt is not None:
        d["cache_salt"] = o.cache_salt
    d.update(o.extra)
    return d


def chat_body(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, o: BodyOptions
) -> bytes:
    """A /v1/chat/completions body."""
    d = _common(o)
    d["messages"] = messages
    if tools:
        d["tools"] = tools
        if o.tool_choice is not None:
            d["tool_choice"] = o.tool_choice
    return orjson.dumps(d, option=_OPTS)


def completions_body(prompt: str, o: BodyOptions) -> bytes:
    """A /v1/completions body."""
    d = _common(o)
    d["prompt"] = prompt
    return orjson.dumps(d, option=_OPTS)


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """Chat history as one plain-text prompt (for the completions endpoint).

    A neutral transcript, not any model's chat template: the point is the same
    content and the same shared prefix, not instruction following.
    """
    out: list[str] = []
    for i, m in enumerate(messages):
        role = m["role"]
        if role == "system":
            out.append("System:\n" + (m.get("content") or "") + "\n")
            if tools and i == 0:
                out.append("Tools:\n" + orjson.dumps(tools, option=_OPTS).decode() + "\n")
        elif role == "user":
            out.append("\nUser:\n" + (m.get("content") or "") + "\n")
        elif role == "assistant":
            text = m.get("content") or ""
            for c in m.get("tool_calls") or ():
                f = c["function"]
                text += (
                    '<tool_call>{"name": "'
                    + f["name"]
                    + '", "arguments": '
                    + f["arguments"]
                    + "}</tool_call>"
                )
            out.append("\nAssistant:\n" + text + "\n")
        elif role == "tool":
            out.append(
                "\nTool result ("
                + str(m.get("tool_call_id", ""))
                + "):\n"
                + (m.get("content") or "")
                + "\n"
            )
    if tools and (not messages or messages[0]["role"] != "system"):
        out.insert(0, "Tools:\n" + orjson.dumps(tools, option=_OPTS).decode() + "\n")
    out.append("\nAssistant:\n")
    return "".join(out)


def build_body(
    endpoint: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    o: BodyOptions,
) -> tuple[str, bytes]:
    """(path, body) for an endpoint ('chat' | 'completions')."""
    if endpoint == "chat":
        return CHAT_PATH, chat_body(messages, tools, o)
    if endpoint == "completions":
        return COMPLETIONS_PATH, completions_body(render_prompt(messages, tools), o)
    raise ValueError(f"unknown endpoint {endpoint!r} (allowed: chat, completions)")


_MODEL_KEY = b'"model":"'


def content_hash(body: bytes) -> str:
    """blake2b-64 of a request body without its top-level model name.

    What a session sent, whatever each side's model is called: under `history: actual` the
    paired shifts compare only requests whose content matched on both sides. Keys are
    sorted and quotes inside strings are escaped, so the first `"model":"` is the top-level
    key (no message key sorts before it and holds an object with that key).
    """
    h = hashlib.blake2b(digest_size=8)
    i = body.find(_MODEL_KEY)
    j = body.find(b'"', i + len(_MODEL_KEY)) if i >= 0 else -1
    if j < 0:
        h.update(body)
    else:  # the parts around the model name, hashed in place (bodies run to megabytes)
        view = memoryview(body)
        h.update(view[:i])
        h.update(view[j + 1 :])
    return h.hexdigest()
