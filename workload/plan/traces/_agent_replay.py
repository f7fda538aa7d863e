"""Replaying agent sessions closed loop: token-exact prompts with the recorded prefix reuse.

Sessions start open loop at their recorded start times (``--speedup`` divides the
offsets; ``--max-gap`` caps each gap between starts). Inside a session, round k+1 is
planned only when round k's answer has fully arrived (the player calls ``next_step``
after ``observe``), and it leaves after the recorded waits: the slowest of round k's
tools (``tool_pause_s``; a tool that ran a subagent is the subagent itself, which the
player runs beside the parent and joins) and then the think gap (``think_s``). Both are
divided by the speedup and capped at ``max_gap_s``.

Prompts (streamed /v1/completions, exact token counts for the offline tokenizer): a
session's context is a list of synthetic text segments. Round k's prompt is the first
``prefix_tokens`` tokens of round k-1's prompt followed by a stand-in for its answer
(``output_tokens`` tokens), then ``appended_tokens`` fresh tokens, so it shares exactly the
recorded prefix with what the session sent before and nothing more: a prefix cache sees
the recorded reuse. Round 0's prefix (a cached system prompt in the recording) is one
shared text per model (subagents their own), so sessions share it as they did; the
first session to send it finds a cold cache (the recording's earlier sessions are absent).
A recorded prefix longer than the previous prompt reaches into the answer, which the
server generated itself: the stand-in then differs from what the server saw, and the
part past the previous prompt cannot hit (``prefix_beyond_prompt`` counts those rounds).
``max_tokens`` is the recorded output (reasoning included) with ``ignore_eos``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from workload.measure.records import STATUS_CANCELLED, RequestRecord
from workload.plan.payloads import PATHS, BodyOptions, completions_body
from workload.plan.prompts import PromptSynth, stable_key
from workload.plan.sessions import StepRequest
from workload.plan.traces._agent import AgentRound, AgentTrace
from workload.plan.traces._replay import TRACE_CLASS

Segment = tuple[int, int]  # (text key, tokens): synth.text(key, n); a shorter n is a prefix


def take(segments: Sequence[Segment], n: int) -> list[Segment]:
    """The first ``n`` tokens of a segment list."""
    out: list[Segment] = []
    for key, k in segments:
        if n <= 0:
            break
        out.append((key, min(k, n)))
        n -= k
    return out


def tokens(segments: Sequence[Segment]) -> int:
    return sum(k for _, k in segments)


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How a run replays agent sessions."""

    model: str
    seed: int
    speedup: float = 1.0
    max_gap_s: float | None = None
    timeout_s: float = 600.0
    stall_timeout_s: float = 120.0


def scaled_gap(seconds: float, o: ReplayOptions) -> float:
    """A recorded wait as replayed: divided by the speedup, capped at max_gap_s."""
    s = max(0.0, seconds) / o.speedup
    return min(s, o.max_gap_s) if o.max_gap_s is not None else s


def session_starts(trace: AgentTrace, o: ReplayOptions) -> list[float]:
    """Replay offsets (s) of the root sessions in ``trace.roots`` order: gaps scaled, capped."""
    roots = trace.roots
    out: list[float] = []
    for i, s in enumerate(roots):
        if i == 0:
            out.append(0.0)
            continue
        gap = trace.sessions[s][0].t_start - trace.sessions[roots[i - 1]][0].t_start
        out.append(out[-1] + scaled_gap(gap, o))
    return out


def planned_duration_s(
    trace: AgentTrace, session: str, o: ReplayOptions, *, rounds_speedup: float | None = None
) -> float:
    """The recorded length of a session (its rounds and waits, scaled and capped); the
    rounds' own LLM time divided by ``rounds_speedup`` when given (1: as recorded)."""
    rs = trace.sessions[session]
    total = 0.0
    for k, r in enumerate(rs):
        total += (r.t_end - r.t_start) / (rounds_speedup or o.speedup)
        if k:
            total += scaled_gap(rs[k - 1].tool_wait_s, o) + scaled_gap(r.think_s, o)
    return total


