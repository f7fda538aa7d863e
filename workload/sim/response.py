"""One request's output on the wire: SSE events as the engine emits tokens, or one JSON
body at the end, in vLLM 0.32's shapes, with the injected stream faults applied.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from workload.sim.config import SimConfig
from workload.sim.engine import FINISHED, EngineRequest
from workload.sim.http11 import Exchange
from workload.sim.wire import DONE, ChunkFormatter, timing_metrics


@dataclass(slots=True)
class Plan:
    """What the simulated model will say for one request."""

    pieces: list[str]
    finish: str  # stop | length (engine reason)
    tool_name: str | None = None
    tool_id: str = ""
    forced: bool = False  # tool_choice named or "required"
    named: bool = False  # tool_choice names the function
    reasoning: int = 0  # the first tokens are reasoning (streamed in cfg.reasoning_field)
    # further calls of a parallel answer: (the piece that starts it, name, id); each call's
    # first piece carries its header, the ones after it its arguments
    more_calls: tuple[tuple[int, str, str], ...] = ()

    def calls(self) -> list[tuple[int, int, str, str]]:
        """(first piece, end piece, name, id) of each tool call, in order."""
        starts = [(0, self.tool_name or "", self.tool_id), *self.more_calls]
        ends = [s for s, _, _ in starts[1:]] + [len(self.pieces)]
        return [(s, e, n, i) for (s, n, i), e in zip(starts, ends, strict=True)]


class Response:
    """Delivers one request's output: streamed as SSE events or collected into one body."""

    def __init__(
        self,
        cfg: SimConfig,
        fingerprint: str,
        abort: Callable[[EngineRequest], None],
        ex: Exchange,
        req: EngineRequest,
        plan: Plan,
        *,
        chat: bool,
        stream: bool,
        include_usage: bool,
        fault: str | None,
        rng: random.Random,
        rid_core: str,
    ):
        self.cfg = cfg
        self.fingerprint = fingerprint
        self._abort = abort
        self.ex: Exchange = ex
        self.req: EngineRequest = req
        self.plan: Plan = plan
        self.chat = chat
        self.stream = stream
        self.include_usage = include_usage
        self.fault = fault
        self.events = 0
        self.rid_core = rid_core
        self.fmt = ChunkFormatter(
            chat, req.request_id, int(time.time()), cfg.model, fingerprint, include_usage
        )
        # the event index where a stream fault strikes
        expected = max(1, req.output_len // (1 + cfg.spec_k))
        self.fault_at = rng.randint(1, max(1, expected // 2)) if fault else -1
        self._queue: list[bytes | None] | None = None
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def begin(self) -> None:
        """Send what goes out before the first token."""
        if not self.stream:
            return
        self.ex.start_stream(
            200, "text/event-stream; charset=utf-8", [("x-request-id", self.rid_core)]
        )
        if self.fault in ("slow", "stall"):
            self._queue = []
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._paced())
        if self.chat:
            self._emit(self.fmt.role())

    def client_gone(self) -> None:
        """The connection closed before the response ended: abort in the engine."""
        if self.req.status != FINISHED:
            self._abort(self.req)
        if self._task is not None:
            self._task.cancel()

    # -- engine callback ---------------------------------------------------------------------
    def on_tokens(self, n: int) -> None:
        """`n` new tokens were produced (the engine already counted them in num_output)."""
        req = self.req
        finished = req.status == FINISHED
        if not self.stream:
            if finished:
                self._respond_whole()
            return
        start = req.num_output - n
        finish = self._finish_reason() if finished else None
        if self.plan.tool_name is not None:
            self._emit_tool(start, n, finish)
        elif start < self.plan.reasoning:
            self._emit_reasoning(start, n, finish)
        else:
            self._emit(self.fmt.text("".join(self.plan.pieces[start : start + n]), finish))
        if finished:
            if self.include_usage:
                self._emit(self.fmt.usage(self._usage(), self._metrics()))
            self._emit(DONE)
            self._emit(None)

    def _finish_reason(self) -> str:
        # vLLM: "tool_calls" for auto/required calls, "stop" for a named tool_choice
        plan = self.plan
        if plan.tool_name is not None and not plan.named and self.req.finish_reason == "stop":
            return "tool_calls"
        return self.req.finish_reason

    def _emit_tool(self, start: int, n: int, finish: str | None) -> None:
        deltas: list[dict] = []
        end = start + n
        for k, (s, e, name, tool_id) in enumerate(self.plan.calls()):
            if s >= end or e <= start:
                continue
            if start <= s:
                deltas.append({"content": None, "tool_calls": [{"id": tool_id, "type": "function", "index": k, "function": {"name": name}}]})  # fmt: skip
            lo, hi = max(start, s + 1), min(end, e)
            if lo < hi:
                args = "".join(self.plan.pieces[lo:hi])
                deltas.append({"content": None, "tool_calls": [{"index": k, "function": {"arguments": args}}]})  # fmt: skip
        for i, delta in enumerate(deltas):
            self._emit(self.fmt.delta(delta, finish if i == len(deltas) - 1 else None))

    def _emit_reasoning(self, start: int, n: int, finish: str | None) -> None:
        """Tokens that start in the reasoning part: reasoning first, then any content."""
        pieces, cut = self.plan.pieces, self.plan.reasoning
        end = min(start + n, cut)
        delta = {self.cfg.reasoning_field: "".join(pieces[start:end])}
        if start + n <= cut:
            self._emit(self.fmt.delta(delta, finish))
            return
        self._emit(self.fmt.delta(delta, None))
        self._emit(self.fmt.text("".join(pieces[end : start + n]), finish))

    def _emit(self, data: bytes | None) -> None:
        """Send one SSE event (None ends the stream), applying the injected fault."""
        if self.ex.done:
            return
        if data is not None and data is not DONE:
            self.events += 1
            if self.events == self.fault_at:
                if self.fault == "reset":
                    self.ex.reset()
                    self._abort(self.req)
                    return
                if self.fault == "malformed":
                    self.ex.send(
                        b'data: {"id": "malformed", "choices": [{"delta": {"content": "\n\n'
                    )
        if self._queue is not None:
            self._queue.append(data)
            self._ready.set()  # type: ignore[union-attr]
            return
        if data is None:
            self.ex.end_stream()
        else:
            self.ex.send(data)

    async def _paced(self) -> None:
        """Writer for slow-drip and stall faults: the engine runs on, delivery lags."""
        cfg = self.cfg
        queue, ready = self._queue, self._ready
        assert queue is not None and ready is not None
        sent = 0
        while True:
            if not queue:
                ready.clear()
                await ready.wait()
                continue
            if self.fault == "slow":
                await asyncio.sleep(cfg.fault_drip_ms / 1000.0)
            elif sent == self.fault_at:
                await asyncio.sleep(cfg.fault_stall_s)
            data = queue.pop(0)
            sent += 1
            if data is None:
                self.ex.end_stream()
                return
            self.ex.send(data)

    # -- bodies ----------------------------------------------------------------------------------
    def _usage(self) -> dict:
        """vLLM 0.32's usage object. Streams leave out unset fields; whole bodies carry them
        as null. Chat fills `created_cache_tokens` (prompt tokens this request wrote to the
        prefix cache: its full prompt blocks not already cached); completions leave it unset."""
        req, cfg = self.req, self.cfg
        whole = not self.stream
        usage: dict = {
            "prompt_tokens": req.prompt_len,
            "total_tokens": req.prompt_len + req.num_output,
            "completion_tokens": req.num_output,
        }
        cached = max(0, req.cached_tokens)
        if cfg.enable_prompt_tokens_details:
            details: dict = {"cached_tokens": cached}
            if self.chat:
                created = 0
                if cfg.enable_prefix_caching:
                    bs = cfg.block_size
                    created = max(0, (req.prompt_len // bs) * bs - cached)
                details["created_cache_tokens"] = created
            elif whole:
                details["created_cache_tokens"] = None
            if whole:
                details["multimodal_tokens"] = None
            usage["prompt_tokens_details"] = details
        elif whole:
            usage["prompt_tokens_details"] = None
        if self.chat and cfg.reasoning_field:  # vLLM: with a reasoning parser
            usage["completion_tokens_details"] = {
                "reasoning_tokens": min(self.plan.reasoning, req.num_output)
            }
        elif whole:
            usage["completion_tokens_details"] = None
        return usage

    def _metrics(self) -> dict | None:
        cfg = self.cfg
        out: dict | None = None
        if cfg.enable_per_request_metrics:
            out = timing_metrics(self.req)
        if cfg.spec_k and cfg.spec_metrics != "none":
            out = out if out is not None else {}
            spec = self.req.spec_summary(cfg.spec_k)
            if not self.stream and "per_step_accepted" not in spec:
                spec["per_step_accepted"] = spec["per_step_drafted"] = None  # summary mode
            out["speculative_decoding"] = spec
        return out

    def _respond_whole(self) -> None:
        cfg = self.cfg
        req, plan = self.req, self.plan
        cut = min(plan.reasoning, req.num_output)
        text = "".join(plan.pieces[cut : req.num_output])
        finish = self._finish_reason()
        body: dict
        if self.chat:
            message: dict = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
            }
            if plan.tool_name is not None:
                args = "".join(plan.pieces[1 : min(req.num_output, plan.calls()[0][1])])
                if req.finish_reason == "length":
                    # cut off: vLLM's parser finds no complete call, the raw text comes back
                    message["content"] = (
                        '<tool_call>\n{"name": ' + json.dumps(plan.tool_name) + ', "arguments": '
                    ) + args
                else:
                    # named/required: content "" beside the call; auto: null
                    message["content"] = "" if plan.forced else None
                    message["tool_calls"] = [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": "".join(plan.pieces[s + 1 : e])}}
                        for s, e, n, i in plan.calls()
                    ]  # fmt: skip
            message["reasoning"] = "".join(plan.pieces[:cut]) if cut else None
            if cfg.reasoning_field == "reasoning_content":
                message["reasoning_content"] = message.pop("reasoning")
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "stop_reason": None, "token_ids": None, "routed_experts": None}  # fmt: skip
            body = {
                "id": req.request_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": cfg.model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": self.fingerprint,
                "usage": self._usage(),
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "prompt_text": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None, "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None}  # fmt: skip
            body = {
                "id": req.request_id,
                "object": "text_completion",
                "created": int(time.time()),
                "model": cfg.model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": self.fingerprint,
                "usage": self._usage(),
                "kv_transfer_params": None,
                "ec_transfer_params": None,
            }
        metrics = self._metrics()
        if metrics is not None:
            body["metrics"] = metrics
        data = orjson.dumps(body)
        headers = [("x-request-id", self.rid_core)]
        fault = self.fault
        if fault == "reset":
            self.ex.reset()
        elif fault == "malformed":
            self.ex.respond(200, data[: len(data) // 2], headers=headers)
        elif fault in ("stall", "slow"):
            delay = cfg.fault_stall_s if fault == "stall" else cfg.fault_drip_ms / 1000.0
            asyncio.get_running_loop().call_later(delay, self.ex.respond, 200, data, "application/json", headers)  # fmt: skip
        else:
            self.ex.respond(200, data, headers=headers)
