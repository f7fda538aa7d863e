"""Sessions from traffic: which request continues which, tool waits, subagent candidates."""

from __future__ import annotations

import orjson
import pytest

from workload.record.blocks import PromptBlocks
from workload.record.extract import read_exchange
from workload.record.proxy import Exchange
from workload.record.sessions import SessionBook

SYSTEM = {"role": "system", "content": " ".join(f"rule{i}" for i in range(200))}


def _encode(text: str) -> list[int]:
    return [hash(w) & 0xFFFF for w in text.split()]


def _book(**kw: object) -> SessionBook:
    return SessionBook(
        PromptBlocks(_encode, block=16), lambda _f, n: n, lambda t: len(t.split()), **kw
    )  # type: ignore[arg-type]


class Traffic:
    """Builds exchanges as an agent would send them; ``t`` is the clock (s)."""

    def __init__(self, book: SessionBook) -> None:
        self.book, self.n, self.t = book, 0, 1000.0

    def chat(self, messages, *, answer="ok", calls=(), client="c1", hint=None, user=None, dur=0.5):
        self.n += 1
        req = {"model": "m", "messages": messages}
        if user:
            req["user"] = user
        msg = {"role": "assistant", "content": answer if not calls else None}
        if calls:
            msg["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}
                for cid, name in calls
            ]
        resp = {"id": f"r{self.n}", "choices": [{"message": msg}],
                "usage": {"prompt_tokens": 100 * self.n, "completion_tokens": 7}}  # fmt: skip
        ex = Exchange(self.n, client, "POST", "/v1/chat/completions", self.t, session_hint=hint)
        ex.status, ex.t_end = 200, self.t + dur
        ex.request_body += orjson.dumps(req)
        ex.response_body += orjson.dumps(resp)
        self.t += dur
        f = read_exchange(
            ex.path, ex.status, bytes(ex.request_body), bytes(ex.response_body), False
        )
        s = self.book.add(ex, f)
        assert s is not None
        return s, {k: v for k, v in msg.items() if v is not None}


def test_a_tool_loop_is_one_session_with_its_tool_waits() -> None:
    book = _book()
    tr = Traffic(book)
    msgs = [SYSTEM, {"role": "user", "content": "go"}]
    s, answer = tr.chat(msgs, calls=[("a", "read"), ("b", "grep")])
    tr.t += 0.3  # both tools ran: the next request carries their results
    msgs += [answer, {"role": "tool", "tool_call_id": "a", "content": "1"},
             {"role": "tool", "tool_call_id": "b", "content": "2"}]  # fmt: skip
    s2, answer = tr.chat(msgs, answer="done")
    assert s2 is s and len(book.sessions) == 1
    rows = book.rows(s)
    assert [t["wait_s"] for t in rows[0]["tools"]] == [pytest.approx(0.3), pytest.approx(0.3)]
    assert {t["parallel"] for t in rows[0]["tools"]} == {0}
    assert rows[1]["appended"] == {"user_messages": 0, "tool_results": 2}
    assert rows[1]["record"]["answer_matched"] is True
    assert rows[0]["record"]["tool_call_ids_returned"] == ["a", "b"]
    assert 0 < rows[1]["prefix_tokens"] < rows[1]["input_tokens"]


def test_two_conversations_sharing_a_system_prompt_are_two_sessions_with_reuse() -> None:
    book = _book(subagents=False)
    tr = Traffic(book)
    a, _ = tr.chat([SYSTEM, {"role": "user", "content": "one"}])
    b, _ = tr.chat([SYSTEM, {"role": "user", "content": "two"}])
    assert a is not b
    ra, rb = book.rows(a)[0], book.rows(b)[0]
    assert ra["prefix_tokens"] == 0 and rb["prefix_tokens"] > 0  # the system prompt's blocks
    assert ra["hash_ids"][:3] == rb["hash_ids"][:3]


def test_an_edited_answer_still_continues_its_session_but_says_so() -> None:
    book = _book()
    tr = Traffic(book)
    msgs = [SYSTEM, {"role": "user", "content": "go"}]
    s, _ = tr.chat(msgs, answer="long answer with reasoning")
    msgs += [{"role": "assistant", "content": "short"}, {"role": "user", "content": "more"}]
    s2, _ = tr.chat(msgs)
    assert s2 is s
    assert book.rows(s)[1]["record"]["answer_matched"] is False


def test_a_session_header_or_user_field_names_the_session() -> None:
    book = _book()
    tr = Traffic(book)
    a, _ = tr.chat([{"role": "user", "content": "x"}], hint="task-7")
    b, _ = tr.chat([{"role": "user", "content": "unrelated"}], hint="task-7")
    c, _ = tr.chat([{"role": "user", "content": "y"}], user="alice")
    assert a is b and a.name == "task-7" and c.name == "user:alice"
    assert [r["session"] for r in book.rows(a)] == ["task-7", "task-7"]