def fit_rounds(
    trace: AgentTrace, max_model_len: int | None, *, clip: bool
) -> tuple[AgentTrace, int, int]:
    """The trace with rounds over ``max_model_len`` clipped when ``clip``; (trace, too long, largest).

    Clipping holds the output to at most half the context, then cuts the prompt's tail
    (its prefix is kept as far as it reaches).
    """
    largest = max((r.input_tokens + r.output_tokens for r in trace.iter_rounds()), default=0)
    if not max_model_len:
        return trace, 0, largest
    too_long = sum(
        1 for r in trace.iter_rounds() if r.input_tokens + r.output_tokens > max_model_len
    )
    if not (clip and too_long):
        return trace, too_long, largest

    def cut(r: AgentRound) -> AgentRound:
        if r.input_tokens + r.output_tokens <= max_model_len:
            return r
        out = max(1, min(r.output_tokens, max_model_len // 2))
        inp = max(1, min(r.input_tokens, max_model_len - out))
        return replace(
            r, input_tokens=inp, output_tokens=out, prefix_tokens=min(r.prefix_tokens, inp)
        )

    sessions = {s: [cut(r) for r in rs] for s, rs in trace.sessions.items()}
    return AgentTrace(sessions, trace.source, trace.format, trace.bad_lines), too_long, largest


@dataclass(frozen=True, slots=True)
class ChildStart:
    """A subagent session the player starts ``delay_s`` from now, beside its parent."""

    session: AgentSession
    delay_s: float


class AgentSession:
    """One recorded session played closed loop (the ``next_step`` / ``observe`` interface).

    After each ``next_step`` the player asks ``children_due()``: the subagents to start
    now and the ones to wait for (after ``tool_pause_s``, before ``think_s``) before the
    step is sent. After the last step, ``children_due()`` gives the subagents the last
    answer spawned; the player waits for every child before the session ends.
    """

    def __init__(
        self,
        trace: AgentTrace,
        name: str,
        *,
        index: int,
        synth: PromptSynth,
        options: ReplayOptions,
    ) -> None:
        self.trace, self.name, self.synth, self.o = trace, name, synth, options
        self.rounds = trace.sessions[name]
        self.trace_index = index  # the root session's place in the trace
        self.class_name = TRACE_CLASS
        self.session_id = name
        self.parent_session = trace.sessions[name][0].parent
        self.steps_planned = len(self.rounds)
        self.steps_done = 0
        self.outcome: str | None = None
        self.reason: str | None = None
        self.prefix_beyond_prompt = 0  # rounds whose recorded prefix reached into an answer
        self._k = 0
        self._context: list[Segment] = []  # the previous prompt, then its answer stand-in
        self._errors = 0
        self._due: tuple[list[ChildStart], list[str]] = ([], [])
        first = self.rounds[0]
        # one system prompt per agent and model (a subagent has its own), as they are cached
        shared = stable_key("agent-shared", first.model or "", first.parent is not None)
        self._shared: Segment = (shared, max(r.prefix_tokens for r in self.rounds[:1]))
        self._kids = self._children()

    def _children(self) -> dict[int, list[str]]:
        """Children by the slot that starts them: 0 before round 0, k+1 after round k."""
        slots: dict[int, list[str]] = {}
        for c in self.trace.children(self.name):
            sr = self.trace.sessions[c][0].spawn_round
            slot = 0 if sr is None else min(sr + 1, len(self.rounds))
            slots.setdefault(slot, []).append(c)
        return slots

    def _child(self, name: str, slot: int) -> ChildStart:
        first = self.trace.sessions[name][0]
        since = self.rounds[0].t_start if slot == 0 else self.rounds[slot - 1].t_end
        sess = AgentSession(
            self.trace, name, index=self.trace_index, synth=self.synth, options=self.o
        )
        return ChildStart(sess, scaled_gap(first.t_start - since, self.o))

    def children_due(self) -> tuple[list[ChildStart], list[str]]:
        """Subagents to start now, and subagents the step just planned waits for."""
        return self._due

    def _prompt(self, r: AgentRound) -> list[Segment]:
        base = self._context if self._k else [self._shared]
        prefix = min(r.prefix_tokens, tokens(base))
        if self._k and r.prefix_tokens > tokens(base) - self.rounds[self._k - 1].output_tokens:
            self.prefix_beyond_prompt += 1
        fresh = (
            stable_key(self.o.seed, "agent", self.name, r.round, "append"),
            r.input_tokens - prefix,
        )
        return [*take(base, prefix), fresh]

    def next_step(self) -> StepRequest | None:
        """Round k (closed loop: called after round k-1's answer was observed), or None."""
        slot = self._k
        starts = [self._child(c, slot) for c in self._kids.get(slot, [])]
        if self._k >= len(self.rounds) or self.outcome is not None:
            self._due = (starts if self.outcome is None else [], [])
            if self.outcome is None:
                self.outcome = "failed" if self._errors else "completed"
                self.reason = f"{self._errors} round(s) failed" if self._errors else None
            return None
        r = self.rounds[self._k]
        joins = [
            c
            for c in self.trace.children(self.name)
            if self.trace.sessions[c][0].join_round == r.round
        ]
        self._due = (starts, joins)
        segs = self._prompt(r)
        answer = (stable_key(self.o.seed, "agent", self.name, r.round, "answer"), r.output_tokens)
        self._context = [*segs, answer]
        self._k += 1
        if r is self.rounds[0]:
            return self._step(r, segs, 0.0, 0.0)
        prev = self.rounds[self._k - 2]
        # a tool that ran a subagent is waited for by joining it, not by its recorded time
        tool_wait = max((t.wait_s for t in prev.tools if t.subagent is None), default=0.0)
        return self._step(r, segs, scaled_gap(tool_wait, self.o), scaled_gap(r.think_s, self.o))

    def _step(
        self, r: AgentRound, segs: list[Segment], tool_s: float, think_s: float
    ) -> StepRequest:
        out = max(1, r.output_tokens)
        opts = BodyOptions(model=self.o.model, max_tokens=out, stream=True, ignore_eos=True)
        synth = self.synth

        def render() -> bytes:
            return completions_body("".join(synth.text(k, n) for k, n in segs), opts)

        return StepRequest(
            step=self._k,
            attempt=0,
            think_s=think_s,
            tool_pause_s=tool_s,
            expects_tool_call=bool(r.tools),
            consumes_tool_result=r.appended_tool_results > 0,
            planned_tool=None,
            max_tokens=out,
            endpoint="completions",
            path=PATHS["completions"],
            stream=True,
            timeout_s=self.o.timeout_s,
            stall_timeout_s=self.o.stall_timeout_s,
            user_class=TRACE_CLASS,
            session_id=self.session_id,
            _render=render,
            prompt_tokens_est=r.input_tokens,
            cacheable_tokens_est=r.prefix_tokens,
        )

    def observe(self, record: RequestRecord) -> None:
        """A round's answer: counted; a failed round does not end the session (it went on)."""
        if record.status == STATUS_CANCELLED:
            self.outcome, self.reason = "cancelled", "cancelled"
        elif record.ok:
            self.steps_done += 1
        else:
            self._errors += 1


def root_sessions(
    trace: AgentTrace, synth: PromptSynth, options: ReplayOptions
) -> Callable[[int], AgentSession]:
    """A factory: root session k (in ``trace.roots`` order) as a fresh AgentSession."""
    roots = trace.roots

    def make(k: int) -> AgentSession:
        return AgentSession(trace, roots[k], index=k, synth=synth, options=options)

    return make
