"""Provider cache misses: re-sending the tail of a session's history as new bytes.

A provider's prefix cache rarely serves everything a session sent before: Anthropic's is
written up to the previous prompt (the answer comes back uncached), others drop a tail
or more when the agent rewrites its context. A class with ``context.cache_loss_tokens``
reproduces that: on each step after the first, the history from that many tokens before
the end of the previous prompt on gets new bytes (the same sizes), so a prefix cache
serves the previous prompt less those tokens and nothing of the answer after it (a
negative value: the cache also serves that much of the answer). ``trace fit`` fits the
value from an agent trace's rounds (the previous round's input less the next round's
reused prefix).

Prefix caches are positional: changing the bytes at one position makes every token
after it a miss, so only the message holding that position is rewritten. Keyed text is
cut there (its first part keeps its bytes: the synthesizer's text for a key is
prefix-stable); a message whose content cannot be cut (a tool call, a server's real
answer) is kept whole and the change starts at the next message.

A miss larger than the history reaches into the system prompt, as a provider's does
when it evicted part of the agent's instructions (Codex CLI served 3.5k of a 6.9k-token
prefix once): the session's system prompt is cut there and keeps its new bytes from then
on (a class-shared prompt becomes the session's own past that point; the history's
bytes are unchanged, the change before them makes them misses). A miss that starts
inside the tool schemas (which the class shares, after the system prompt) starts at the
history instead.
"""

from __future__ import annotations

from collections.abc import Callable

from workload.plan.class_plan import ClassPlan
from workload.plan.prompts import shared_key
from workload.plan.steps import MSG_OVERHEAD, Msg


def _cut(m: Msg, keep: int, key: int) -> Msg:
    """A copy of keyed message ``m`` whose text after ``keep`` tokens is ``key``'s."""
    parts: list[tuple[int, int]] = []
    left = keep
    for k, n in m.parts or ((m.key, m.n),):
        if left <= 0:
            break
        parts.append((k, min(n, left)))
        left -= n
    parts.append((key, m.n - keep))
    out = Msg(m.role, key=m.key, n=m.n, tool_call_id=m.tool_call_id, tokens=m.tokens - MSG_OVERHEAD)
    out.parts = tuple(parts)
    return out


def lose_tail(history: list[Msg], at: int, key: Callable[..., int], step: int) -> int:
    """Give ``history``'s bytes from ``at`` tokens in (allowances included) on new content,
    keyed ``key("miss", step, i)``; returns where the change starts (past ``at`` when it
    falls in a message that cannot be cut; the history's size when nothing is left to
    change). Replaces messages, never edits one in place (earlier steps' bodies hold them)."""
    pos = 0
    for i, m in enumerate(history):
        end = pos + m.tokens
        keyed = m.text is None and m.n > 0 and not m.tool_calls
        if end <= at or not keyed:
            pos = end
            continue
        keep = min(max(0, at - pos - MSG_OVERHEAD), m.n - 1)
        history[i] = _cut(m, keep, key("miss", step, i))
        return pos + MSG_OVERHEAD + keep
    return pos


def lose_prefix(
    system: Msg, history: list[Msg], at: int, key: Callable[..., int], step: int, cp: ClassPlan
) -> tuple[Msg, int]:
    """A miss from ``at`` tokens into the history (negative: before it, in the prefix):
    (the system message from now on, the tokens a prefix cache serves of this step's
    prompt). Past the system prompt's text, ``lose_tail``; else the system prompt is cut."""
    start = cp.prefix_tokens + at  # in the whole prompt: system message, tool schemas, history
    if cp.system_tokens <= 0 or start >= cp.system_tokens + MSG_OVERHEAD:
        return system, cp.prefix_tokens + lose_tail(history, at, key, step)
    if system.text is not None:  # the class's shared text: the same bytes as keyed text
        system = Msg("system", key=shared_key(cp.system_name), n=cp.system_tokens)
    keep = min(max(0, start - MSG_OVERHEAD), cp.system_tokens - 1)
    return _cut(system, keep, key("miss", step, "system")), MSG_OVERHEAD + keep
