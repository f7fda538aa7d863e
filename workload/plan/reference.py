"""The generated Markdown reference of every profile field, from the models themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel

from workload.plan import dist
from workload.plan.arrivals import ArrivalSpec
from workload.plan.dist import Dist
from workload.plan.profile import (
    SLO,
    CompareThresholds,
    ContextPolicy,
    OutputSpec,
    Profile,
    RequestSpec,
    RunDefaults,
    SystemPrompt,
    Timeouts,
    ToolSpec,
    TrafficClass,
)
from workload.plan.profile_errors import unwrap
from workload.plan.shapes import ReasoningSpec, SubagentSpec
from workload.plan.stages import Stage

# The marker text is what README.md carries; it names the old home of reference_markdown.
REF_BEGIN = (
    "<!-- BEGIN GENERATED PROFILE REFERENCE (workload.plan.reference.reference_markdown) -->"
)
REF_END = "<!-- END GENERATED PROFILE REFERENCE -->"


def reference_markdown() -> str:
    """A Markdown reference of every profile field (type, default, description), from the models."""
    sections: list[tuple[str, type[BaseModel]]] = [
        ("Profile (top level)", Profile),
        ("run", RunDefaults),
        ("run.arrival and classes.NAME.arrival", ArrivalSpec),
        ("run.stages[]", Stage),
        ("compare", CompareThresholds),
        ("tools.NAME", ToolSpec),
        ("classes.NAME", TrafficClass),
        ("classes.NAME.system_prompt", SystemPrompt),
        ("classes.NAME.output", OutputSpec),
        ("classes.NAME.context", ContextPolicy),
        ("classes.NAME.subagents", SubagentSpec),
        ("classes.NAME.reasoning", ReasoningSpec),
        ("classes.NAME.request", RequestSpec),
        ("classes.NAME.timeouts", Timeouts),
        ("classes.NAME.slo", SLO),
    ]
    out: list[str] = []
    for title, model in sections:
        out += [f"#### `{title}`", "", "| field | type | default | meaning |", "|---|---|---|---|"]
        for name, f in model.model_fields.items():
            out.append(
                f"| `{name}` | {_type_name(f.annotation)} | {_default(f)} | {f.description or ''} |"
            )
        out.append("")
    out += [
        "#### Distributions (`dist:`)",
        "",
        "Every kind also takes `min` and `max` clamps. A bare number is `constant`.",
        "",
    ]
    out += ["| dist | fields |", "|---|---|"]
    for m in (
        dist.Constant,
        dist.Uniform,
        dist.Normal,
        dist.LogNormal,
        dist.Pareto,
        dist.Zipf,
        dist.Empirical,
        dist.Mixture,
    ):
        tag = get_args(m.model_fields["dist"].annotation)[0]
        fields = "; ".join(
            f"`{n}`{'' if f.is_required() else ' (optional)'}: {f.description}"
            for n, f in m.model_fields.items()
            if n not in ("dist", "min", "max")
        )
        out.append(f"| `{tag}` | {fields} |")
    out.append("")
    return "\n".join(out)


def _type_name(t: Any) -> str:
    if unwrap(t) is Dist or t is Dist:
        return "distribution"
    args = get_args(t)
    if get_origin(t) is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        inner = _type_name(rest[0]) if len(rest) == 1 else " or ".join(_type_name(a) for a in rest)
        return f"{inner} or null"
    if get_origin(t) is Annotated:
        return _type_name(args[0])
    if get_origin(t) is list:
        return f"list of {_type_name(args[0])}s" if args else "list"
    if get_origin(t) is dict:
        if args and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            return "mapping: name → entry"
        return f"mapping of {_type_name(args[1])}" if args else "mapping"
    if isinstance(t, type) and issubclass(t, BaseModel):
        return "mapping"
    return getattr(t, "__name__", str(t))


def _default(f: Any) -> str:
    if f.is_required():
        return "required"
    if f.default_factory is not None:
        v = f.default_factory()
        if isinstance(v, BaseModel):
            if "dist" in type(v).model_fields:
                return f"`{v.model_dump(exclude_none=True, exclude={'dist'}).get('value', v.model_dump(exclude_none=True))}`"
            return "see below"
        return f"`{json.dumps(v)}`"
    return f"`{json.dumps(f.default)}`"


def write_reference(path: str | Path) -> bool:
    """Replace the generated reference between the markers in a Markdown file; True if changed."""
    p = Path(path)
    text = p.read_text()
    a, b = text.index(REF_BEGIN) + len(REF_BEGIN), text.index(REF_END)
    new = text[:a] + "\n\n" + reference_markdown() + "\n" + text[b:]
    if new != text:
        p.write_text(new)
    return new != text
