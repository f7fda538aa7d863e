"""Replaying a trace: the context-length check, the per-worker schedule, one-step sessions.

Each trace request becomes its own one-step session (``TraceSession``): a streamed
/v1/completions request whose prompt is exactly ``input_tokens`` tokens and whose
``max_tokens`` is ``output_tokens`` (``ignore_eos`` so the length holds). Mooncake
requests get their prompt from ``BlockSynth`` (equal hash ids, byte-identical blocks,
nothing before the first block), so a prefix cache sees the reuse the trace describes;
requests without hash ids (Azure, run requests) get per-request synthetic text, which
shares nothing. Requests of one Mooncake conversation are not chained into multi-step
sessions: the trace already holds each turn's full prompt (its hash ids repeat the
earlier turns' blocks), so replaying each request on its own keeps the reuse exactly.

``fit_to_context`` is the rule for requests longer than the server's ``max_model_len``
(input + output tokens): they are counted and, only when asked, clipped (output first
down to half the context, then the input's tail blocks) so every request fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from workload.measure.records import STATUS_CANCELLED, RequestRecord
from workload.plan.payloads import PATHS, BodyOptions, completions_body
from workload.plan.prompts import stable_key, synth_for
from workload.plan.steps import StepRequest
from workload.plan.tokens import Tokenizer
from workload.plan.traces._blocks import BlockSynth
from workload.plan.traces._read import BLOCK_TOKENS, TraceRequest

TRACE_CLASS = "trace"  # the user_class of every replayed request
TRACE_STREAM = "trace"  # the arrival stream name in sessions.jsonl / dropped.jsonl


@dataclass(frozen=True, slots=True)
class ContextFit:
    """How a trace fits the server's context: requests over it, the largest, clipped or not."""

    max_model_len: int | None
    too_long: int  # requests with input + output > max_model_len
    largest: int  # the largest input + output of the trace (tokens)
    clipped: bool  # whether the too-long requests were clipped to fit

    def message(self, source: str) -> str:
        """One line saying what does not fit (empty when everything fits)."""
        if not self.too_long:
            return ""
        return (
            f"{source}: {self.too_long} trace request(s) exceed the server's max_model_len "
            f"{self.max_model_len} (input + output tokens; the largest is {self.largest})"
        )


def clip_request(
    r: TraceRequest, max_model_len: int, block_tokens: int = BLOCK_TOKENS
) -> TraceRequest:
    """``r`` cut to fit: output down to at most half the context, then the input's tail.

    The input keeps its leading blocks (a prefix of the original prompt), so prefix reuse
    between requests is kept as far as the shorter prompts reach.
    """
    if r.input_tokens + r.output_tokens <= max_model_len:
        return r
    out = max(1, min(r.output_tokens, max_model_len // 2))
    inp = max(1, min(r.input_tokens, max_model_len - out))
    ids = r.hash_ids[: math.ceil(inp / block_tokens)] if r.hash_ids is not None else None
    return replace(r, input_tokens=inp, output_tokens=out, hash_ids=ids)


def fit_to_context(
    requests: Sequence[TraceRequest], max_model_len: int | None, *, clip: bool
) -> tuple[list[TraceRequest], ContextFit]:
    """The requests to replay (clipped when ``clip``) and how they fit ``max_model_len``."""
    reqs = list(requests)
    largest = max((r.input_tokens + r.output_tokens for r in reqs), default=0)
    if not max_model_len:
        return reqs, ContextFit(None, 0, largest, False)
    too_long = sum(1 for r in reqs if r.input_tokens + r.output_tokens > max_model_len)
    if clip and too_long:
        reqs = [clip_request(r, max_model_len) for r in reqs]
    return reqs, ContextFit(max_model_len, too_long, largest, clip and bool(too_long))


class TraceSchedule:
    """A trace's replay offsets as an arrival schedule: request k goes to worker k % N."""

    def __init__(self, offsets_s: Sequence[float]) -> None:
        self.offsets_s = list(offsets_s)

    def iter_worker(
        self,
        worker: int,
        n_workers: int,
        until_s: float | None = None,
        segments: object = None,
    ) -> Iterator[tuple[int, float]]:
        """(k, offset) of this worker's share, in order, up to ``until_s``."""
        for k in range(worker, len(self.offsets_s), max(1, n_workers)):
            t = self.offsets_s[k]
            if until_s is not None and t > until_s:
                return
            yield k, t


class TracePrompts:
    """Prompt text of each trace request: hash-id blocks, or per-request synthetic text."""

    def __init__(self, tokenizer: Tokenizer, *, seed: int) -> None:
        self.blocks = BlockSynth(tokenizer, seed=seed)
        self.synth = synth_for(tokenizer)
        self.seed = seed

    def prompt(self, k: int, r: TraceRequest) -> str:
        """Exactly ``r.input_tokens`` tokens (for the offline tokenizer's vocabulary)."""
        if r.hash_ids is not None:
            return self.blocks.prompt(r.hash_ids, r.input_tokens)
        return self.synth.text(stable_key(self.seed, "trace", k), r.input_tokens)


class TraceSession:
    """Trace request k as a one-step session (the interface ``play`` drives)."""

    def __init__(
        self,
        k: int,
        request: TraceRequest,
        *,
        model: str,
        prompt: Callable[[], str],
        timeout_s: float = 600.0,
        stall_timeout_s: float = 120.0,
    ) -> None:
        self.trace_index = k
        self.request = request
        self.class_name = TRACE_CLASS
        self.session_id = f"trace-{k}"
        self.steps_planned = 1
        self.steps_done = 0
        self.outcome: str | None = None
        self.reason: str | None = None
        self._model, self._prompt = model, prompt
        self._timeouts = (timeout_s, stall_timeout_s)
        self._sent = False

    def next_step(self) -> StepRequest | None:
        """The one request, once; then None."""
        if self._sent or self.outcome is not None:
            return None
        self._sent = True
        r = self.request
        opts = BodyOptions(
            model=self._model, max_tokens=r.output_tokens, stream=True, ignore_eos=True
        )
        prompt = self._prompt

        def render() -> bytes:
            return completions_body(prompt(), opts)

        return StepRequest(
            step=1,
            attempt=0,
            think_s=0.0,
            tool_pause_s=0.0,
            expects_tool_call=False,
            consumes_tool_result=False,
            planned_tool=None,
            max_tokens=r.output_tokens,
            endpoint="completions",
            path=PATHS["completions"],
            stream=True,
            timeout_s=self._timeouts[0],
            stall_timeout_s=self._timeouts[1],
            user_class=TRACE_CLASS,
            session_id=self.session_id,
            _render=render,
            prompt_tokens_est=r.input_tokens,
        )

    def observe(self, record: RequestRecord) -> None:
        """The request's record ends the session (no retries: the trace sent it once)."""
        if record.status == STATUS_CANCELLED:
            self.outcome, self.reason = "cancelled", "cancelled"
        elif record.ok:
            self.steps_done = 1
            self.outcome = "completed"
        else:
            self.outcome, self.reason = "failed", record.error_kind or "error"
