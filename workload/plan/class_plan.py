"""What every session of one traffic class shares: prefix text, tool schemas, shapes, limits.

Built once per class by the session planner (``workload.plan.sessions``): the shared
system prompt and tool schemas (one object per class, never copied per session), tool
weights, the agent shapes (``workload.plan.shapes``) and the fixed prefix size.
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
        self.spawn_class = self.sub.class_name if self.sub else None
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
