"""The *shape* of OpenAI-compatible replies, for comparing the simulator with real vLLM.

A shape maps each JSON path to the kinds of value seen there (`str`, `int`,
`float`, `bool`, `null`, `list`, `dict`); list items share the path `[]`.
Values never matter, only which fields exist and what kind they are. SSE
streams are split into event roles first (role chunk, content, tool-call
start, tool-call arguments, finish, usage, [DONE]) so that "the usage chunk
of the sim" is compared with "the usage chunk of vLLM".
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

Shape = dict[str, set[str]]


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, list):
        return "list"
    return "dict"


def shape(obj: Any, path: str = "", out: Shape | None = None) -> Shape:
    """Every path in obj with the kinds of value found there."""
    out = out if out is not None else defaultdict(set)
    out[path or "$"].add(_kind(obj))
    if isinstance(obj, dict):
        for k, v in obj.items():
            shape(v, f"{path}.{k}", out)
    elif isinstance(obj, list):
        for v in obj:
            shape(v, f"{path}[]", out)
    return out


def sse_events(raw: bytes) -> list[str]:
    """The data payloads of an SSE body (vLLM sends one `data:` line per event)."""
    out = []
    for block in raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        data = [ln[5:].lstrip(" ") for ln in block.split("\n") if ln.startswith("data:")]
        if data:
            out.append("\n".join(data))
    return out


def event_role(obj: dict[str, Any]) -> str:
    """Which kind of chunk this is (see module doc)."""
    choices = obj.get("choices") or []
    if not choices:
        return "usage" if "usage" in obj else "empty"
    ch = choices[0]
    delta = ch.get("delta")
    if ch.get("finish_reason"):
        return "finish"
    if delta is None:  # completions
        return "content"
    if "role" in delta:
        return "role"
    tcs = delta.get("tool_calls")
    if tcs:
        return (
            "tool_call_start"
            if tcs[0].get("id") or (tcs[0].get("function") or {}).get("name")
            else "tool_call_args"
        )
    return "content"


def stream_shapes(raw: bytes) -> dict[str, Shape]:
    """Per event role, the union shape of its chunks; '[DONE]' counted as a role."""
    roles: dict[str, Shape] = {}
    for data in sse_events(raw):
        if data == "[DONE]":
            roles.setdefault("done", defaultdict(set))["$"].add("[DONE]")
            continue
        obj = json.loads(data)
        shape(obj, "", roles.setdefault(event_role(obj), defaultdict(set)))
    return roles


def diff(real: Shape, sim: Shape, ignore: tuple[str, ...] = ()) -> list[str]:
    """Human lines: paths vLLM has that the sim lacks, the reverse, and kind mismatches."""
    lines = []
    for p in sorted(set(real) | set(sim)):
        if any(p.startswith(i) for i in ignore):
            continue
        r, s = real.get(p), sim.get(p)
        if s is None:
            lines.append(f"missing in sim: {p} ({'|'.join(sorted(r or ()))})")
        elif r is None:
            lines.append(f"only in sim:    {p} ({'|'.join(sorted(s))})")
        elif r != s and not (r | s) <= {"int", "float"}:
            lines.append(
                f"kind differs:   {p} vLLM {'|'.join(sorted(r))} / sim {'|'.join(sorted(s))}"
            )
    return lines


def stream_diff(real_raw: bytes, sim_raw: bytes, ignore: tuple[str, ...] = ()) -> list[str]:
    real, sim = stream_shapes(real_raw), stream_shapes(sim_raw)
    lines = []
    for role in sorted(set(real) | set(sim)):
        if role not in sim:
            lines.append(f"[{role}] event missing in sim")
        elif role not in real:
            lines.append(f"[{role}] event only in sim")
        else:
            lines += [f"[{role}] {ln}" for ln in diff(real[role], sim[role], ignore)]
    return lines
