"""Sessions from traffic: which earlier request each request continues, and the rounds that makes.

A session is named by the ``--session-header`` value, else by the request's ``user`` field,
else inferred from the conversation: a chat request whose messages begin with an earlier
request's messages followed by that request's answer continues that request's session
(messages are hashed in a chain, so the test is one dictionary look-up per message). An
agent that edits the answer before sending it back still continues the session when the
message after the earlier request's messages is an assistant message (``answer_matched``
false); when that message carries tool calls the answer did not (an agent that parses its
model's text into calls), those are the round's tools (``record.tools_from: agent``). A completions request continues the session whose prompt and answer its prompt
begins with; a Responses API request the session of its ``previous_response_id``.

Tools: the tool calls of an answer are waited for until the session's next request, whose
``tool`` messages name the ``tool_call_id``s that came back; each tool's latency is that
request's arrival minus the end of the answer that asked for it (the proxy sees when the
results come back, not when each tool ran, so a parallel pair both get the later time).

Subagents (``subagents=True``): a new conversation that starts, from the same client (peer
address and User-Agent), while another session waits on a tool call is recorded as a
candidate child of that session (``record.parent_inferred``): its spawn round is the
waiting round, its join round the parent's next one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from workload.plan.traces import AgentRound
from workload.plan.traces._agent import RawRound, RawTool, build_session
from workload.record.blocks import PromptBlocks
from workload.record.extract import Canon, Facts
from workload.record.proxy import Exchange

SOURCE = "record"
CountPrompt = Callable[[Facts, int], int]  # (facts, local token count) -> prompt tokens


@dataclass(slots=True)
class Round:
    """One answered request of a session."""

    ex: Exchange
    facts: Facts
    input_tokens: int
    output_tokens: int
    prefix_tokens: int
    hash_ids: list[int]
    tokens_from: str  # usage | tokenizer
    appended_user: int = 0
    appended_tool_results: int = 0
    answer_matched: bool = True
    tools_from: str = "answer"  # answer | agent (the tool calls the agent sent back)
    returned: dict[str, float] = field(default_factory=dict)  # tool_call_id -> result time
    next_arrival: float | None = None  # the session's next request arrived

    @property
    def t_end(self) -> float:
        return self.ex.t_end if self.ex.t_end is not None else self.ex.t_arrival

    @property
    def final(self) -> bool:
        """Nothing later changes this round's row (its tools came back, or it had none)."""
        return not self.facts.tool_calls or self.next_arrival is not None


@dataclass(slots=True)
class Session:
    name: str
    client: str
    named: str  # header | user | previous_response | inferred
    rounds: list[Round] = field(default_factory=list)
    parent: str | None = None
    spawn_round: int | None = None
    parent_inferred: bool = False
    written: int = 0  # rows already appended to trace.jsonl


