"""context.cache_loss_tokens: a provider cache's misses, re-sent as new bytes (cache_loss)."""

from __future__ import annotations

import os

from tests.test_sessions import TOK, make, play
from workload.plan.steps import MSG_OVERHEAD


def _common_tokens(a: str, b: str) -> int:
    return TOK.count(a[: len(os.path.commonprefix([a, b]))])


def _chat(loss):
    return make(
        {"classes": {"chat": {"output": {"tokens": 200}, "context": {"cache_loss_tokens": loss}}}}
    )


def test_zero_loss_keeps_every_byte_sent_and_drops_the_answer_from_the_estimate():
    ideal = play(make().new_session("chat", 0, 0))
    steps = play(_chat(0).new_session("chat", 0, 0))
    for (_, prev), (_, cur) in zip(steps, steps[1:], strict=False):
        assert cur["messages"][: len(prev["messages"])] == prev["messages"]
    for (prev, _), (st, _) in zip(steps, steps[1:], strict=False):
        # the answer is not served (its role header is: the same bytes)
        assert st.cacheable_tokens_est == prev.prompt_tokens_est + MSG_OVERHEAD
    # sizes are the ideal cache's: only what a cache serves changed
    assert [s.prompt_tokens_est for s, _ in steps] == [s.prompt_tokens_est for s, _ in ideal]
    assert steps[1][0].cacheable_tokens_est < ideal[1][0].cacheable_tokens_est


def test_a_loss_rewrites_the_history_from_that_many_tokens_before_the_previous_prompt_end():
    p = _chat(100)
    steps = play(p.new_session("chat", 0, 0))
    (prev_st, prev), (st, cur) = steps[1], steps[2]
    prefix = p.classes["chat"].prefix_tokens
    # previous prompt: system, user 1 (50), answer 1 (200), user 2 (50); 100 back is in answer 1
    sent = prev_st.prompt_tokens_est - prefix
    assert st.cacheable_tokens_est == prefix + sent - 100
    keep = sent - 100 - (50 + MSG_OVERHEAD) - MSG_OVERHEAD  # tokens of answer 1 still served
    a, b = prev["messages"][2]["content"], cur["messages"][2]["content"]
    assert a != b and TOK.count(b) == TOK.count(a) == 200  # same size, new bytes after keep
    assert abs(_common_tokens(a, b) - keep) <= 1
    assert cur["messages"][:2] == prev["messages"][:2] and cur["messages"][3] == prev["messages"][3]
    assert st.prompt_tokens_est == prev_st.prompt_tokens_est + 200 + 50 + 2 * MSG_OVERHEAD


def test_a_loss_past_the_whole_prompt_rewrites_the_system_prompt_and_keeps_the_history():
    p = make({"classes": {"agent": {"context": {"cache_loss_tokens": 10**6}}}})
    steps = play(p.new_session("agent", 0, 0))
    for (_, prev), (st, cur) in zip(steps, steps[1:], strict=False):
        a, b = prev["messages"][0]["content"], cur["messages"][0]["content"]
        assert a != b and TOK.count(b) == TOK.count(a) == 500  # new bytes, the same size
        # the history keeps its bytes: the change before it makes it a miss
        assert cur["messages"][1 : len(prev["messages"])] == prev["messages"][1:]
        assert st.cacheable_tokens_est == MSG_OVERHEAD  # only the system role header


def test_a_loss_into_the_system_prompt_cuts_it_there_and_the_session_keeps_the_cut():
    prefix = _chat(0).classes["chat"].prefix_tokens
    # step 1 sent the prefix and user 1 (50 tokens): this loss starts 300 tokens into the
    # system prompt's text (500 tokens, after its role header) on step 2
    p = _chat(prefix + 50 + MSG_OVERHEAD - (MSG_OVERHEAD + 300))
    (s1, b1), (s2, b2), (s3, b3) = play(p.new_session("chat", 0, 0))
    assert s2.cacheable_tokens_est == MSG_OVERHEAD + 300
    a, b = b1["messages"][0]["content"], b2["messages"][0]["content"]
    assert a != b and TOK.count(b) == 500 and abs(_common_tokens(a, b) - 300) <= 1
    assert b2["messages"][1] == b1["messages"][1]  # the history keeps its bytes
    # step 3's loss falls in the history: the session's own system prompt is served
    assert b3["messages"][0]["content"] == b
    assert prefix < s3.cacheable_tokens_est < s2.prompt_tokens_est
    # other sessions of the class still send the class's prompt
    assert play(p.new_session("chat", 1, 0))[0][1]["messages"][0]["content"] == a


def test_a_tool_call_is_kept_whole_and_a_negative_loss_reaches_into_the_answer():
    # agent steps end in tool calls: 0 loss starts the change after the call (it cannot be cut)
    p = make({"classes": {"agent": {"context": {"cache_loss_tokens": 0}}}})
    steps = play(p.new_session("agent", 0, 0))
    for (_, prev), (st, cur) in zip(steps, steps[1:], strict=False):
        assert cur["messages"][: len(prev["messages"])] == prev["messages"]
        assert st.cacheable_tokens_est == st.prompt_tokens_est - (321 + MSG_OVERHEAD)
    q = _chat(-30)
    st3 = play(q.new_session("chat", 0, 0))
    (prev_st, _), (st, _) = st3[1], st3[2]
    assert st.cacheable_tokens_est == prev_st.prompt_tokens_est + 30
