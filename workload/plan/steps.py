"""One step of a session: its history messages and the request it sends.

A ``Msg`` holds its text as a (key, n) reference to synthetic text, a shared string or a
literal, so a session keeps no rendered copies; ``StepRequest`` renders its body on first
access (after the player's sleep). ``tool_choice_for`` and ``tool_arguments`` are the
per-step choices the session planner (``workload.plan.sessions``) makes with no random
draw: the same seed gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from workload.measure.transport import PreparedRequest
from workload.plan.profile import TrafficClass
from workload.plan.prompts import PromptSynth

MSG_OVERHEAD = 8  # chat-template tokens per message, a generous allowance


class Msg:
    """One history message: text as a (key, n) reference, a shared string, or literal.

    ``parts`` (when set) replaces the (key, n) reference by segments of keyed text, one
    after the other: a message whose tail was re-sent as new bytes (``cache_loss``)."""

    __slots__ = ("role", "key", "n", "text", "tool_calls", "tool_call_id", "tokens", "parts")

    def __init__(
        self,
        role: str,
        *,
        key: int = 0,
        n: int = 0,
        text: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
        tokens: int = 0,
    ) -> None:
        self.role = role
        self.key = key
        self.n = n
        self.text = text
        self.tool_calls = tool_calls
        self.tool_call_id = tool_call_id
        self.tokens = (tokens or n) + MSG_OVERHEAD
        self.parts: tuple[tuple[int, int], ...] | None = None

    def render(self, synth: PromptSynth) -> dict[str, Any]:
        content = (
            self.text
            if self.text is not None
            else "".join(synth.text(k, n) for k, n in self.parts)
            if self.parts
            else (synth.text(self.key, self.n) if self.n else None)
        )
        d: dict[str, Any] = {"role": self.role, "content": content}
        if self.tool_calls:
            d["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if d["content"] is None and self.role != "assistant":
            d["content"] = ""
        return d


@dataclass(slots=True, eq=False)
class StepRequest:
    """One step to send. ``request`` (and ``body``) are built on first access: sleep first."""

    step: int  # 1-based step index within the session
    attempt: int  # 0 first; +1 per retry of the same step (same body)
    think_s: float  # sleep before sending: user think time (and a rebuild break)
    tool_pause_s: float  # sleep before sending: execution time of the previous step's tool call(s)
    expects_tool_call: bool  # the plan has this step end in a tool call
    consumes_tool_result: bool  # this step carries tool results
    planned_tool: str | None  # the tool the plan calls (scripted: the synthesized call)
    max_tokens: int
    endpoint: str  # chat | completions
    path: str
    stream: bool
    timeout_s: float
    stall_timeout_s: float
    user_class: str
    session_id: str
    _render: Callable[[], bytes] = field(repr=False)
    prompt_tokens_est: int = 0  # system + tools + history, estimated (allowances included)
    cacheable_tokens_est: int = 0  # of those, what an ideal prefix cache would hold
    # agent shapes (workload.plan.shapes): the tool calls the step's answer stands for (several
    # run in parallel; a spawn tool's calls start subagents), and the reasoning tokens asked for
    planned_calls: tuple[str, ...] = ()
    reasoning_tokens: int = 0
    tool_waits: tuple[tuple[str, float], ...] = ()  # (tool, latency s) of the results it carries
    _body: bytes | None = field(default=None, repr=False)

    @property
    def body(self) -> bytes:
        """The exact request body (deterministic per seed)."""
        if self._body is None:
            self._body = self._render()
        return self._body

    @property
    def request(self) -> PreparedRequest:
        """A fresh ``PreparedRequest`` (request_id "" for the caller to fill)."""
        return PreparedRequest(
            path=self.path,
            body=self.body,
            stream=self.stream,
            endpoint=self.endpoint,
            request_id="",
            timeout_s=self.timeout_s,
            stall_timeout_s=self.stall_timeout_s,
            user_class=self.user_class,
            session_id=self.session_id,
            step=self.step,
            attempt=self.attempt,
            planned_tool=self.planned_tool,
        )


def tool_choice_for(
    spec: TrafficClass, *, actual: bool, expects: bool, step: int, planned_tool: str | None
) -> Any:
    """The request's tool_choice: the planned call in actual mode, a structured step's
    constraint in scripted mode, else the profile's."""
    req = spec.request
    if actual and expects:
        if spec.tool_choice == "named":
            return {"type": "function", "function": {"name": planned_tool}}
        return spec.tool_choice
    if actual:
        return "auto"
    if expects and req.structured_every and step % req.structured_every == 0:
        # Scripted structured-output step: the reply is constrained to a tool call (and
        # ignored, like every scripted reply); deterministic for a seed.
        return (
            {"type": "function", "function": {"name": planned_tool}}
            if req.structured_choice == "named"
            else "required"
        )
    return req.tool_choice


def tool_arguments(
    parameters: dict[str, Any], synth: PromptSynth, key_of: Callable[[int], int]
) -> str:
    """Synthetic arguments that fit a tool's JSON schema; ``key_of(i)`` keys argument i."""
    props = parameters.get("properties", {})
    args: dict[str, Any] = {}
    for i, (name, sch) in enumerate(sorted(props.items())):
        t = sch.get("type") if isinstance(sch, dict) else None
        key = key_of(i)
        if t == "integer" or t == "number":
            args[name] = key % 500
        elif t == "boolean":
            args[name] = bool(key & 1)
        elif t == "array":
            args[name] = [synth.text(key, 2).strip()]
        elif t == "object":
            args[name] = {}
        else:
            args[name] = synth.text(key, 3 + key % 6).strip()
    return orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()
