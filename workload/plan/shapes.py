"""Agent shapes of a traffic class: parallel tool calls, subagent fan-out, reasoning tokens.

What real coding agents do that a plain loop of steps does not (issue 27)::

    classes:
      agent:
        parallel_tools: {dist: empirical, values: [1, 2, 3], weights: [6, 3, 1]}
        subagents: {class_name: explorer, probability: 0.2, count: {dist: uniform, low: 1, high: 3}}
        reasoning: {tokens: {dist: lognormal, mean: 300, sigma: 0.8, max: 4000}}
      explorer:              # played only as a subagent: no users of its own
        fixed_count: 0
        system_prompt: {tokens: 2000, share: class}

- ``parallel_tools``: a step that ends in a tool call emits k calls (k drawn per tool
  step); they run at the same time, so the next step waits for the slowest.
- ``subagents``: a step (other than the last) may spawn k child sessions of another class
  (their own system prompt, tools and steps), as k calls of a spawn tool (Claude Code's
  ``Task``). The children start when the step's answer has arrived, run beside each other,
  and the parent's next step waits for all of them (join), then carries one tool result
  per child. A child class may have subagents of its own (a Claude Code subagent that
  runs a ``Task``), down to ``MAX_SUBAGENT_DEPTH`` levels; a cycle of classes is refused. Under ``history: actual`` the model is asked for the spawn call and each
  spawn call it returns starts one child.
- ``reasoning``: hidden reasoning tokens per step, asked of the server as it supports it
  (vLLM ``thinking_token_budget``, or OpenAI ``reasoning_effort``); ``max_tokens`` grows by
  the budget, since reasoning counts against it. The client counts streamed reasoning
  chunks apart from visible content (``ttft_ms`` vs ``ttft_content_ms``).

Draws for these shapes come from their own random stream per session, so a profile that
does not use them sends the very bytes it sent before they existed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workload.plan.dist import Dist, constant

MAX_FANOUT = 64  # parallel tool calls or subagents of one step
MAX_SUBAGENT_DEPTH = 8  # levels of subagents below a top-level session (a subagent's own, ...)
SPAWN_TOOL_DEFAULT: dict[str, Any] = {
    "type": "object",
    "properties": {"description": {"type": "string"}, "prompt": {"type": "string"}},
    "required": ["description", "prompt"],
}
SPAWN_RESULT_TOKENS = 400  # a subagent's report, when the catalog has no spawn tool


class _S(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class SubagentSpec(_S):
    """Subagent fan-out: a step spawns child sessions of another class and waits for them."""

    class_name: str = Field(
        description="Traffic class the child sessions play (its own system prompt, tools and "
        "steps; give it fixed_count: 0 so it runs only as a subagent). It may spawn "
        f"subagents of its own, up to {MAX_SUBAGENT_DEPTH} levels below a top-level "
        "session; no class may spawn itself, directly or through its subagents."
    )
    probability: float = Field(
        0.0, ge=0, le=1, description="Chance a step (other than the last) spawns subagents."
    )
    count: Dist = Field(
        default_factory=lambda: constant(1),
        description=f"Child sessions per spawning step (integer, 1 to {MAX_FANOUT}); they run "
        "concurrently and the parent's next step waits for the slowest.",
    )
    tool: str = Field(
        "task",
        description="Name of the spawn tool the parent calls once per child (Claude Code's "
        "Task). A catalog tool of that name gives its schema and result_tokens (the child's "
        f"report); otherwise a built-in schema and {SPAWN_RESULT_TOKENS}-token reports. Its "
        "latency_s is not used: the child's run is the wait.",
    )


class ReasoningSpec(_S):
    """Hidden reasoning tokens per step, before the visible answer."""

    tokens: Dist = Field(
        default_factory=lambda: constant(0),
        description="Reasoning tokens asked for per step (0: none); max_tokens grows by them.",
    )
    request: Literal["thinking_token_budget", "reasoning_effort", "none"] = Field(
        "thinking_token_budget",
        description="How the budget is asked for: vLLM `thinking_token_budget` (needs a "
        "--reasoning-parser; the simulator honours it), OpenAI `reasoning_effort` (the model "
        "decides the length), or none (a model that always reasons).",
    )
    effort: Literal["minimal", "low", "medium", "high"] = Field(
        "medium", description="`reasoning_effort` sent when request is reasoning_effort."
    )

    def extra(self, budget: int) -> dict[str, Any]:
        """The body fields that ask for ``budget`` reasoning tokens."""
        if budget <= 0 or self.request == "none":
            return {}
        if self.request == "reasoning_effort":
            return {"reasoning_effort": self.effort}
        return {"thinking_token_budget": budget}


PARALLEL_TOOLS_FIELD: Any = Field(
    default_factory=lambda: constant(1),
    description=f"Tool calls a tool step emits (integer, 1 to {MAX_FANOUT}), run in parallel: "
    "the next step waits for the slowest. Each call picks its tool by weight. Scripted "
    "history; under actual history the server decides.",
)
SUBAGENTS_FIELD: Any = Field(
    None, description="Subagent fan-out (workload.plan.shapes); null: none."
)
REASONING_FIELD: Any = Field(
    None, description="Reasoning tokens per step (workload.plan.shapes); null: none."
)


def shape_problems(prefix: str, cls: Any, classes: dict[str, Any]) -> list[str]:
    """Cross-field problems of one class's shapes: (path: message) lines."""
    out: list[str] = []
    for name, d in (("parallel_tools", cls.parallel_tools),) + (
        (("subagents.count", cls.subagents.count),) if cls.subagents else ()
    ):
        if d.upper_bound() > MAX_FANOUT:
            out.append(f"{prefix}.{name}: samples can be {d.upper_bound():g}; at most {MAX_FANOUT}")
    sub = cls.subagents
    if sub is None:
        return out
    child = classes.get(sub.class_name)
    if child is None:
        known = ", ".join(sorted(classes))
        out.append(f"{prefix}.subagents.class_name: unknown class {sub.class_name!r} ({known})")
    if sub.tool in cls.tools:
        out.append(
            f"{prefix}.subagents.tool: {sub.tool!r} is also in tools (an ordinary tool call "
            "would spawn nothing); leave it out of tools"
        )
    return out


def nesting_problems(classes: dict[str, Any]) -> list[str]:
    """Subagent classes that spawn in a cycle, or nest past ``MAX_SUBAGENT_DEPTH``: one line
    per cycle, one per top-level chain too deep."""
    out: list[str] = []
    cycles: set[frozenset[str]] = set()
    spawned = {c.subagents.class_name for c in classes.values() if c.subagents is not None}
    for name in classes:
        chain, looped = [name], False
        while (sub := classes[chain[-1]].subagents) is not None and sub.class_name in classes:
            if looped := sub.class_name in chain:
                loop = chain[chain.index(sub.class_name) :]
                if frozenset(loop) not in cycles:
                    cycles.add(frozenset(loop))
                    out.append(
                        f"classes.{loop[-1]}.subagents.class_name: subagent classes spawn in a "
                        f"cycle ({' -> '.join([*loop, loop[0]])}); a class may not spawn "
                        "itself, directly or through its subagents"
                    )
                break
            chain.append(sub.class_name)
        if not looped and name not in spawned and len(chain) - 1 > MAX_SUBAGENT_DEPTH:
            out.append(
                f"classes.{name}.subagents: subagents nest {len(chain) - 1} levels deep "
                f"({' -> '.join(chain)}); at most {MAX_SUBAGENT_DEPTH}"
            )
    return out
