"""Request parsing and validation the way vLLM does it: same statuses, messages and params.

Nothing here touches the engine; a bad request raises ``BadRequest`` before any state
(request counter, fault RNG) moves, so a rejected request never shifts later ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import orjson

from workload.sim.config import SimConfig
from workload.sim.content import ContentModel


class BadRequest(Exception):
    """A 4xx answer with vLLM's error JSON."""

    def __init__(
        self, status: int, message: str, param: str | None = None, err_type: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.param = param
        self.err_type = err_type


def _int(body: dict, name: str, default: int | None, lo: int | None = None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(400, f"{name} must be an integer, got {value!r}.", name)
    if lo is not None and value < lo:
        raise BadRequest(400, f"{name} must be at least {lo}, got {value}.", name)
    return value


def _num(body: dict, name: str, lo: float, hi: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise BadRequest(400, f"{name} must be a number in [{lo}, {hi}], got {value!r}.", name)


def _json_invalid(raw: bytes, err: orjson.JSONDecodeError) -> BadRequest:
    """vLLM's (pydantic's) answer to an unparseable body: type "Bad Request", `param` the
    location `body.<char offset>`, the stdlib decoder's reason in the message."""
    pos, reason = err.pos, err.msg
    try:
        json.loads(raw)
    except json.JSONDecodeError as e:  # same offsets as vLLM reports; nicer reasons
        pos, reason = e.pos, e.msg
    except (UnicodeDecodeError, ValueError):
        pass
    loc = f"body.{pos}"
    detail = f"'loc': '{loc}', 'msg': 'JSON decode error', 'input': '<dict of 0 items>'"
    message = (
        f"1 validation error:\n  {{'type': 'json_invalid', {detail}, "
        f"'ctx': {{'error': '{reason}'}}}}"
    )
    return BadRequest(400, message, loc, "Bad Request")


def parse_json_body(raw: bytes) -> dict:
    """The request body as a JSON object, or vLLM's 400."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise _json_invalid(raw, e) from None
    if not isinstance(body, dict):
        raise BadRequest(400, "Request body must be a JSON object.")
    return body


def check_model(body: dict, served: str) -> None:
    """404 when the body names a model other than the served one."""
    model = body.get("model")
    if model is not None and model != served:
        raise BadRequest(404, f"The model `{model}` does not exist.", "model")


def check_tool_choice(tool_choice: object, tools: list | None) -> dict | None:
    """The tool a named tool_choice picks (None for "none" | "auto" | "required")."""
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise BadRequest(400, f"Invalid tool_choice {tool_choice!r}.", "tool_choice")
        if tool_choice == "required" and not tools:
            raise BadRequest(400, "When using `tool_choice`, `tools` must be set.", "tool_choice")
        return None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        for tool in tools or []:
            if isinstance(tool, dict) and (tool.get("function") or {}).get("name") == name:
                return tool
        raise BadRequest(400, f"Tool '{name}' has not been passed in `tools`.", "tool_choice")
    raise BadRequest(400, "tool_choice must be a string or an object.", "tool_choice")


@dataclass(slots=True)
class Generation:
    """A validated /v1/chat/completions or /v1/completions request."""

    prompt: list[int]
    tools: list | None
    tool_choice: object
    named: dict | None  # the tool a named tool_choice picks
    stream: bool
    max_tokens: int
    min_tokens: int
    priority: int
    cache_salt: str | None
    ignore_eos: bool
    include_usage: bool
    temperature: float  # vLLM's default without a generation config: 1.0
    seed: int | None  # the request's sampling seed
    thinking_budget: int = 0  # vLLM thinking_token_budget (reasoning tokens before the answer)


def parse_generation(body: dict, chat: bool, cfg: SimConfig, content: ContentModel) -> Generation:
    """Validate a generation body in vLLM's order (the first problem wins) and tokenise it.

    Long because the checks are one ordered list: split, the order that decides which
    problem a client sees would be spread over several functions."""
    tools = body.get("tools") if chat else None
    tool_choice = body.get("tool_choice", "auto" if tools else "none") if chat else "none"
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest(400, "messages must be a non-empty list.", "messages")
        if tools is not None and not isinstance(tools, list):
            raise BadRequest(400, "tools must be a list.", "tools")
        try:
            prompt = content.chat_prompt(msgs, tools or None)
        except ValueError as e:
            raise BadRequest(400, str(e), "messages") from None
    else:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1:
            p = p[0]
        if isinstance(p, str):
            prompt = content.text_prompt(p)
        elif isinstance(p, list) and p and all(isinstance(t, int) for t in p):
            prompt = list(p)
        else:
            raise BadRequest(
                400, "prompt must be a string or a list of token ids (one prompt).", "prompt"
            )
    named = check_tool_choice(tool_choice, tools)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(400, "stream must be a boolean.", "stream")
    n = _int(body, "n", 1, 1)
    if n != 1:
        raise BadRequest(400, "n > 1 is not supported by agentload-sim.", "n")
    _num(body, "temperature", 0.0, 2.0)
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    seed = _int(body, "seed", None)
    _num(body, "top_p", 1e-9, 1.0)
    max_tokens = _int(body, "max_completion_tokens", None, 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", None, 1)
    min_tokens = _int(body, "min_tokens", 0, 0) or 0
    priority = _int(body, "priority", 0) or 0
    if priority and cfg.scheduling_policy != "priority":
        raise BadRequest(400, "Priority scheduling is not enabled.", "priority")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise BadRequest(400, "cache_salt must be a non-empty string.", "cache_salt")
    ignore_eos = bool(body.get("ignore_eos", False))
    thinking = _int(body, "thinking_token_budget", 0, 0) or 0
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest(400, "stream_options must be an object.", "stream_options")
    include_usage = bool(opts.get("include_usage", False))

    plen, limit = len(prompt), cfg.max_model_len
    if plen >= limit:
        raise BadRequest(
            400,
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {plen} input tokens, which exceeds this limit even without any "
            f"output tokens. Please reduce the length of the input prompt. "
            f"(parameter=input_tokens, value={plen})",
            "input_tokens",
        )
    if max_tokens is not None and max_tokens > limit:
        raise BadRequest(
            400,
            f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please "
            f"request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
            "max_tokens",
        )
    if max_tokens is None:
        max_tokens = limit - plen
    elif plen + max_tokens > limit:
        raise BadRequest(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
            f"model's maximum context length is {limit} tokens and your request has {plen} "
            f"input tokens ({max_tokens} > {limit} - {plen}).",
            "max_tokens",
        )
    if min_tokens > max_tokens:
        raise BadRequest(400, "min_tokens must be less than or equal to max_tokens.", "min_tokens")
    return Generation(
        prompt,
        tools,
        tool_choice,
        named,
        stream,
        max_tokens,
        min_tokens,
        priority,
        salt,
        ignore_eos,
        include_usage,
        temperature,
        seed,
        thinking if chat else 0,
    )
