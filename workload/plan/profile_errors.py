"""Pydantic validation errors reworded for profile authors: one line per problem, naming the
field path as written in YAML (union tags dropped) and what is allowed."""

from __future__ import annotations

import difflib
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from workload.plan.dist import DIST_KINDS, Component, Dist
from workload.plan.profile import Profile

_DIST_TAGS = set(get_args(get_args(Dist)[0]))  # the union members


def format_errors(e: ValidationError) -> list[str]:
    """One line per validation error: ``path: what is wrong (what is allowed)``."""
    return [line for _, line in located_errors(e)]


def located_errors(e: ValidationError) -> list[tuple[tuple[str, ...], str]]:
    """``format_errors`` with the YAML key path of each line (to look up its file and line)."""
    out = []
    for err in e.errors():
        loc = [str(p) for p in err["loc"]]
        clean = _walk(Profile, loc)[1]
        out.append((tuple(clean), _line(err)))
    return out


def did_you_mean(word: str, choices: Any) -> str:
    """' (did you mean 'x'?)' for the closest of ``choices``, or ''."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _line(err: Any) -> str:
    loc = [str(p) for p in err["loc"]]
    model, clean = _walk(Profile, loc)
    path = ".".join(clean) or "(top level)"
    typ = err["type"]
    msg = err["msg"]
    if typ == "extra_forbidden":
        allowed = sorted(model.model_fields) if model is not None else []
        parent = ".".join(clean[:-1]) or "(top level)"
        return (
            f"{parent}: unknown key {clean[-1]!r}{did_you_mean(clean[-1], allowed)} "
            f"(allowed: {', '.join(allowed) or '?'})"
        )
    if typ == "missing":
        hint = ""
        if model in _DIST_TAGS:
            tag = get_args(model.model_fields["dist"].annotation)[0]
            need = [n for n, f in model.model_fields.items() if n != "dist" and f.is_required()]
            opt = [n for n, f in model.model_fields.items() if n != "dist" and not f.is_required()]
            hint = f" ({tag} needs {', '.join(need) or 'no field'}; optional {', '.join(opt)})"
        return f"{path}: required field missing{hint}"
    if typ == "union_tag_invalid":
        return f"{path}: unknown distribution (allowed dist: {', '.join(_dist_names())})"
    if typ == "union_tag_not_found":
        return f"{path}: a distribution needs a dist: tag or a number (allowed dist: {', '.join(_dist_names())})"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif msg.startswith("Input should be "):
        msg = "must be " + msg[len("Input should be ") :]
        for words, sym in _COMPARISONS:
            msg = msg.replace(words, sym)
    if typ == "finite_number":
        msg = "must be a finite number (not NaN or infinity)"
    if typ in ("model_type", "model_attributes_type", "dict_type"):
        msg = f"expected a mapping, got {type(err.get('input')).__name__}"
    return f"{path}: {msg}"


_COMPARISONS = (
    ("greater than or equal to", ">="),
    ("less than or equal to", "<="),
    ("greater than", ">"),
    ("less than", "<"),
)


def _dist_names() -> list[str]:
    return list(DIST_KINDS)


def _walk(model: Any, loc: list[str]) -> tuple[Any, list[str]]:
    """Follow a pydantic error location through the models; drop union tags from the path.

    Returns the model class owning the last key (for 'allowed keys') and the clean path.
    """
    clean: list[str] = []
    cur: Any = model
    owner: Any = model
    for part in loc:
        if cur is Dist:
            # A discriminated union puts the tag in the location: skip it, step into the member.
            member = _dist_member(part)
            if member is not None:
                cur = member
                continue
        if part == "of" and cur is Component:
            cur = Dist
            continue
        if part.startswith("function-"):
            continue
        clean.append(part)
        owner = cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None
        cur = _child(cur, part)
    return owner, clean


def _dist_member(tag: str) -> Any:
    for m in _DIST_TAGS:
        if get_args(m.model_fields["dist"].annotation) == (tag,):
            return m
    return None


def _child(t: Any, key: str) -> Any:
    if isinstance(t, type) and issubclass(t, BaseModel):
        f = t.model_fields.get(key)
        if f is None:
            return None
        return unwrap(f.annotation)
    origin = get_origin(t)
    if origin in (dict, list):
        args = get_args(t)
        return unwrap(args[-1]) if args else None
    return None


def unwrap(t: Any) -> Any:
    """The annotation under Optional[...]; any union of distribution kinds as ``Dist``."""
    # Optional[X] -> X; Annotated[...] of a Dist union -> Dist
    args = get_args(t)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return unwrap(rest[0])
    if args and set(args) <= _DIST_TAGS:
        return Dist
    return t
