"""The session planner: (profile, seed, class, user, session) -> an agent session.

A Session is a small state machine. The Locust user asks it for the next step,
sleeps what the step says, sends the request and hands back the record::

    session = planner.new_session("agent", user_index, session_index)
    while (step := session.next_step()) is not None:
        sleep(step.think_s + step.tool_pause_s)      # user think time / tool execution
        req = step.request                            # body built here, after the sleep
        req.request_id = request_id_for(seed, session.session_id, step.step, step.attempt)
        session.observe(client.exchange(req))
    # session.outcome, session.reason, session.steps_done -> SessionRecord

Determinism: every random choice comes from numpy Generators seeded with
(seed, class, user_index, session_index, purpose), so the same seed gives
byte-identical bodies on any machine and with any number of workers, as long
as the Locust layer hands out the same global user_index / session_index.
In scripted history mode the assistant turns are synthesized, so the traffic
does not depend on the server's replies; in actual mode they are the replies.

Memory: sessions hold (key, n) references to synthetic text plus the shared
system prompt and tool schemas (one object per class), never rendered copies;
bodies are rendered on ``StepRequest.request`` access and dropped after.

Failures: a cancelled record ends the session as ``cancelled``; an error is
retried ``retries`` times (same body, next attempt number), then ends the
session as ``tool_loop_failure`` when the step produced or consumed a tool call
(DESIGN: a stalled tool loop is a tool-loop failure) and ``failed`` otherwise.
"""

from __future__ import annotations

import numpy as np

from workload.measure.records import STATUS_CANCELLED, RequestRecord
from workload.measure.retry import next_delay_s
from workload.plan.cache_loss import lose_prefix
from workload.plan.class_plan import CALL_TOKENS, ClassPlan
from workload.plan.loading import ProfileError
from workload.plan.payloads import PATHS, BodyOptions, build_body
from workload.plan.profile import Profile
from workload.plan.prompts import PromptSynth, stable_key, synth_for
from workload.plan.shapes import MAX_FANOUT
from workload.plan.steps import MSG_OVERHEAD, Msg, StepRequest, tool_arguments, tool_choice_for
from workload.plan.tokens import Tokenizer

_CALL_TOKENS = CALL_TOKENS  # allowance for an assistant tool-call message (scripted)

# Per-session random streams (one numpy Generator each); _SHAPE only for classes with agent
# shapes (workload.plan.shapes), so other profiles keep their bytes.
_PLAN, _SIZES, _TIMES, _SHAPE = 0, 1, 2, 3


class SubagentStart:
    """A child session the player starts ``delay_s`` from now, beside its parent."""

    __slots__ = ("session", "delay_s")

    def __init__(self, session: Session, delay_s: float = 0.0) -> None:
        self.session, self.delay_s = session, delay_s


class SessionPlanner:
    """Pure planner: the same (profile, seed, class, user_index, session_index) -> the same session."""

    def __init__(
        self,
        profile: Profile,
        tokenizer: Tokenizer,
        *,
        model: str,
        max_model_len: int | None,
        seed: int | None = None,
        synth: PromptSynth | None = None,
    ) -> None:
        self.profile = profile
        self.tokenizer = tokenizer
        self.model = model
        self.max_model_len = max_model_len
        self.seed = profile.seed if seed is None else seed
        self.synth = synth or synth_for(tokenizer)
        self.warnings: list[str] = []  # profile shapes the server forces us to clip
        self.classes = {
            n: ClassPlan(profile, self.synth, self.seed, n, c) for n, c in profile.classes.items()
        }
        problems = []
        for cp in self.classes.values():
            p, w = cp.fit_problems(max_model_len)
            problems += p
            self.warnings += w
        if problems:
            raise ProfileError(problems)

    def class_names(self) -> list[str]:
        """Traffic class names in profile order."""
        return list(self.classes)

    def new_session(self, class_name: str, user_index: int, session_index: int) -> Session:
        """The session for (class, user, session) under this planner's seed."""
        return Session(self, self.classes[class_name], user_index, session_index)

    def new_child(self, parent: Session, step: int, i: int) -> Session:
        """Subagent i spawned by the parent's step ``step`` (deterministic like any session)."""
        names = parent._c.spawn_classes  # only a class with subagents spawns
        name = names[0]
        if len(names) > 1:  # a weighted choice: its own stream, keyed like the child
            rng = np.random.default_rng([stable_key(parent._key, "subagent-class", step, i)])
            name = names[int(rng.choice(len(names), p=parent._c.spawn_p))]
        cp = self.classes[name]
        return Session(self, cp, parent.user_index, parent.session_index, (parent, step, i))


