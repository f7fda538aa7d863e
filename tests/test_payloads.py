"""Pure bodies: stable bytes, extras only when enabled, both endpoints."""

from __future__ import annotations

import orjson
import pytest

from workload.plan.payloads import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    BodyOptions,
    build_body,
    chat_body,
    completions_body,
    content_hash,
    render_prompt,
)

MSGS = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List files."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"p": "."}'}}
        ],
    },
    {"role": "tool", "content": "a.py b.py", "tool_call_id": "c1"},
]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "ls", "description": "", "parameters": {"type": "object"}},
    }
]


def test_chat_minimal_has_no_extras():
    d = orjson.loads(chat_body(MSGS, None, BodyOptions(model="m", max_tokens=5, stream=False)))
    assert d == {
        "model": "m",
        "max_tokens": 5,
        "stream": False,
        "temperature": 0.0,
        "messages": MSGS,
    }


def test_streaming_asks_for_usage():
    d = orjson.loads(chat_body(MSGS, None, BodyOptions(model="m", max_tokens=5)))
    assert d["stream"] is True and d["stream_options"] == {"include_usage": True}


def test_vllm_extras_when_enabled():
    o = BodyOptions(
        model="m",
        max_tokens=7,
        priority=3,
        ignore_eos=True,
        min_tokens=7,
        session_id="s1",
        cache_salt="salt",
        tool_choice="required",
    )
    d = orjson.loads(chat_body(MSGS, TOOLS, o))
    for k, v in {
        "priority": 3,
        "ignore_eos": True,
        "min_tokens": 7,
        "session_id": "s1",
        "cache_salt": "salt",
    }.items():
        assert d[k] == v
    assert d["tools"] == TOOLS and d["tool_choice"] == "required"


def test_tool_choice_only_with_tools():
    d = orjson.loads(
        chat_body(MSGS, None, BodyOptions(model="m", max_tokens=1, tool_choice="auto"))
    )
    assert "tool_choice" not in d and "tools" not in d


def test_bytes_are_stable_and_sorted():
    o = BodyOptions(model="m", max_tokens=5, priority=1)
    a = chat_body(MSGS, TOOLS, o)
    assert a == chat_body([dict(reversed(list(m.items()))) for m in MSGS], TOOLS, o)
    keys = list(orjson.loads(a))
    assert keys == sorted(keys)


def test_completions_renders_history_as_one_prompt():
    path, body = build_body("completions", MSGS, TOOLS, BodyOptions(model="m", max_tokens=5))
    assert path == COMPLETIONS_PATH
    d = orjson.loads(body)
    assert "messages" not in d and "tools" not in d
    p = d["prompt"]
    assert p.startswith("System:\nYou are terse.\nTools:\n")
    assert '<tool_call>{"name": "ls", "arguments": {"p": "."}}</tool_call>' in p
    assert "Tool result (c1):\na.py b.py" in p and p.endswith("Assistant:\n")
    assert render_prompt(MSGS, TOOLS) == p


def test_chat_path_and_bad_endpoint():
    assert build_body("chat", MSGS, None, BodyOptions(model="m", max_tokens=1))[0] == CHAT_PATH
    with pytest.raises(ValueError):
        build_body("embeddings", MSGS, None, BodyOptions(model="m", max_tokens=1))


def test_content_hash_is_the_body_without_its_model_name():
    """Two sides of a canary serving differently named models sent the same content."""
    tricky = [*MSGS, {"role": "user", "content": 'say "model":"x" and {"model": "y"}'}]
    a = chat_body(tricky, TOOLS, BodyOptions(model="org/llama-3-8b", max_tokens=64))
    b = chat_body(tricky, TOOLS, BodyOptions(model="llama-3-8b-fp8", max_tokens=64))
    assert a != b and content_hash(a) == content_hash(b)
    # anything else that differs shows
    c = chat_body(tricky, TOOLS, BodyOptions(model="org/llama-3-8b", max_tokens=65))
    assert content_hash(c) != content_hash(a)
    d = chat_body(MSGS, TOOLS, BodyOptions(model="org/llama-3-8b", max_tokens=64))
    assert content_hash(d) != content_hash(a)
    p, q = (completions_body("Hi", BodyOptions(model=m, max_tokens=8)) for m in ("m1", "m22"))
    assert content_hash(p) == content_hash(q) and len(content_hash(p)) == 16
    assert content_hash(b'{"prompt":"no model"}') != content_hash(b'{"prompt":"no model!"}')
