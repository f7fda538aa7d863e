"""Fitting a profile with agent shapes to an agent-session trace, and checking the fit.

``fit_agent_profile`` turns the trace's sessions into traffic classes, one per agent and
subagent depth (sessions grouped by model and by how deep they ran: top-level, a
subagent, a subagent's subagent, ...), each fitted from its own rounds:

- ``steps``: rounds per session; ``system_prompt.tokens``: the prefix round 0 reused (the
  agent's cached system prompt), less the planner's tool-schema and message allowance;
- ``first_user_turn``: tokens a session's first round appended to its reused prefix;
  ``user_turn``: tokens appended on later rounds that carry no tool result; each tool's
  ``result_tokens``: tokens appended per call on the round after its call; its
  ``latency_s``: the recorded wait after the answer (``tools[].wait_s``). After the first
  round, what a round appended is new content only: its input less the previous round's
  input and the previous answer as the planner keeps it in the history (visible output,
  or a tool-call allowance), less the planner's per-message allowance;
- ``context.cache_loss_tokens``: the provider cache's misses, the previous round's input
  less the reused prefix (negative when the cache reached into the answer): generated
  sessions re-send that tail and the answer as new bytes (``workload.plan.cache_loss``),
  so their prefix is the recorded one, not what an ideal cache would hold;
- ``output.tokens``: visible output (output less reasoning), ``reasoning.tokens``: the
  recorded reasoning (when the source reports it);
- ``tool_call_probability``, the tools' weights and ``parallel_tools`` (calls per tool
  round); ``subagents``: the chance a round spawns subagents, how many, their class (the
  class one level deeper of the model its children ran, or a weighted choice of them by
  how many children each ran; a subagent class spawns its own when the trace's subagents
  did, down to ``MAX_SUBAGENT_DEPTH``), and the ordinary calls a spawning round made
  beside its children (``tool_calls_probability``: the share of spawning rounds that did,
  ``tool_calls``: how many);
- ``think_time_s``: the idle time before a user round.

Sizes are empirical: observed values with their counts when there are few distinct ones,
else quantile bins. ``agent_stats`` summarises a trace and ``profile_stats`` the sessions a
profile generates (planned, no server: sizes as the planner sends them), with the same
keys, so ``compare_stats`` can put them side by side.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from workload.errors import TraceError
from workload.measure.records import RequestRecord
from workload.plan.loading import validate_profile
from workload.plan.sessions import CALL_TOKENS, Session, SessionPlanner
from workload.plan.shapes import MAX_SUBAGENT_DEPTH
from workload.plan.steps import MSG_OVERHEAD
from workload.plan.tokens import get_tokenizer
from workload.plan.traces._agent import AgentRound, AgentTrace

DISTINCT_VALUES = 64  # up to this many distinct values: an empirical of the values themselves
QUANTILE_BINS = 40
STAT_SESSIONS = 400  # top-level sessions generated to measure a fitted profile
TOLERANCE = 0.10  # the fit is met when a statistic is within 10 % of the trace's

# (key, label) of the statistics compared, in print order; per-tool waits follow.
STATS = (
    ("rounds_per_session", "rounds per session"),
    ("input_tokens", "input per round (tokens)"),
    ("prefix_tokens", "prefix per round (tokens)"),
    ("appended_tokens", "appended per round (tokens)"),
    ("output_tokens", "output per round (tokens)"),
    ("reasoning_tokens", "reasoning per round (tokens)"),
    ("tool_calls_per_round", "tool calls per round"),
    ("tool_calls_per_tool_round", "tool calls per tool round"),
    ("parallel_tool_rounds", "tool rounds with parallel calls"),
    ("subagents_per_session", "subagents per session"),
    ("rounds_per_subagent", "rounds per subagent"),
)


def _empirical(values: Sequence[float]) -> Any:
    """A distribution of observed values: a constant, the values with counts, or bins."""
    x = [float(v) for v in values]
    if not x:
        return 0
    distinct = Counter(x)
    if len(distinct) == 1:
        return x[0]
    if len(distinct) <= DISTINCT_VALUES:
        keys = sorted(distinct)
        return {"dist": "empirical", "values": keys, "weights": [distinct[k] for k in keys]}
    arr = np.asarray(x)
    edges = np.unique(np.quantile(arr, np.linspace(0, 1, QUANTILE_BINS + 1)))
    counts, _ = np.histogram(arr, bins=edges)
    return {
        "dist": "empirical",
        "bins": [float(e) for e in edges],
        "counts": [int(c) for c in counts],
    }


def _mean(values: Iterable[float]) -> float | None:
    v = list(values)
    return sum(v) / len(v) if v else None


def _calls(r: AgentRound) -> list[str]:
    """The round's ordinary tool calls (a call that ran a subagent is a spawn)."""
    return [t.name for t in r.tools if t.subagent is None]


