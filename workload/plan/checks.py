"""Value checks the profile models share (workload.plan.profile)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel


def finite_json(v: Any, depth: int = 0) -> bool:
    """No NaN / infinity anywhere in a JSON-like value (they are not JSON)."""
    if depth > 64:
        return False
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(finite_json(x, depth + 1) for x in v.values())
    if isinstance(v, list):
        return all(finite_json(x, depth + 1) for x in v)
    return True


def floor_problems(
    prefix: str, model: BaseModel, floors: tuple[tuple[tuple[str, ...], float, str], ...]
) -> list[str]:
    """Distribution fields whose samples could fall below their floor (negative times, ...)."""
    out = []
    for path, least, unit in floors:
        d: Any = model
        for key in path:
            d = getattr(d, key, None)
        if d is None:
            continue
        lo = d.floor()
        if lo != -math.inf and lo < least:
            out.append(
                f"{prefix}.{'.'.join(path)}: samples can be {lo:g}; must be >= {least:g} ({unit})"
            )
    return out