class Session:
    """One agent session (a task): steps out, records in. See the module docstring."""

    __slots__ = (
        "_p",
        "_c",
        "session_id",
        "class_name",
        "user_index",
        "session_index",
        "steps_planned",
        "steps_done",
        "outcome",
        "reason",
        "compactions",
        "rebuilds",
        "tool_calls",
        "_key",
        "_rng",
        "_system",
        "_history",
        "_ctx",
        "_sent",
        "_pending_calls",
        "_cur",
        "_retry",
        "_retry_delay",
        "_n_call",
        "_due",
        "_waits",
        "parent_session",
        "subagents",
    )

    def __init__(
        self,
        planner: SessionPlanner,
        cp: ClassPlan,
        user_index: int,
        session_index: int,
        spawned: tuple[Session, int, int] | None = None,
    ):
        self._p = planner
        self._c = cp
        self.class_name = cp.name
        self.user_index = user_index
        self.session_index = session_index
        base = [planner.seed & 0xFFFFFFFF, cp.key32, user_index, session_index]
        self.parent_session: str | None = None
        if spawned is None:
            self._key = stable_key(planner.seed, cp.name, user_index, session_index)
            self.session_id = (
                f"{cp.name}-u{user_index}-s{session_index}-{self._key & 0xFFFFFFFF:08x}"
            )
        else:  # a subagent: keyed by its parent, the spawning step and its place in it
            parent, step, i = spawned
            self._key = stable_key(parent._key, "subagent", step, i)
            self.session_id = f"{parent.session_id}/{cp.name}-{step}.{i}"
            self.parent_session = parent.session_id
            base += [parent._c.key32, step, i]
        streams = (_PLAN, _SIZES, _TIMES, _SHAPE) if cp.shaped else (_PLAN, _SIZES, _TIMES)
        self._rng = [np.random.default_rng([*base, s]) for s in streams]
        self.steps_planned = cp.spec.steps.sample_int(self._rng[_PLAN], lo=1)
        self.steps_done = 0
        self.outcome: str | None = None
        self.reason: str | None = None
        self.compactions = 0
        self.rebuilds = 0
        self.tool_calls = 0
        self._system = (
            Msg("system", key=stable_key(self._key, "system"), n=cp.system_tokens)
            if cp.share_session
            else Msg("system", text=cp.system_text, tokens=cp.system_tokens)
        )
        self._history: list[Msg] = []
        self._ctx = 0  # history tokens (estimate: exact content + per-message allowance)
        self._sent = 0  # of those, what the previous step's prompt held
        self._pending_calls: list[tuple[str, str]] = []  # (call id, tool name) awaiting results
        self._cur: StepRequest | None = None
        self._retry = False
        self._retry_delay = 0.0
        self._n_call = 0
        self._due: tuple[list[SubagentStart], list[str]] = ([], [])
        self._waits: list[tuple[str, float]] = []
        self.subagents = 0  # child sessions this session spawned

    # ------------------------------------------------------------ planning
    def _content_key(self, *parts: object) -> int:
        return stable_key(self._key, *parts)

    def next_step(self) -> StepRequest | None:
        """The next request to send, or None when the session is over (see outcome).

        Long because a step's plan reads in order: retry, turn, rebuild, output, shapes, cache."""
        self._due = ([], [])
        if self.outcome is not None:
            return None
        if self._retry and self._cur is not None:
            self._retry = False
            cur = self._cur
            cur.attempt += 1
            # The wait before a re-send: Retry-After when the server gave one, else a
            # backoff for 429 / 503 (workload.measure.retry); the player sleeps think_s.
            cur.think_s, cur.tool_pause_s = self._retry_delay, 0.0
            return cur
        spec = self._c.spec
        k = self.steps_done + 1
        actual = self._p.profile.history == "actual"
        if actual and k > spec.max_steps:
            self._end("tool_loop_failure", "step budget exceeded")
            return None
        sizes, times, plan = self._rng[_SIZES], self._rng[_TIMES], self._rng[_PLAN]
        think = pause = 0.0
        consumes_tool = bool(self._pending_calls)
        if consumes_tool:
            new, pause = self._tool_results(k)
        else:
            turn = spec.first_user_turn if k == 1 and spec.first_user_turn else spec.user_turn
            n = turn.sample_int(sizes, lo=1)
            new = [Msg("user", key=self._content_key("user", k), n=n)]
            think = max(0.0, spec.think_time_s.sample(times))
            # a user's first task (or a subagent) starts at once; later ones after a think
            if k == 1 and (self.session_index == 0 or self.parent_session):
                think = 0.0
        rebuilt = False
        if (
            spec.context.policy == "rebuild"
            and k > 1
            and plan.random() < spec.context.rebuild_probability
        ):
            rebuilt = True
            self.rebuilds += 1
            think += max(0.0, spec.context.break_s.sample(times))
        last = k >= self.steps_planned
        out_dist = (
            spec.output.final_tokens if last and spec.output.final_tokens else spec.output.tokens
        )
        out = out_dist.sample_int(sizes, lo=1)
        expects = k < self.steps_planned and plan.random() < spec.tool_call_probability
        if actual and expects:
            # The reply is the history: leave room for the whole call (no extra draw, so
            # the rest of the session's random stream is unchanged).
            out = max(out, spec.output.tool_call_tokens)
        planned_tool = None
        if expects:
            planned_tool = self._c.tool_names[
                int(plan.choice(len(self._c.tool_names), p=self._c.tool_p))
            ]
        expects, planned_tool, calls, reasoning, out = self._shape(k, expects, planned_tool, out)
        compactions = self.compactions
        out = self._fit(new, out, consumes_tool)
        reasoning = min(reasoning, out - 1)
        c = self._c
        shared = 0 if c.share_session else c.prefix_tokens
        if rebuilt:
            cacheable = 0  # a new cache_salt: nothing cached under it yet
        elif k == 1 or self.compactions != compactions:
            cacheable = shared
        elif (loss := spec.context.cache_loss_tokens) is not None:  # a provider cache's misses
            at = self._sent - round(loss.sample(sizes))
            self._system, cacheable = lose_prefix(
                self._system, self._history, at, self._content_key, k, c
            )
        else:
            cacheable = c.prefix_tokens + self._ctx
        self._history.extend(new)
        self._ctx += sum(m.tokens for m in new)
        self._sent = self._ctx
        self._cur = self._make_step(
            k, think, pause, consumes_tool, planned_tool, out, expects, reasoning, calls
        )
        self._cur.prompt_tokens_est = c.prefix_tokens + self._ctx
        self._cur.cacheable_tokens_est = cacheable
        return self._cur

    def _shape(
        self, k: int, expects: bool, planned_tool: str | None, out: int
    ) -> tuple[bool, str | None, tuple[str, ...], int, int]:
        """Step k's agent shapes: (expects, planned tool, the calls it emits, reasoning tokens,
        max_tokens with the reasoning)."""
        c = self._c
        calls: tuple[str, ...] = ()
        if not c.shaped:
            return expects, planned_tool, calls, 0, out
        rng = self._rng[_SHAPE]
        if c.sub and c.spawn_tool and k < self.steps_planned and rng.random() < c.sub.probability:
            expects, planned_tool = True, c.spawn_tool
            calls = (c.spawn_tool,) * min(MAX_FANOUT, c.sub.count.sample_int(rng, lo=1))
            also = c.sub.tool_calls_probability
            if also > 0 and c.tool_names and rng.random() < also:  # a Task beside a Bash
                n = min(MAX_FANOUT, c.sub.tool_calls.sample_int(rng, lo=1))
                calls += tuple(
                    c.tool_names[int(j)] for j in rng.choice(len(c.tool_names), size=n, p=c.tool_p)
                )
        elif expects and c.parallel and planned_tool is not None:
            n = min(MAX_FANOUT, c.parallel.sample_int(rng, lo=1))
            more = rng.choice(len(c.tool_names), size=n - 1, p=c.tool_p) if n > 1 else ()
            calls = (planned_tool, *(c.tool_names[int(j)] for j in more))
        r = c.reasoning.tokens.sample_int(rng, lo=0) if c.reasoning else 0
        out += r
        if expects and self._p.profile.history == "actual":
            out = max(out, c.spec.output.tool_call_tokens + r)  # room for the whole call
        return expects, planned_tool, calls, r, out

    def children_due(self) -> tuple[list[SubagentStart], list[str]]:
        """Subagents to start now (spawned by the last answer), and the ones the step just
        planned waits for (after its tools' pause, before its think time)."""
        return self._due

    def _tool_results(self, k: int) -> tuple[list[Msg], float]:
        """Step k's tool messages for the pending calls, and the pause: the slowest tool
        (a spawn call's wait is its subagent, which the player joins)."""
        sizes, times, plan = self._rng[_SIZES], self._rng[_TIMES], self._rng[_PLAN]
        new: list[Msg] = []
        lat = 0.0
        self._waits = []
        for call_id, name in self._pending_calls:
            tool = self._c.catalog.get(name)
            if tool is None:  # actual mode: reported at observe; keep history well-formed
                new.append(Msg("tool", text="error: unknown tool", tool_call_id=call_id, tokens=4))
                continue
            if name == self._c.spawn_tool:
                child = self._p.new_child(self, k - 1, len(self._due[0]))
                self._due[0].append(SubagentStart(child))
                self._due[1].append(child.session_id)
                self.subagents += 1
                n = tool.result_tokens.sample_int(sizes, lo=1)
                key = self._content_key("tool", k, call_id)
                new.append(Msg("tool", key=key, n=n, tool_call_id=call_id))
                continue
            wait = tool.latency_s.sample(times)
            lat = max(lat, wait)
            self._waits.append((name, max(0.0, wait)))
            n = tool.result_tokens.sample_int(sizes, lo=1)
            if plan.random() < tool.error_probability:
                text = "error: " + name + " failed"
                new.append(Msg("tool", text=text, tool_call_id=call_id, tokens=6))
            else:
                key = self._content_key("tool", k, call_id)
                new.append(Msg("tool", key=key, n=n, tool_call_id=call_id))
        self._pending_calls = []
        return new, max(0.0, lat)

    def _fit(self, new: list[Msg], out: int, consumes_tool: bool) -> int:
        """Compact (policy or max_model_len) before the request; returns max_tokens that fits."""
        c = self._c
        new_tokens = sum(m.tokens for m in new)
        limit = self._p.max_model_len
        if limit is not None and self._p.profile.history == "actual":
            # The last reply's chat-template tokens are counted only when the server reports
            # the next prompt (observe re-anchors on usage.prompt_tokens): keep room for them.
            limit -= _CALL_TOKENS
        total = c.fixed + self._ctx + new_tokens + out
        over_policy = c.compact_at is not None and c.fixed + self._ctx + new_tokens > c.compact_at
        floor = c.spec.context.summary_tokens + 2 * MSG_OVERHEAD + _CALL_TOKENS
        if (over_policy or (limit is not None and total > limit)) and self._ctx > floor:
            self._compact(keep_last=consumes_tool)
        if limit is None:
            return out
        room = limit - c.fixed - self._ctx - MSG_OVERHEAD * len(new)
        if room - out < sum(m.n for m in new):
            # Samples past the validated bounds: shrink the new content, then the output.
            excess = sum(m.n for m in new) + out - room
            for m in reversed(new):
                cut = min(excess, max(0, m.n - 1))
                m.n -= cut
                m.tokens -= cut
                excess -= cut
            out = max(1, out - max(0, excess))
        return out

    def _compact(self, keep_last: bool) -> None:
        # The history becomes one summary message (new bytes: the cached prefix breaks after
        # the system prompt); a pending tool call stays so its result still has a caller.
        keep = [self._history[-1]] if keep_last and self._history[-1].tool_calls else []
        self.compactions += 1
        n = self._c.spec.context.summary_tokens
        summary = Msg("user", key=self._content_key("summary", self.compactions), n=n)
        self._history = [summary, *keep]
        self._ctx = sum(m.tokens for m in self._history)

    def _make_step(
        self,
        k: int,
        think: float,
        pause: float,
        tool_step: bool,
        planned_tool: str | None,
        out: int,
        expects: bool,
        reasoning: int = 0,
        calls: tuple[str, ...] = (),
    ) -> StepRequest:
        spec = self._c.spec
        req = spec.request
        actual = self._p.profile.history == "actual"
        salt = req.cache_salt
        if self.rebuilds:
            salt = f"{salt or self.session_id}-r{self.rebuilds}"
        tool_choice = tool_choice_for(
            spec, actual=actual, expects=expects, step=k, planned_tool=planned_tool
        )
        opts = BodyOptions(
            model=self._p.model,
            max_tokens=out,
            stream=req.stream,
            temperature=req.temperature,
            tool_choice=tool_choice,
            priority=req.priority,
            ignore_eos=spec.output.ignore_eos,
            min_tokens=out if spec.output.min_tokens else None,
            session_id=self.session_id if req.session_id else None,
            cache_salt=salt,
            extra=self._c.reasoning.extra(reasoning) if self._c.reasoning else {},
        )
        msgs = [self._system, *self._history]  # a snapshot of references, not of text
        synth = self._p.synth
        tools = self._c.tools
        endpoint = req.endpoint

        def render() -> bytes:
            return build_body(endpoint, [m.render(synth) for m in msgs], tools, opts)[1]

        return StepRequest(
            step=k,
            attempt=0,
            think_s=think,
            tool_pause_s=pause,
            expects_tool_call=expects,
            consumes_tool_result=tool_step,
            planned_tool=planned_tool,
            max_tokens=out,
            endpoint=endpoint,
            path=PATHS[endpoint],
            stream=req.stream,
            timeout_s=spec.timeouts.request_s,
            stall_timeout_s=spec.timeouts.stall_s,
            user_class=self.class_name,
            session_id=self.session_id,
            _render=render,
            reasoning_tokens=reasoning,
            planned_calls=calls,
            tool_waits=tuple(self._waits) if tool_step else (),
        )

    # ------------------------------------------------------------ observing
    def observe(self, record: RequestRecord) -> None:
        """Take the record of the step just sent; may end the session (outcome, reason)."""
        cur = self._cur
        if cur is None or self.outcome is not None:
            return
        cur._body = None  # the body is not needed any more; keep idle sessions small
        if record.status == STATUS_CANCELLED:
            self._end("cancelled", "cancelled")
            return
        if not record.ok:
            if cur.attempt < self._c.spec.retries:
                self._retry = True
                self._retry_delay = next_delay_s(record, cur.attempt)
                return
            kind = record.error_kind or "error"
            if cur.expects_tool_call or cur.consumes_tool_result:
                self._end("tool_loop_failure", f"{kind} on a tool step")
            else:
                self._end("failed", kind)
            return
        self.steps_done += 1
        spec = self._c.spec
        if self._p.profile.history == "actual":
            if not self._observe_actual(record, cur):
                return
            done = self.steps_done >= self.steps_planned and not self._pending_calls
        else:
            self._observe_scripted(cur)
            done = self.steps_done >= self.steps_planned
        if done:
            self._end("completed", None)
        elif (
            spec.context.policy == "discard"
            and self._rng[_PLAN].random() < spec.context.discard_probability
        ):
            self._end("completed", "discarded")

    def _observe_scripted(self, cur: StepRequest) -> None:
        if cur.planned_tool is not None:
            names = cur.planned_calls or (cur.planned_tool,)
            self._add_calls([(t, self._arguments(t, cur.step, i)) for i, t in enumerate(names)])
        else:
            n = cur.max_tokens - cur.reasoning_tokens  # hidden reasoning stays out of history
            self._append(Msg("assistant", key=self._content_key("assistant", cur.step), n=n))

    def _observe_actual(self, record: RequestRecord, cur: StepRequest) -> bool:
        # Re-anchor the context count on the server's prompt count: replies come back as
        # text and calls whose chat-template tokens the planner can only estimate, and the
        # estimate would drift past max_model_len over a long session.
        if isinstance(record.prompt_tokens, int) and cur.prompt_tokens_est is not None:
            self._ctx = max(0, self._ctx + record.prompt_tokens - cur.prompt_tokens_est)
        calls = record.tool_calls or []
        if cur.planned_tool is not None and not calls:
            self._end("tool_loop_failure", "missing tool call")
            return False
        for c in calls:
            if not c.get("arguments_valid", True):
                cut = " (cut off at max_tokens)" if record.finish_reason == "length" else ""
                self._end("tool_loop_failure", "malformed tool call" + cut)
                return False
            if c.get("name") not in self._c.spec.tools and c.get("name") != self._c.spawn_tool:
                self._end("tool_loop_failure", f"unknown tool {c.get('name')!r}")
                return False
        text = record.text or None
        if calls:
            self._add_calls([(c["name"], c.get("arguments") or "{}") for c in calls], text, record)
        else:
            n = record.completion_tokens or (self._p.synth.count(text) if text else 0)
            self._append(Msg("assistant", text=text or "", tokens=n))
        return True

    def _add_calls(
        self,
        calls: list[tuple[str, str]],
        text: str | None = None,
        record: RequestRecord | None = None,
    ) -> None:
        out = []
        for name, args in calls:
            self._n_call += 1
            call_id = f"call_{self._key & 0xFFFFFFFF:08x}_{self._n_call}"
            out.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            )
            self._pending_calls.append((call_id, name))
        self.tool_calls += len(calls)
        toks = (record.completion_tokens if record else None) or _CALL_TOKENS * len(calls)
        self._append(Msg("assistant", text=text, tool_calls=out, tokens=toks))

    def _append(self, m: Msg) -> None:
        self._history.append(m)
        self._ctx += m.tokens

    def _arguments(self, tool: str, step: int, call: int = 0) -> str:
        """Synthetic arguments that fit the tool's JSON schema (deterministic per session,
        step and parallel call)."""
        return tool_arguments(
            self._c.catalog[tool].parameters,
            self._p.synth,
            (lambda i: self._content_key("arg", step, i))
            if call == 0
            else (lambda i: self._content_key("arg", step, call, i)),
        )

    def _end(self, outcome: str, reason: str | None) -> None:
        self.outcome = outcome
        self.reason = reason
        self._cur = None
        self._history = []  # an ended session holds nothing