def _spawns(r: AgentRound) -> int:
    return sum(1 for t in r.tools if t.subagent is not None)


def _visible(r: AgentRound) -> int:
    return max(1, r.output_tokens - (r.reasoning_tokens or 0))


def _new_tokens(r: AgentRound, prev: AgentRound | None, messages: int) -> float:
    """Tokens per message ``r`` appended that were new content: its appended tokens on a
    first round, else its growth over ``prev``'s input less ``prev``'s answer as the
    planner keeps it (visible output, or one tool-call allowance per call); both less the
    planner's per-message allowance."""
    if prev is None:
        new = float(r.appended_tokens)
    else:
        calls = len(prev.tools)
        answer = CALL_TOKENS * calls if calls else _visible(prev)
        new = float(r.input_tokens - prev.input_tokens - answer - MSG_OVERHEAD)
    return max(1.0, new / messages - MSG_OVERHEAD)


# ---------------------------------------------------------------------------- statistics
def _round_stats(
    rounds: list[dict[str, Any]], roots: int, subs: list[tuple[int, int, str]]
) -> dict[str, Any]:
    """Means over rounds; ``subs``: (depth, rounds, class) of each subagent session."""
    tool_rounds = [r for r in rounds if r["calls"]]
    waits: dict[str, list[float]] = {}
    for r in rounds:
        for name, w in r["waits"]:
            waits.setdefault(name, []).append(w)
    known = [r["reasoning"] for r in rounds if r["reasoning"] is not None]
    return {
        "rounds_per_session": _mean(r["rounds"] for r in rounds if r["first"] and r["root"]),
        "input_tokens": _mean(r["prefix"] + r["appended"] for r in rounds),
        "prefix_tokens": _mean(r["prefix"] for r in rounds),
        "appended_tokens": _mean(r["appended"] for r in rounds),
        "output_tokens": _mean(r["output"] for r in rounds),
        "reasoning_tokens": _mean(known),
        "tool_calls_per_round": _mean(len(r["calls"]) for r in rounds),
        "tool_calls_per_tool_round": _mean(len(r["calls"]) for r in tool_rounds),
        "parallel_tool_rounds": _mean(float(len(r["calls"]) > 1) for r in tool_rounds),
        "subagents_per_session": len(subs) / roots if roots else None,
        "rounds_per_subagent": _mean(n for _, n, _ in subs),
        "tool_wait_s": {k: _mean(v) for k, v in sorted(waits.items())},
        "by_depth": {
            d: {
                "subagents": sum(1 for e, _, _ in subs if e == d) / roots if roots else None,
                "rounds": _mean(n for e, n, _ in subs if e == d),
            }
            for d in sorted({e for e, _, _ in subs})
        },
        "by_class": {  # subagents of each class: (depth, how many)
            c: (d, n) for (d, c), n in sorted(Counter((d, c) for d, _, c in subs).items())
        },
    }


def depths(trace: AgentTrace) -> dict[str, int]:
    """Each session's subagent depth: 0 top-level, 1 a subagent, 2 a subagent's, ... (a
    session whose parent is not in the trace counts as a subagent of a top-level one)."""
    out: dict[str, int] = {}
    for name in trace.sessions:
        chain: list[str] = []
        s: str | None = name
        while s in trace.sessions and s not in out and s not in chain:
            chain.append(s)
            s = trace.sessions[s][0].parent
        base = out[s] + 1 if s in out else 0 if s is None else 1  # a parent absent or a loop
        for k, c in enumerate(reversed(chain)):
            out[c] = base + k
    return out


