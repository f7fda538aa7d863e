"""What every session of one traffic class shares: prefix text, tool schemas, shapes, limits.

Built once per class by the session planner (``workload.plan.sessions``): the shared
system prompt and tool schemas (one object per class, never copied per session), tool
weights, the agent shapes (``workload.plan.shapes``) and the fixed prefix size; and
whether the class fits a server's ``max_model_len`` (``ClassPlan.fit_problems``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from workload.plan.profile import Profile, ToolSpec, TrafficClass
from workload.plan.prompts import PromptSynth, stable_key
from workload.plan.shapes import SPAWN_RESULT_TOKENS, SPAWN_TOOL_DEFAULT
from workload.plan.steps import MSG_OVERHEAD

TEMPLATE_MARGIN = 256  # tokens kept free for the chat template and tool-format preamble
CALL_TOKENS = 64  # allowance for an assistant tool-call message (scripted)
MIN_ROOM = 16  # the least new content and output a step is ever given


class ClassPlan:
    """What every session of one class shares: prefix text, tool schemas, limits."""

    def __init__(
        self, prof: Profile, synth: PromptSynth, seed: int, name: str, spec: TrafficClass
    ) -> None:
        self.name = name
        self.spec = spec
        self.key32 = stable_key("class", name) & 0xFFFFFFFF
        share = spec.system_prompt.share
        self.share_session = share == "session"
        group = {"class": f"class:{name}", "global": "global"}.get(share, f"group:{share}")
        self.system_name = f"{seed}:{group}"
        self.system_tokens = spec.system_prompt.tokens
        self.system_text = (
            None if self.share_session else synth.shared(self.system_name, self.system_tokens)
        )
        self.tool_names = list(spec.tools)
        w = np.asarray([spec.tools[t] * prof.tools[t].weight for t in self.tool_names], dtype=float)
        self.tool_p = w / w.sum() if len(w) else w
        par = spec.parallel_tools
        self.parallel = None if par.dist == "constant" and par.value == 1 else par  # type: ignore[union-attr]
        self.sub = spec.subagents
        self.reasoning = spec.reasoning
        self.shaped = bool(self.parallel or self.sub or self.reasoning)
        self.spawn_tool = self.sub.tool if self.sub else None
        # the child classes a spawn chooses among, and their probabilities
        choices = self.sub.choices() if self.sub else []
        self.spawn_classes = [n for n, _ in choices]
        cw = np.asarray([w for _, w in choices], dtype=float)
        self.spawn_p = cw / cw.sum() if len(cw) else cw
        self.catalog = dict(prof.tools)
        if self.sub and self.sub.tool not in self.catalog:
            self.catalog[self.sub.tool] = ToolSpec.model_validate(
                {"parameters": SPAWN_TOOL_DEFAULT, "result_tokens": SPAWN_RESULT_TOKENS}
            )
        schema_names = self.tool_names + ([self.sub.tool] if self.sub else [])
        self.tools: list[dict[str, Any]] | None = None
        self.tools_tokens = 0
        if schema_names:
            self.tools = []
            for t in schema_names:
                ts = self.catalog[t]
                desc = ts.description
                if ts.description_tokens:
                    desc += synth.shared(f"{seed}:tool:{t}", ts.description_tokens)
                self.tools.append(
                    {
                        "type": "function",
                        "function": {"name": t, "description": desc, "parameters": ts.parameters},
                    }
                )
            self.tools_tokens = synth.count(orjson.dumps(self.tools).decode()) + 16 * len(
                self.tools
            )
        self.prefix_tokens = self.system_tokens + MSG_OVERHEAD + self.tools_tokens
        self.fixed = self.prefix_tokens + TEMPLATE_MARGIN
        self.compact_at = spec.context.compact_at_tokens  # any policy may also compact

    def fit_problems(self, max_model_len: int | None) -> tuple[list[str], list[str]]:
        """(problems, warnings) against ``max_model_len``: fixed parts that cannot fit are
        errors; variable sizes past the room are clipped (a warning)."""
        if max_model_len is None:
            return [], []
        spec = self.spec
        summ = spec.context.summary_tokens
        need = self.fixed + summ + MSG_OVERHEAD * 3 + 2 * MIN_ROOM
        if need > max_model_len:
            return [
                f"classes.{self.name}: cannot fit max_model_len {max_model_len}: system prompt "
                f"{self.system_tokens} + tool schemas {self.tools_tokens} + summary {summ} + "
                f"template margin {TEMPLATE_MARGIN} + room for a turn and an answer "
                f"({2 * MIN_ROOM}) = {need} tokens; shrink them or use a server with a longer "
                "context"
            ], []
        tool_ub = max(
            (self.catalog[t].result_tokens.upper_bound() for t in self.tool_names), default=0
        )
        if self.parallel or self.sub:  # k results arrive in one step
            fanout = self.sub.count.upper_bound() if self.sub else 1
            if self.sub and self.sub.tool_calls_probability > 0:  # tools beside the children
                fanout += self.sub.tool_calls.upper_bound()
            k = max(self.parallel.upper_bound() if self.parallel else 1, fanout)
            spawn_ub = (
                self.catalog[self.spawn_tool].result_tokens.upper_bound() if self.spawn_tool else 0
            )
            tool_ub = k * (max(tool_ub, spawn_ub) + CALL_TOKENS)
        first = spec.first_user_turn or spec.user_turn
        turn = max(spec.user_turn.upper_bound(), first.upper_bound(), tool_ub + CALL_TOKENS)
        out = spec.output.tokens.upper_bound()
        if spec.output.final_tokens is not None:
            out = max(out, spec.output.final_tokens.upper_bound())
        if self.reasoning is not None:
            out += self.reasoning.tokens.upper_bound()
        room = max_model_len - self.fixed - MSG_OVERHEAD * 2
        if turn + out > room:
            return [], [
                f"classes.{self.name}: a turn of up to {int(turn)} tokens plus an output of up "
                f"to {int(out)} tokens can exceed max_model_len {max_model_len}; such samples "
                "are clipped to fit"
            ]
        return [], []