def _chain(messages: list[Canon]) -> list[bytes]:
    """h[i] covers messages[:i] (h[0] the empty conversation)."""
    out = [b""]
    for m in messages:
        out.append(hashlib.blake2b(out[-1] + m.key, digest_size=16).digest())
    return out


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class SessionBook:
    """Every session seen, built up one finished exchange at a time (in completion order)."""

    def __init__(
        self, blocks: PromptBlocks, count_prompt: CountPrompt, count_text: Callable[[str], int],
        *, subagents: bool = True,
    ) -> None:  # fmt: skip
        self.blocks = blocks
        self.count_prompt = count_prompt
        self.count_text = count_text
        self.subagents = subagents
        self.sessions: dict[str, Session] = {}
        self._after_answer: dict[bytes, tuple[str, int]] = {}  # chain after prompt+answer
        # chain after the prompt alone -> every (session, round) that sent it, oldest first
        self._after_prompt: dict[bytes, list[tuple[str, int]]] = {}
        self._text_states: dict[str, tuple[int, bytes]] = {}  # completions: session -> (len, hash)
        self._by_response: dict[str, str] = {}
        self._seen_prompts: set[bytes] = set()  # chains of every prompt's leading messages
        self._n = 0

    # ----------------------------------------------------------------- which session
    def _new(self, client: str, named: str, name: str | None = None) -> Session:
        self._n += 1
        s = Session(name or f"rec-{self._n:04d}", client, named)
        self.sessions[s.name] = s
        return s

    def _continues_chat(self, f: Facts) -> tuple[Session | None, int, bool]:
        """(session, messages it already had, answer matched) for a chat request."""
        chain = _chain(f.messages)
        for i in range(len(f.messages), 0, -1):
            hit = self._after_answer.get(chain[i])
            if hit is not None:
                return self.sessions[hit[0]], i, True
        for i in range(len(f.messages) - 1, 0, -1):
            hits = self._after_prompt.get(chain[i])
            if hits and f.messages[i].role == "assistant":
                return self._edited_from(hits, f.messages[i]), i + 1, False
        return None, 0, True

    def _edited_from(self, hits: list[tuple[str, int]], edited: Canon) -> Session:
        """Of the requests that sent this prompt, the one whose answer the edited message kept
        the text of (else the latest): the same opening can start many sessions."""
        for name, k in reversed(hits):
            answer = self.sessions[name].rounds[k].facts.answer
            if answer is not None and answer.text == edited.text:
                return self.sessions[name]
        return self.sessions[hits[-1][0]]

    def _continues_text(self, prompt: str) -> Session | None:
        best: tuple[int, str] | None = None
        for name, (n, h) in self._text_states.items():
            if n <= len(prompt) and (best is None or n > best[0]) and _text_key(prompt[:n]) == h:
                best = (n, name)
        return self.sessions[best[1]] if best else None

    def _session_of(self, ex: Exchange, f: Facts) -> tuple[Session, int, bool]:
        """The session a request belongs to, the messages it shares with it, answer matched."""
        cont, shared, matched = (None, 0, True)
        if f.kind == "chat":
            cont, shared, matched = self._continues_chat(f)
        elif f.kind == "completions" and f.prompt_text is not None:
            cont = self._continues_text(f.prompt_text)
        elif f.previous_response_id and f.previous_response_id in self._by_response:
            cont = self.sessions[self._by_response[f.previous_response_id]]
        named = ("header", ex.session_hint) if ex.session_hint else None
        if named is None and f.user:
            named = ("user", "user:" + f.user)
        if named is not None:
            s = self.sessions.get(named[1]) or self._new(ex.client, named[0], named[1])
            if cont is not s:
                shared, matched = 0, True
            return s, shared, matched
        if cont is not None:
            return cont, shared, matched
        s = self._new(ex.client, "previous_response" if f.previous_response_id else "inferred")
        if self.subagents:
            self._adopt(s, ex)
        return s, 0, True

    def _adopt(self, child: Session, ex: Exchange) -> None:
        """A new conversation while a session of the same client waits on a tool: its child."""
        best: tuple[float, Session, int] | None = None
        for s in self.sessions.values():
            if s is child or s.client != ex.client or not s.rounds:
                continue
            for k in range(len(s.rounds) - 1, -1, -1):
                r = s.rounds[k]
                if r.t_end > ex.t_arrival:
                    continue
                waiting = r.facts.tool_calls and (
                    r.next_arrival is None or r.next_arrival > ex.t_arrival
                )
                if waiting and (best is None or r.t_end > best[0]):
                    best = (r.t_end, s, k)
                break
        if best is not None:
            child.parent, child.spawn_round, child.parent_inferred = best[1].name, best[2], True

    # ----------------------------------------------------------------- adding exchanges
    def add(self, ex: Exchange, f: Facts) -> Session | None:
        """Account one finished exchange; the session it went to (None: not a round)."""
        if f.kind == "other" or (not f.ok and f.kind == "chat" and not f.messages):
            return None
        s, shared, matched = self._session_of(ex, f)
        appended = f.messages[shared:] if f.kind == "chat" else []
        if s.rounds:
            prev = s.rounds[-1]
            if prev.next_arrival is None:
                prev.next_arrival = ex.t_arrival
            edited = f.messages[shared - 1] if not matched and shared else None
            if edited is not None and edited.tool_calls and not prev.facts.tool_calls:
                # the agent called tools its model did not (a ReAct-style agent that parses
                # the text): the calls it sent back are the ones it waited for
                prev.facts.tool_calls = [(i, n) for i, n, _ in edited.tool_calls]
                prev.tools_from = "agent"
            for m in appended:
                if m.role == "tool" and m.tool_call_id and m.tool_call_id not in prev.returned:
                    prev.returned[m.tool_call_id] = ex.t_arrival
        if not f.ok or ex.outcome != "ok" or ex.too_large:
            if not s.rounds and s.named == "inferred":  # its only request failed: no session
                self.sessions.pop(s.name, None)
                return None
            return s
        s.rounds.append(self._round(ex, f, appended, matched))
        k = len(s.rounds) - 1
        if f.kind == "chat" and f.answer is not None:
            chain = _chain([*f.messages, f.answer])
            self._after_prompt.setdefault(chain[-2], []).append((s.name, k))
            self._after_answer[chain[-1]] = (s.name, k)
        elif f.kind == "completions" and f.prompt_text is not None and f.answer is not None:
            text = f.prompt_text + f.answer.text
            self._text_states[s.name] = (len(text), _text_key(text))
        if f.response_id:
            self._by_response[f.response_id] = s.name
        return s

    @staticmethod
    def _prompt_messages(f: Facts) -> list[Canon]:
        """What a chat prompt is made of, in order: the leading system messages, the tools
        offered (where most open models' chat templates put them), then the rest."""
        if f.tools is None:
            return f.messages
        k = 0
        while k < len(f.messages) and f.messages[k].role in ("system", "developer"):
            k += 1
        return [*f.messages[:k], f.tools, *f.messages[k:]]

    def _units(self, f: Facts) -> list[tuple[bytes, str]]:
        if f.kind == "chat":
            return [(m.key, m.render()) for m in self._prompt_messages(f)]
        text = f.prompt_text or ""
        return [(_text_key(text), text)]

    def _round(self, ex: Exchange, f: Facts, appended: list[Canon], matched: bool) -> Round:
        lengths: list[int] = []
        toks = self.blocks.tokens(self._units(f), lengths)
        hashes = self.blocks.chain(toks)
        local = len(toks)
        reused = self.blocks.reused(hashes, local)
        if f.kind == "chat":  # whole messages an earlier prompt began with: exact, any size
            units = self._prompt_messages(f)
            chain = _chain(units)
            i = len(units)
            while i and chain[i] not in self._seen_prompts:
                i -= 1
            reused = max(reused, sum(lengths[:i]))
            self._seen_prompts.update(chain[1:])
        ids = self.blocks.ids(hashes)
        from_usage = f.prompt_tokens is not None and f.completion_tokens is not None
        inp = f.prompt_tokens if f.prompt_tokens is not None else self.count_prompt(f, local)
        if f.completion_tokens is not None:
            out = f.completion_tokens
        else:
            out = self.count_text(f.answer.body()) if f.answer is not None else 0
        inp = max(1, inp)
        prefix = min(inp, round(reused * inp / local)) if local else 0
        return Round(
            ex=ex, facts=f, input_tokens=inp, output_tokens=out, prefix_tokens=prefix,
            hash_ids=ids, tokens_from="usage" if from_usage else "tokenizer",
            appended_user=sum(1 for m in appended if m.role == "user"),
            appended_tool_results=sum(1 for m in appended if m.role == "tool"),
            answer_matched=matched,
        )  # fmt: skip

    # ----------------------------------------------------------------- rows
    def rows(self, s: Session) -> list[dict[str, Any]]:
        """The session's agent-session rows (v1), each with the recorder's ``record`` extras."""
        raws = [
            RawRound(
                t_start=r.ex.t_arrival, t_end=r.t_end, input_tokens=r.input_tokens,
                prefix_tokens=r.prefix_tokens, output_tokens=r.output_tokens,
                reasoning_tokens=r.facts.reasoning_tokens,
                tools=[RawTool(name or "tool", r.t_end, r.returned.get(cid), call_id=cid)
                       for cid, name in r.facts.tool_calls],
                appended_user=r.appended_user, appended_tool_results=r.appended_tool_results,
                model=r.facts.model,
            )
            for r in s.rounds
        ]  # fmt: skip
        built = build_session(s.name, raws, source=SOURCE)
        join = None
        if s.parent is not None and s.spawn_round is not None:
            parent = self.sessions.get(s.parent)
            if parent is not None and len(parent.rounds) > s.spawn_round + 1:
                join = s.spawn_round + 1
        out = []
        for r, a in zip(s.rounds, built, strict=True):
            a = replace(
                a, parent=s.parent, spawn_round=s.spawn_round, join_round=join,
                hash_ids=tuple(r.hash_ids),
            )  # fmt: skip
            out.append(_row(a, r, s))
        return out

    def final_rows(self) -> Iterator[dict[str, Any]]:
        """Every row of every session (sessions in start order)."""
        for s in sorted(
            self.sessions.values(), key=lambda s: s.rounds[0].ex.t_arrival if s.rounds else 0
        ):
            if s.rounds:
                yield from self.rows(s)

    def ready_rows(self, s: Session) -> list[dict[str, Any]]:
        """Rows of ``s`` not yet appended whose values are final (in round order)."""
        k = s.written
        while k < len(s.rounds) and s.rounds[k].final:
            k += 1
        if k == s.written:
            return []
        rows = self.rows(s)[s.written : k]
        s.written = k
        return rows


def _row(a: AgentRound, r: Round, s: Session) -> dict[str, Any]:
    row = a.to_json()
    ex = r.ex
    row["record"] = {
        "exchange": ex.n,
        "path": ex.path,
        "status": ex.status,
        "streamed": ex.streamed,
        "ttft_s": None if ex.t_first is None else round(ex.t_first - ex.t_arrival, 6),
        "tokens_from": r.tokens_from,
        "cached_tokens": r.facts.cached_tokens,
        "tool_call_ids_returned": sorted(r.returned),
        "session_from": s.named,
        "answer_matched": r.answer_matched,
        "tools_from": r.tools_from,
        "parent_inferred": s.parent_inferred,
    }
    return row