def agent_stats(trace: AgentTrace) -> dict[str, Any]:
    """The session statistics of a trace (means; see STATS)."""
    rows: list[dict[str, Any]] = []
    for rs in trace.sessions.values():
        root = rs[0].parent is None
        for k, r in enumerate(rs):
            prev = rs[k - 1] if k else None
            rows.append({
                "first": k == 0, "root": root, "rounds": len(rs),
                "prefix": r.prefix_tokens, "appended": r.appended_tokens,
                "output": r.output_tokens, "reasoning": r.reasoning_tokens,
                "calls": _calls(r),
                "waits": [(t.name, t.wait_s) for t in prev.tools if t.subagent is None]
                if prev else [],
            })  # fmt: skip
    depth = depths(trace)
    names = session_classes(trace)
    subs = [
        (depth[s], len(rs), names.get(s, "")) for s, rs in trace.sessions.items() if rs[0].parent
    ]
    return _round_stats(rows, len(trace.roots), subs)


def _play(
    session: Session, rows: list[dict[str, Any]], subs: list[tuple[int, int, str]], depth: int
) -> None:
    """Plan a session to its end as the player would (scripted replies), collecting rounds."""
    mine: list[dict[str, Any]] = []
    spawn = session._c.spawn_tool
    root = depth == 0
    while (st := session.next_step()) is not None:
        for child in session.children_due()[0]:
            _play(child.session, rows, subs, depth + 1)
        calls = [c for c in (st.planned_calls or (st.planned_tool,)) if c and c != spawn]
        mine.append({
            "first": not mine, "root": root, "prefix": st.cacheable_tokens_est,
            "appended": st.prompt_tokens_est - st.cacheable_tokens_est,
            "output": st.max_tokens,
            "reasoning": st.reasoning_tokens if session._c.reasoning else None,
            "calls": calls, "waits": list(st.tool_waits),
        })  # fmt: skip
        session.observe(RequestRecord(step=st.step))
    for r in mine:
        r["rounds"] = len(mine)
    rows.extend(mine)
    if not root:
        subs.append((depth, len(mine), session.class_name))


def profile_stats(raw: dict[str, Any], sessions: int = STAT_SESSIONS) -> dict[str, Any]:
    """The statistics of ``sessions`` top-level sessions a profile generates (planned)."""
    prof = validate_profile(raw, "fitted profile")
    planner = SessionPlanner(
        prof, get_tokenizer("tiktoken:cl100k_base"), model="fit", max_model_len=None
    )
    weighted = {n: c.weight or 0.0 for n, c in prof.classes.items() if c.fixed_count is None}
    total = sum(weighted.values()) or 1.0
    rows: list[dict[str, Any]] = []
    subs: list[tuple[int, int, str]] = []
    roots = 0
    for name, w in weighted.items():
        n = max(1, round(sessions * w / total))
        for i in range(n):
            _play(planner.new_session(name, i, 0), rows, subs, 0)
        roots += n
    return _round_stats(rows, roots, subs)


def _shares(by_class: dict[str, tuple[int, int]], depth: int) -> dict[str, float]:
    """Each class's share of the subagents at ``depth``."""
    n = {c: k for c, (d, k) in by_class.items() if d == depth}
    total = sum(n.values())
    return {c: k / total for c, k in n.items()} if total else {}


