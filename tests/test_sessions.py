"""The planner: determinism, token-exact sizes, context policies, limits, tool loops."""

from __future__ import annotations

import copy

import orjson
import pytest

from workload.measure.records import RequestRecord
from workload.plan.loading import ProfileError, list_profiles, load_profile, validate_profile
from workload.plan.sessions import SessionPlanner
from workload.plan.tokens import get_tokenizer

TOK = get_tokenizer("tiktoken:cl100k_base")

BASE = {
    "seed": 5,
    "tools": {
        "read": {
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            "latency_s": 0.25,
            "result_tokens": 321,
        },
        "grep": {"parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    },
    "classes": {
        "agent": {
            "steps": 6,
            "system_prompt": {"tokens": 500, "share": "global"},
            "user_turn": 123,
            "output": {"tokens": 40},
            "tools": {"read": 1},
            "tool_call_probability": 1.0,
            "think_time_s": 2.0,
        },
        "chat": {"steps": 3, "system_prompt": {"tokens": 500, "share": "class"}, "user_turn": 50},
    },
}


def make(over=None, *, max_model_len=None, seed=None, model="m"):
    raw = copy.deepcopy(BASE)
    if over:
        from workload.plan.loading import deep_merge

        raw = deep_merge(raw, over)
    return SessionPlanner(
        validate_profile(raw), TOK, model=model, max_model_len=max_model_len, seed=seed
    )


def ok(step, **kw):
    return RequestRecord(step=step.step, **kw)


def play(session, reply=ok):
    """Drive a session with a fake server; returns [(StepRequest, body dict)]."""
    out = []
    while (st := session.next_step()) is not None:
        out.append((st, orjson.loads(st.body)))
        session.observe(reply(st))
    return out


def bodies(planner, cls="agent", user=0, sess=0):
    return [st.body for st, _ in play(planner.new_session(cls, user, sess))]


def content_tokens(msg):
    return TOK.count(msg["content"] or "")


# ---- determinism ----------------------------------------------------------------------
def test_same_seed_same_bytes_in_any_order():
    a, b = make(), make()
    want = {(u, s): bodies(a, "agent", u, s) for u in range(3) for s in range(2)}
    # Another "worker": other creation order, interleaved stepping.
    sessions = {(u, s): b.new_session("agent", u, s) for u in reversed(range(3)) for s in (1, 0)}
    got = {k: [] for k in sessions}
    live = dict(sessions)
    while live:
        for k, sess in list(live.items()):
            st = sess.next_step()
            if st is None:
                del live[k]
                continue
            got[k].append(st.body)
            sess.observe(ok(st))
    assert got == want


def test_other_seed_other_bytes():
    assert bodies(make(seed=1)) != bodies(make(seed=2))
    assert bodies(make(), user=0) != bodies(make(), user=1)
    assert bodies(make(), sess=0) != bodies(make(), sess=1)


def test_session_id_deterministic_and_unique():
    p = make()
    ids = {p.new_session("agent", u, s).session_id for u in range(50) for s in range(4)}
    assert len(ids) == 200
    assert p.new_session("agent", 3, 1).session_id == make().new_session("agent", 3, 1).session_id


def test_scripted_traffic_ignores_replies():
    p = make()

    def chatty(st):
        return RequestRecord(step=st.step, text="whatever the model said", completion_tokens=999)

    a = [st.body for st, _ in play(p.new_session("agent", 0, 0))]
    b = [st.body for st, _ in play(p.new_session("agent", 0, 0), chatty)]
    assert a == b


# ---- sizes and prefixes ---------------------------------------------------------------
def test_token_exact_sizes():
    steps = play(make().new_session("agent", 0, 0))
    first = steps[0][1]["messages"]
    assert content_tokens(first[0]) == 500 and first[0]["role"] == "system"
    assert content_tokens(first[1]) == 123 and first[1]["role"] == "user"
    assert steps[0][1]["max_tokens"] == 40
    tool_msgs = [m for m in steps[-1][1]["messages"] if m["role"] == "tool"]
    assert tool_msgs and all(content_tokens(m) == 321 for m in tool_msgs)


def test_agent_loop_shape_and_sleeps():
    assert make().new_session("agent", 0, 0).next_step().think_s == 0  # first task: at once
    steps = play(make().new_session("agent", 0, 1))
    assert len(steps) == 6
    st1, st2 = steps[0][0], steps[1][0]
    assert st1.think_s == 2.0 and st1.tool_pause_s == 0 and st1.expects_tool_call
    assert st2.tool_pause_s == 0.25 and st2.think_s == 0 and st2.consumes_tool_result
    assert not steps[-1][0].expects_tool_call  # the last step answers
    last = steps[-1][1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "tool"] * 5
    call = last[2]["tool_calls"][0]
    assert call["function"]["name"] == "read" and last[3]["tool_call_id"] == call["id"]
    assert set(orjson.loads(call["function"]["arguments"])) == {"path"}


def test_history_grows_as_a_prefix():
    steps = play(make().new_session("agent", 0, 0))
    for (_, prev), (_, cur) in zip(steps, steps[1:], strict=False):
        assert cur["messages"][: len(prev["messages"])] == prev["messages"]
    assert steps[1][0].cacheable_tokens_est > steps[0][0].cacheable_tokens_est


def test_shared_prefix_scopes():
    p = make({"classes": {"other": {"system_prompt": {"tokens": 500, "share": "global"}}}})
    sys_of = lambda c, u: orjson.loads(p.new_session(c, u, 0).next_step().body)["messages"][0]  # noqa: E731
    assert sys_of("agent", 0) == sys_of("agent", 7) == sys_of("other", 1)  # global
    assert sys_of("chat", 0) == sys_of("chat", 9)  # class
    assert sys_of("chat", 0) != sys_of("agent", 0)
    q = make({"classes": {"agent": {"system_prompt": {"share": "session"}}}})
    s0 = orjson.loads(q.new_session("agent", 0, 0).next_step().body)["messages"][0]
    s1 = orjson.loads(q.new_session("agent", 1, 0).next_step().body)["messages"][0]
    assert s0 != s1 and content_tokens(s0) == content_tokens(s1) == 500


def test_tools_identical_across_sessions():
    p = make()
    t = [orjson.loads(p.new_session("agent", u, 0).next_step().body)["tools"] for u in range(3)]
    assert t[0] == t[1] == t[2] and t[0][0]["function"]["name"] == "read"


# ---- context policies -------------------------------------------------------------------
def test_compaction_breaks_the_cached_prefix():
    p = make(
        {
            "classes": {
                "agent": {
                    "steps": 12,
                    "context": {
                        "policy": "compact",
                        "compact_at_tokens": 2000,
                        "summary_tokens": 200,
                    },
                }
            }
        }
    )
    s = p.new_session("agent", 0, 0)
    steps = play(s)
    assert s.compactions >= 1 and s.outcome == "completed"
    broke = [
        i
        for i, ((_, prev), (_, cur)) in enumerate(zip(steps, steps[1:], strict=False))
        if cur["messages"][: len(prev["messages"])] != prev["messages"]
    ]
    assert broke
    i = broke[0] + 1
    prev, cur = steps[i - 1][1]["messages"], steps[i][1]["messages"]
    assert cur[0] == prev[0]  # the system prompt still matches
    assert cur[1] != prev[1] and content_tokens(cur[1]) == 200  # the summary
    assert steps[i][0].cacheable_tokens_est == p.classes["agent"].prefix_tokens
    assert all(st.prompt_tokens_est <= 2000 + 400 for st, _ in steps)


def test_rebuild_resends_identical_bytes_with_new_salt():
    p = make(
        {
            "classes": {
                "agent": {
                    "context": {"policy": "rebuild", "rebuild_probability": 1.0, "break_s": 30}
                }
            }
        }
    )
    s = p.new_session("agent", 0, 0)
    steps = play(s)
    (_, b1), (st2, b2) = steps[0], steps[1]
    assert "cache_salt" not in b1
    assert b2["cache_salt"] == f"{s.session_id}-r1"
    assert steps[2][1]["cache_salt"] == f"{s.session_id}-r2"
    # Same content from scratch: the previous request's messages, byte for byte.
    assert orjson.dumps(b2["messages"][: len(b1["messages"])]) == orjson.dumps(b1["messages"])
    assert st2.think_s >= 30 and st2.cacheable_tokens_est == 0


def test_rebuild_keeps_configured_salt_as_base():
    p = make(
        {
            "classes": {
                "agent": {
                    "request": {"cache_salt": "run-a"},
                    "context": {"policy": "rebuild", "rebuild_probability": 1.0},
                }
            }
        }
    )
    steps = play(p.new_session("agent", 0, 0))
    assert steps[0][1]["cache_salt"] == "run-a" and steps[1][1]["cache_salt"] == "run-a-r1"


def test_discard_ends_session_early():
    p = make({"classes": {"agent": {"context": {"policy": "discard", "discard_probability": 1.0}}}})
    s = p.new_session("agent", 0, 0)
    assert len(play(s)) == 1
    assert (s.outcome, s.reason) == ("completed", "discarded")


# ---- max_model_len ----------------------------------------------------------------------
def test_never_exceeds_max_model_len():
    p = SessionPlanner(load_profile("coding-agent"), TOK, model="m", max_model_len=24576)
    for u in range(3):
        for st, body in play(p.new_session("coding-agent", u, 0)):
            tokens = sum(content_tokens(m) for m in body["messages"])
            assert tokens + st.max_tokens + len(body["messages"]) * 8 <= 24576
            assert st.prompt_tokens_est + st.max_tokens <= 24576


def test_samples_past_the_limit_are_clipped():
    p = make({"classes": {"chat": {"user_turn": 20000}}}, max_model_len=4096)
    assert any("clipped" in w for w in p.warnings)
    st, body = play(p.new_session("chat", 0, 0))[0]
    assert content_tokens(body["messages"][1]) + 500 + st.max_tokens < 4096


def test_fixed_parts_that_cannot_fit_are_rejected():
    with pytest.raises(ProfileError) as e:
        make({"classes": {"agent": {"system_prompt": {"tokens": 9000}}}}, max_model_len=8192)
    (line,) = e.value.problems
    assert "classes.agent" in line and "max_model_len 8192" in line and "system prompt 9000" in line


# ---- actual mode and failures -------------------------------------------------------------
def actual(over=None, **kw):
    o = {"history": "actual"}
    if over:
        o.update(over)
    return make(o, **kw)


def call(name="read", args='{"path": "a"}', valid=True, cid="x1"):
    return {"index": 0, "id": cid, "name": name, "arguments": args, "arguments_valid": valid}


def test_actual_mode_puts_replies_in_history():
    s = actual().new_session("agent", 0, 0)
    st = s.next_step()
    assert orjson.loads(st.body)["tool_choice"] == "required"
    s.observe(RequestRecord(step=1, tool_calls=[call()], text="", completion_tokens=12))
    st2 = s.next_step()
    msgs = orjson.loads(st2.body)["messages"]
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"path": "a"}'}
    assert msgs[3]["role"] == "tool" and msgs[3]["tool_call_id"] == msgs[2]["tool_calls"][0]["id"]
    assert content_tokens(msgs[3]) == 321 and st2.tool_pause_s == 0.25


def test_actual_named_tool_choice():
    s = actual({"classes": {"agent": {"tool_choice": "named"}}}).new_session("agent", 0, 0)
    assert orjson.loads(s.next_step().body)["tool_choice"] == {
        "type": "function",
        "function": {"name": "read"},
    }


@pytest.mark.parametrize(
    "rec, reason",
    [
        (RequestRecord(step=1, text="no tool"), "missing tool call"),
        (
            RequestRecord(step=1, tool_calls=[call(valid=False, args="{oops")]),
            "malformed tool call",
        ),
        (RequestRecord(step=1, tool_calls=[call(name="rm_rf")]), "unknown tool 'rm_rf'"),
    ],
)
def test_tool_loop_failures(rec, reason):
    s = actual().new_session("agent", 0, 0)
    s.next_step()
    s.observe(rec)
    assert (s.outcome, s.reason) == ("tool_loop_failure", reason)
    assert s.next_step() is None


def test_truncated_tool_call_names_max_tokens():
    s = actual().new_session("agent", 0, 0)
    s.next_step()
    s.observe(
        RequestRecord(step=1, tool_calls=[call(valid=False, args='{"pa')], finish_reason="length")
    )
    assert s.reason == "malformed tool call (cut off at max_tokens)"


def test_actual_tool_steps_leave_room_for_the_call():
    # output.tokens 40 < the 256 default: a step that expects a call sends room for it; the
    # same profile scripted sends the drawn 40, and the floor draws nothing from the stream.
    st = actual().new_session("agent", 0, 0).next_step()
    assert st.expects_tool_call and st.max_tokens == 256
    assert orjson.loads(st.body)["max_tokens"] == 256
    floor = actual({"classes": {"agent": {"output": {"tool_call_tokens": 16}}}})
    assert floor.new_session("agent", 0, 0).next_step().max_tokens == 40
    assert make().new_session("agent", 0, 0).next_step().max_tokens == 40


def test_actual_context_reanchors_on_the_servers_prompt_count():
    # A server whose chat template wraps each tool call in 40 more tokens than the planner
    # can know: over a long session that drift would pass max_model_len; the planner takes
    # the server's usage.prompt_tokens instead, so every request still fits.
    p = actual({"classes": {"agent": {"steps": 60, "max_steps": 60}}}, max_model_len=8192)
    s = p.new_session("agent", 0, 0)

    def server_count(body):
        msgs = body["messages"]
        calls = [c for m in msgs for c in m.get("tool_calls") or []]
        args = sum(TOK.count(c["function"]["arguments"]) for c in calls)
        return sum(content_tokens(m) for m in msgs) + 8 * len(msgs) + args + 40 * len(calls)

    fixed = None
    while (st := s.next_step()) is not None:
        body = orjson.loads(st.body)
        if fixed is None:  # tools and template constants, from the first (call-free) prompt
            fixed = st.prompt_tokens_est - server_count(body)
        prompt = fixed + server_count(body)
        assert prompt + st.max_tokens <= 8192, (st.step, prompt, st.max_tokens)
        rec = RequestRecord(
            step=st.step, tool_calls=[call(cid=f"c{st.step}")], prompt_tokens=prompt,
            completion_tokens=12,
        )  # fmt: skip
        s.observe(rec)
    assert s.compactions >= 2 and s.steps_done == 60


def test_step_budget_exceeded():
    s = actual({"classes": {"agent": {"max_steps": 3, "steps": 2}}}).new_session("agent", 0, 0)
    steps = play(s, lambda st: RequestRecord(step=st.step, tool_calls=[call(cid=f"c{st.step}")]))
    assert len(steps) == 3
    assert (s.outcome, s.reason) == ("tool_loop_failure", "step budget exceeded")


def test_actual_completes_when_model_answers():
    s = actual({"classes": {"agent": {"tool_call_probability": 0.0, "steps": 2}}}).new_session(
        "agent", 0, 0
    )
    steps = play(s, lambda st: RequestRecord(step=st.step, text="done", completion_tokens=1))
    assert len(steps) == 2 and s.outcome == "completed"
    assert steps[1][1]["messages"][2] == {"role": "assistant", "content": "done"}


def err(st, kind="http_status"):
    return RequestRecord(step=st.step, status="error", error_kind=kind)


def test_error_fails_the_session():
    s = make().new_session("chat", 0, 0)
    s.next_step()
    s.observe(RequestRecord(step=1, status="error", error_kind="timeout"))
    assert (s.outcome, s.reason) == ("failed", "timeout") and s.next_step() is None


def test_error_on_tool_step_is_a_tool_loop_failure():
    s = make().new_session("agent", 0, 0)
    s.next_step()
    s.observe(RequestRecord(step=1, status="error", error_kind="stall"))
    assert (s.outcome, s.reason) == ("tool_loop_failure", "stall on a tool step")


def test_retries_resend_same_body_with_next_attempt():
    s = make({"classes": {"chat": {"retries": 1}}}).new_session("chat", 0, 0)
    st = s.next_step()
    body = st.body
    s.observe(err(st))
    again = s.next_step()
    assert again.attempt == 1 and again.body == body and again.step == 1
    assert again.request.attempt == 1
    s.observe(err(again))
    assert s.outcome == "failed"


def test_cancelled():
    s = make().new_session("chat", 0, 0)
    s.next_step()
    s.observe(RequestRecord(step=1, status="cancelled", error_kind="cancelled"))
    assert (s.outcome, s.reason) == ("cancelled", "cancelled")


def test_prepared_request_fields():
    s = make(
        {
            "classes": {
                "chat": {
                    "timeouts": {"request_s": 1800, "stall_s": 900},
                    "request": {"stream": False},
                }
            }
        }
    ).new_session("chat", 2, 3)
    st = s.next_step()
    r = st.request
    assert (r.path, r.endpoint, r.stream, r.request_id) == (
        "/v1/chat/completions",
        "chat",
        False,
        "",
    )
    assert (r.timeout_s, r.stall_timeout_s) == (1800, 900)
    assert (r.user_class, r.session_id, r.step, r.attempt) == ("chat", s.session_id, 1, 0)
    assert r.body == st.body and orjson.loads(r.body)["model"] == "m"


def test_vllm_extras_follow_the_profile():
    p = make(
        {
            "classes": {
                "chat": {
                    "request": {"priority": 4, "session_id": True},
                    "output": {"tokens": 9, "ignore_eos": True, "min_tokens": True},
                }
            }
        }
    )
    s = p.new_session("chat", 0, 0)
    b = orjson.loads(s.next_step().body)
    assert (b["priority"], b["session_id"], b["ignore_eos"], b["min_tokens"], b["max_tokens"]) == (
        4,
        s.session_id,
        True,
        9,
        9,
    )
    plain = orjson.loads(make().new_session("chat", 0, 0).next_step().body)
    assert not {"priority", "session_id", "ignore_eos", "min_tokens", "cache_salt"} & set(plain)


def test_completions_endpoint():
    p = make({"classes": {"agent": {"request": {"endpoint": "completions"}}}})
    steps = play(p.new_session("agent", 0, 0))
    assert all(st.path == "/v1/completions" for st, _ in steps)
    assert "<tool_call>" in steps[-1][1]["prompt"]


# ---- built-ins --------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n, _ in list_profiles()])
def test_every_builtin_plans_sessions(name):
    prof = load_profile(name)
    p = SessionPlanner(prof, TOK, model="m", max_model_len=131072)
    for cls in p.class_names():
        for u in range(3):
            s = p.new_session(cls, u, 0)
            steps = play(s)
            assert steps and s.outcome == "completed"
            assert len(steps) == s.steps_done <= prof.classes[cls].max_steps


def test_planned_tool_travels_to_the_request():
    """The planned tool reaches the PreparedRequest (the client copies it into the record)."""
    steps = play(make().new_session("agent", 0, 1))
    planned = [st.planned_tool for st, _ in steps]
    assert any(planned)  # the agent class plans tool calls
    assert all(st.request.planned_tool == st.planned_tool for st, _ in steps)


def test_a_retry_waits_as_the_server_asked():
    """Retry-After on a 503 becomes the wait before the re-send (same body, next attempt)."""
    from dataclasses import replace as _replace

    from workload.measure.records import RequestRecord

    prof = validate_profile({"classes": {"c": {"steps": 2, "retries": 2}}})
    session = SessionPlanner(
        prof, get_tokenizer("tiktoken:cl100k_base"), model="m", max_model_len=None
    ).new_session("c", 0, 0)
    first = session.next_step()
    failed = RequestRecord(status="error", error_kind="http_status", http_status=503)
    session.observe(_replace(failed, retry_after_s=7.0))
    again = session.next_step()
    assert again is first and again.attempt == 1 and again.think_s == 7.0
    session.observe(_replace(failed, retry_after_s=None))
    assert session.next_step().think_s == 2.0  # backoff 1 s, 2 s, ... without the header