def test_a_new_conversation_while_a_session_waits_on_a_tool_is_a_candidate_child() -> None:
    book = _book()
    tr = Traffic(book)
    msgs = [SYSTEM, {"role": "user", "content": "plan"}]
    parent, answer = tr.chat(msgs, calls=[("t1", "Task")])
    child, _ = tr.chat([{"role": "user", "content": "subtask"}])  # same client, parent waits
    other, _ = tr.chat([{"role": "user", "content": "elsewhere"}], client="c2")
    msgs += [answer, {"role": "tool", "tool_call_id": "t1", "content": "child said"}]
    tr.chat(msgs)  # the parent's next round: the join
    assert child.parent == parent.name and child.parent_inferred
    assert other.parent is None
    row = book.rows(child)[0]
    assert (row["parent"], row["spawn_round"], row["join_round"]) == (parent.name, 0, 1)
    assert row["record"]["parent_inferred"] is True
    off = _book(subagents=False)
    tr = Traffic(off)
    tr.chat([SYSTEM, {"role": "user", "content": "plan"}], calls=[("t1", "Task")])
    kid, _ = tr.chat([{"role": "user", "content": "subtask"}])
    assert kid.parent is None


def test_completions_continue_by_prompt_and_answer() -> None:
    book = _book()

    def ex(n: int, prompt: str, text: str) -> Exchange:
        e = Exchange(n, "c", "POST", "/v1/completions", 100.0 + n)
        e.status, e.t_end = 200, 100.5 + n
        e.request_body += orjson.dumps({"model": "m", "prompt": prompt})
        e.response_body += orjson.dumps({"choices": [{"text": text}]})
        return e

    e1 = ex(1, "Q: a", " A: b")
    s1 = book.add(
        e1, read_exchange(e1.path, 200, bytes(e1.request_body), bytes(e1.response_body), False)
    )
    e2 = ex(2, "Q: a A: b\nQ: c", " A: d")
    s2 = book.add(
        e2, read_exchange(e2.path, 200, bytes(e2.request_body), bytes(e2.response_body), False)
    )
    assert s1 is s2 and len(s1.rounds) == 2  # type: ignore[union-attr]
    assert s1.rounds[1].tokens_from == "tokenizer"  # type: ignore[union-attr]


def test_a_streamed_answer_is_read_from_its_events() -> None:
    events = [
        {"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read", "arguments": '{"p":'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}, {"index": 1, "id": "c2", "function": {"name": "grep", "arguments": "{}"}}]}}]},
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4,
                                   "completion_tokens_details": {"reasoning_tokens": 2}}},
    ]  # fmt: skip
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    req = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]})
    f = read_exchange("/v1/chat/completions", 200, req, body, True)
    assert f.ok and f.tool_calls == [("c1", "read"), ("c2", "grep")]
    assert f.answer is not None and f.answer.tool_calls[0] == ("c1", "read", '{"p":"x"}')
    assert (f.prompt_tokens, f.completion_tokens, f.reasoning_tokens) == (9, 4, 2)
    assert not read_exchange("/v1/chat/completions", 200, b"\xff not json", b"", False).ok


def test_tool_calls_the_agent_made_itself_are_the_rounds_tools() -> None:
    book = _book()
    tr = Traffic(book)
    msgs = [SYSTEM, {"role": "user", "content": "go"}]
    s, _ = tr.chat(msgs, answer="I will call read")  # the model wrote text, no tool_calls
    tr.t += 0.2
    call = {"id": "mine", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    msgs += [{"role": "assistant", "content": "I will call read", "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "mine", "content": "1"}]  # fmt: skip
    s2, _ = tr.chat(msgs)
    assert s2 is s
    row = book.rows(s)[0]
    assert [t["name"] for t in row["tools"]] == ["read"]
    assert row["tools"][0]["wait_s"] == pytest.approx(0.2)
    assert row["record"]["tools_from"] == "agent"


def test_an_edited_answer_goes_to_the_session_whose_answer_it_kept() -> None:
    book = _book(subagents=False)
    tr = Traffic(book)
    opening = [SYSTEM, {"role": "user", "content": "go"}]
    a, _ = tr.chat(list(opening), answer="first")
    b, _ = tr.chat(list(opening), answer="second")  # the same opening: a second session
    call = {"id": "c", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    s, _ = tr.chat([*opening, {"role": "assistant", "content": "first", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "c", "content": "1"}])  # fmt: skip
    assert s is a and a is not b