def compare_stats(trace: dict[str, Any], fitted: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows (statistic, trace, fitted, difference, met) for the statistics either side has."""
    rows = []
    pairs = [(label, trace.get(k), fitted.get(k)) for k, label in STATS]
    for tool, v in trace["tool_wait_s"].items():
        pairs.append((f"tool wait {tool} (s)", v, fitted["tool_wait_s"].get(tool)))
    if len(trace["by_depth"]) > 1 or len(fitted["by_depth"]) > 1:  # nested: each depth apart
        for d in sorted(set(trace["by_depth"]) | set(fitted["by_depth"])):
            a, b = trace["by_depth"].get(d, {}), fitted["by_depth"].get(d, {})
            for key, label in (
                ("subagents", "subagents per session"),
                ("rounds", "rounds per subagent"),
            ):
                none = 0.0 if key == "subagents" else None  # no subagent at that depth
                pairs.append((f"{label}, depth {d}", a.get(key, none), b.get(key, none)))
    for d in sorted(set(trace["by_depth"]) | set(fitted["by_depth"])):  # weighted choices
        a, b = (_shares(x["by_class"], d) for x in (trace, fitted))
        if len(set(a) | set(b)) > 1:
            for c in sorted(set(a) | set(b)):
                pairs.append((f"share of depth-{d} subagents, {c}", a.get(c, 0.0), b.get(c, 0.0)))
    for label, a, b in pairs:
        if a is None and b is None:
            continue
        diff = None
        if a is not None and b is not None:
            diff = 0.0 if a == b else (b - a) / abs(a) if a else math.inf
        met = diff is not None and abs(diff) <= TOLERANCE
        rows.append({"statistic": label, "trace": a, "fitted": b, "diff": diff, "met": met})
    return rows


# ---------------------------------------------------------------------------- the fit
def _class_name(model: str | None, depth: int, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", model or "agent").strip("-") or "agent"
    base += "" if depth == 0 else "-subagent" if depth == 1 else f"-subagent-depth{depth}"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def _groups(trace: AgentTrace, depth: dict[str, int]) -> dict[tuple[int, str], list[str]]:
    """Sessions by (subagent depth, model), down to MAX_SUBAGENT_DEPTH (deeper: not fitted)."""
    out: dict[tuple[int, str], list[str]] = {}
    for name, rs in trace.sessions.items():
        if depth[name] <= MAX_SUBAGENT_DEPTH:
            out.setdefault((depth[name], str(rs[0].model or "")), []).append(name)
    return dict(sorted(out.items()))


def too_deep(trace: AgentTrace) -> int:
    """Subagent sessions nested past MAX_SUBAGENT_DEPTH, which a fit leaves out."""
    return sum(1 for d in depths(trace).values() if d > MAX_SUBAGENT_DEPTH)


def _fit_class(
    trace: AgentTrace, names: list[str], child: str | dict[str, float] | None
) -> tuple[dict, dict]:
    """(class dict, per-tool observations {name: {"wait": [...], "result": [...]}});
    ``child``: the class its subagents play, or a weighted choice of classes.

    Long because each round feeds several distributions at once (turns, waits, shapes)."""
    sessions = [trace.sessions[n] for n in names]
    tools: dict[str, dict[str, list[float]]] = {}
    first, user, outputs, reasoning, think, par, loss = [], [], [], [], [], [], []
    tool_steps = plain_steps = spawn_steps = 0
    fanout: list[float] = []
    beside: list[float] = []  # ordinary calls of each spawning round that made some
    weights: Counter[str] = Counter()
    for rs in sessions:
        for k, r in enumerate(rs):
            prev = rs[k - 1] if k else None
            prev_calls = _calls(prev) if prev else []
            if prev is not None:
                loss.append(prev.input_tokens - r.prefix_tokens)
            if prev is not None and (prev_calls or _spawns(prev)):
                per = _new_tokens(r, prev, len(prev_calls) + _spawns(prev))
                for t in prev.tools:
                    key = t.name
                    tools.setdefault(key, {"wait": [], "result": [], "spawn": []})
                    tools[key]["result"].append(per)
                    if t.subagent is None:
                        tools[key]["wait"].append(t.wait_s)
                    else:
                        tools[key]["spawn"].append(1.0)
            elif k:
                user.append(_new_tokens(r, prev, 1))
                think.append(r.think_s)
            else:
                first.append(_new_tokens(r, prev, 1))
            outputs.append(_visible(r))
            if r.reasoning_tokens is not None:
                reasoning.append(r.reasoning_tokens)
            if k == len(rs) - 1:
                continue
            calls = _calls(r)
            if _spawns(r):
                spawn_steps += 1
                fanout.append(_spawns(r))
                if calls:  # a Task beside a Bash: ordinary calls run beside the children
                    beside.append(len(calls))
                    weights.update(calls)
                continue
            plain_steps += 1
            if calls:
                tool_steps += 1
                par.append(len(calls))
                weights.update(calls)
    prefix0 = _mean(rs[0].prefix_tokens for rs in sessions) or 0.0
    cls: dict[str, Any] = {
        "description": f"fitted from {len(sessions)} session(s)",
        "steps": _empirical([len(rs) for rs in sessions]),
        "system_prompt": {"tokens": int(round(prefix0)), "share": "class"},
        "first_user_turn": _empirical(first),
        "user_turn": _empirical(user or first),
        "output": {"tokens": _empirical(outputs), "ignore_eos": True},
        "think_time_s": _empirical(think or [0.0]),
    }
    if loss:
        cls["context"] = {"cache_loss_tokens": _empirical(loss)}
    if weights:
        cls["tools"] = {n: float(c) for n, c in sorted(weights.items())}
        cls["tool_call_probability"] = round(tool_steps / plain_steps, 6) if plain_steps else 0.0
        if any(p > 1 for p in par):
            cls["parallel_tools"] = _empirical(par)
    if reasoning:
        cls["reasoning"] = {"tokens": _empirical(reasoning)}
    if child is not None and spawn_steps:
        steps = plain_steps + spawn_steps
        spawn_tool = next(t.name for rs in sessions for r in rs for t in r.tools if t.subagent)
        cls["subagents"] = {
            **({"class_name": child} if isinstance(child, str) else {"classes": child}),
            "probability": round(spawn_steps / steps, 6),
            "count": _empirical(fanout),
            "tool": spawn_tool,
        }
        if beside:
            cls["subagents"]["tool_calls_probability"] = round(len(beside) / spawn_steps, 6)
            cls["subagents"]["tool_calls"] = _empirical(beside)
    return cls, tools


def _names(groups: dict[tuple[int, str], list[str]]) -> dict[tuple[int, str], str]:
    """The class name of each (depth, model) group."""
    names: dict[tuple[int, str], str] = {}
    for key in groups:
        names[key] = _class_name(key[1] or None, key[0], set(names.values()))
    return names


def session_classes(trace: AgentTrace) -> dict[str, str]:
    """The fitted class each session falls in (sessions nested too deep: none)."""
    groups = _groups(trace, depths(trace))
    names = _names(groups)
    return {s: names[key] for key, members in groups.items() for s in members}


def fit_agent_profile(trace: AgentTrace, *, name: str = "agents", seed: int = 1) -> dict[str, Any]:
    """A profile dict (validated) whose sessions follow the trace's (see the module docstring)."""
    if not trace.roots:
        raise TraceError("an agent-session trace needs at least one top-level session to fit")
    depth = depths(trace)
    groups = _groups(trace, depth)
    names = _names(groups)
    kids: dict[str, list[str]] = {}
    for sname, rs in trace.sessions.items():
        if rs[0].parent is not None:
            kids.setdefault(rs[0].parent, []).append(sname)
    classes: dict[str, Any] = {}
    seen: dict[str, dict[str, list[float]]] = {}
    for (d, model), members in groups.items():
        # the classes one level deeper that these sessions' children ran, by how many
        ran = Counter(
            names[key]
            for m in members
            for c in kids.get(m, ())
            if (key := (d + 1, str(trace.sessions[c][0].model or ""))) in names
        )
        child: str | dict[str, float] | None = None
        if len(ran) == 1:
            child = next(iter(ran))
        elif ran:
            child = {k: float(n) for k, n in sorted(ran.items())}
        cls, obs = _fit_class(trace, members, child)
        if d:
            cls["description"] += f" run as subagents at depth {d}"
        cls["weight" if d == 0 else "fixed_count"] = len(members) if d == 0 else 0
        classes[names[(d, model)]] = cls
        for t, o in obs.items():
            acc = seen.setdefault(t, {"wait": [], "result": [], "spawn": []})
            for k2 in acc:
                acc[k2] += o[k2]
    catalog = {
        t: {
            "parameters": {"type": "object", "properties": {}},
            "latency_s": _empirical(o["wait"] or [0.0]),
            "result_tokens": _empirical(o["result"] or [1]),
        }
        for t, o in sorted(seen.items())
    }
    s = trace
    raw: dict[str, Any] = {
        "schema_version": 1,
        "name": name,
        "description": (
            f"Fitted from agent-session trace {s.source}: {len(s.roots)} session(s), "
            f"{len(s.sessions) - len(s.roots)} subagent(s), {s.rounds} rounds"
        ),
        "seed": seed,
        "run": {"users": max(1, len(s.roots))},
        "tools": catalog,
        "classes": classes,
    }
    return _settle_prefix(raw, trace, list(names.values()))


def _settle_prefix(raw: dict[str, Any], trace: AgentTrace, classes: list[str]) -> dict[str, Any]:
    """Take the planner's tool-schema and message allowance off each system prompt, so round
    0's prefix is the recorded one; validates the profile."""
    prof = validate_profile(raw, f"fit of {trace.source}")
    planner = SessionPlanner(
        prof, get_tokenizer("tiktoken:cl100k_base"), model="fit", max_model_len=None
    )
    for cname in classes:
        want = raw["classes"][cname]["system_prompt"]["tokens"]
        extra = planner.classes[cname].prefix_tokens - want
        raw["classes"][cname]["system_prompt"]["tokens"] = max(0, want - extra)
    validate_profile(raw, f"fit of {trace.source}")
    return raw
