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
  runs a ``Task``), down to ``MAX_SUBAGENT_DEPTH`` levels; a cycle of classes is refused.
  ``classes: {explorer: 3, coder: 1}`` instead of ``class_name`` draws each child's class
  by weight. ``tool_calls_probability`` / ``tool_calls``: the spawning step also calls
  ordinary tools (a ``Task`` beside a ``Bash``), which run beside the children; the next
  step waits for the slowest of both. Under ``history: actual`` the model is asked for the
  spawn call and each spawn call it returns starts one child.
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
    """Subagent fan-out: a step spawns child sessions of other classes and waits for them."""

    class_name: str | None = Field(
        None,
        description="Traffic class the child sessions play (its own system prompt, tools and "
        "steps; give it fixed_count: 0 so it runs only as a subagent). It may spawn "
        f"subagents of its own, up to {MAX_SUBAGENT_DEPTH} levels below a top-level "
        "session; no class may spawn itself, directly or through its subagents. Give this "
        "or classes.",
    )
    classes: dict[str, float] | None = Field(
        None,
        description="A weighted choice of child classes instead of class_name ({class: "
        "weight}, weights > 0): each child draws its class (a Claude Code agent whose "
        "subagents ran other models or shapes).",
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
    tool_calls_probability: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Chance a spawning step also calls the class's ordinary tools (a Task "
        "beside a Bash): they run beside the children, and the next step waits for the "
        "slowest of the tools and the children (the join).",
    )
    tool_calls: Dist = Field(
        default_factory=lambda: constant(1),
        description=f"Ordinary tool calls such a step makes beside its children (integer, 1 "
        f"to {MAX_FANOUT}); each picks its tool by weight, as a tool step's calls do.",
    )

    def choices(self) -> list[tuple[str, float]]:
        """(child class, weight) the spawn chooses among."""
        if self.classes is not None:
            return list(self.classes.items())
        return [(self.class_name, 1.0)] if self.class_name is not None else []

    def choice_field(self) -> str:
        """The field that names the child classes (for problem lines)."""
        return "classes" if self.classes is not None else "class_name"


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
    sub = cls.subagents
    dists = [("parallel_tools", cls.parallel_tools)]
    if sub is not None:
        dists += [("subagents.count", sub.count), ("subagents.tool_calls", sub.tool_calls)]
    for name, d in dists:
        if d.upper_bound() > MAX_FANOUT:
            out.append(f"{prefix}.{name}: samples can be {d.upper_bound():g}; at most {MAX_FANOUT}")
    if sub is None:
        return out
    if (sub.class_name is None) == (sub.classes is None):
        out.append(f"{prefix}.subagents: give class_name or classes (a weighted choice), one")
    if sub.classes is not None and not sub.classes:
        out.append(f"{prefix}.subagents.classes: empty; name at least one class")
    for child, w in sub.choices():
        path = f"{prefix}.subagents.{sub.choice_field()}"
        if child not in classes:
            known = ", ".join(sorted(classes))
            out.append(f"{path}: unknown class {child!r} ({known})")
        if not w > 0:
            out.append(f"{path}.{child}: weight {w:g}; must be > 0")
    if sub.tool in cls.tools:
        out.append(
            f"{prefix}.subagents.tool: {sub.tool!r} is also in tools (an ordinary tool call "
            "would spawn nothing); leave it out of tools"
        )
    if sub.tool_calls_probability > 0 and not cls.tools:
        out.append(
            f"{prefix}.subagents.tool_calls_probability: the class has no tools to call beside "
            "its subagents; give it tools or set 0"
        )
    return out


def _edges(classes: dict[str, Any]) -> dict[str, list[str]]:
    """Every spawn edge between known classes: {class: the child classes it may spawn}."""
    return {
        n: [k for k, _ in c.subagents.choices() if k in classes] if c.subagents else []
        for n, c in classes.items()
    }


def nesting_problems(classes: dict[str, Any]) -> list[str]:
    """Subagent classes that spawn in a cycle (over every edge of every weighted choice), or
    nest past ``MAX_SUBAGENT_DEPTH``: one line per cycle, one per top-level chain too deep."""
    edges = _edges(classes)
    out: list[str] = []
    state: dict[str, int] = {}  # 1: on the walk's stack, 2: done
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in edges[n]:
            if state.get(m) == 1:  # an edge back into the stack closes a cycle
                loop = stack[stack.index(m) :]
                field = classes[loop[-1]].subagents.choice_field()
                out.append(
                    f"classes.{loop[-1]}.subagents.{field}: subagent classes spawn in a "
                    f"cycle ({' -> '.join([*loop, m])}); a class may not spawn "
                    "itself, directly or through its subagents"
                )
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in classes:
        if n not in state:
            visit(n)
    if out:
        return out
    deepest: dict[str, list[str]] = {}  # the longest spawn chain from each class (acyclic now)

    def chain(n: str) -> list[str]:
        if n not in deepest:
            deepest[n] = [n, *max((chain(m) for m in edges[n]), key=len, default=[])]
        return deepest[n]

    spawned = {m for ms in edges.values() for m in ms}
    for n in classes:
        if n not in spawned and len(chain(n)) - 1 > MAX_SUBAGENT_DEPTH:
            c = chain(n)
            out.append(
                f"classes.{n}.subagents: subagents nest {len(c) - 1} levels deep "
                f"({' -> '.join(c)}); at most {MAX_SUBAGENT_DEPTH}"
            )
    return out
