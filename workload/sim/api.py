"""The OpenAI-compatible routes: parse and validate like vLLM, plan the output, hand the
request to the engine, and stream or collect what the engine emits.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from workload.sim.engine import FINISHED, EngineRequest, QueueFull
from workload.sim.http11 import Exchange
from workload.sim.wire import DONE, ChunkFormatter, error_body, timing_metrics

if TYPE_CHECKING:
    from workload.sim.server import SimServer


class BadRequest(Exception):
    """A 4xx answer with vLLM's error JSON."""

    def __init__(
        self, status: int, message: str, param: str | None = None, err_type: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.param = param
        self.err_type = err_type


@dataclass(slots=True)
class Plan:
    """What the simulated model will say for one request."""

    pieces: list[str]
    finish: str  # stop | length (engine reason)
    tool_name: str | None = None
    tool_id: str = ""
    forced: bool = False  # tool_choice named or "required"
    named: bool = False  # tool_choice names the function


def _int(body: dict, name: str, default: int | None, lo: int | None = None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(400, f"{name} must be an integer, got {value!r}.", name)
    if lo is not None and value < lo:
        raise BadRequest(400, f"{name} must be at least {lo}, got {value}.", name)
    return value


def _num(body: dict, name: str, lo: float, hi: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise BadRequest(400, f"{name} must be a number in [{lo}, {hi}], got {value!r}.", name)


def _json_invalid(raw: bytes, err: orjson.JSONDecodeError) -> BadRequest:
    """vLLM's (pydantic's) answer to an unparseable body: type "Bad Request", `param` the
    location `body.<char offset>`, the stdlib decoder's reason in the message."""
    pos, reason = err.pos, err.msg
    try:
        json.loads(raw)
    except json.JSONDecodeError as e:  # same offsets as vLLM reports; nicer reasons
        pos, reason = e.pos, e.msg
    except (UnicodeDecodeError, ValueError):
        pass
    loc = f"body.{pos}"
    detail = f"'loc': '{loc}', 'msg': 'JSON decode error', 'input': '<dict of 0 items>'"
    message = (
        f"1 validation error:\n  {{'type': 'json_invalid', {detail}, "
        f"'ctx': {{'error': '{reason}'}}}}"
    )
    return BadRequest(400, message, loc, "Bad Request")


class SimApp:
    """Routes requests; owns nothing but counters and RNGs (the server owns the engine)."""

    def __init__(self, server: SimServer, seed: int):
        self.server = server
        self.cfg = server.cfg
        self.content = server.content
        self.seed = seed
        self._count = 0
        self._fault_rng = random.Random(seed * 7919 + 17)
        self._faults = sorted(self.cfg.faults.items())
        self.fingerprint = self.cfg.fingerprint()
        self.routes = {
            ("GET", "/health"): self.health,
            ("GET", "/ping"): self.health,
            ("GET", "/version"): self.version,
            ("GET", "/v1/models"): self.models,
            ("GET", "/metrics"): self.metrics,
            ("POST", "/v1/chat/completions"): self.chat,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/tokenize"): self.tokenize,
            ("POST", "/detokenize"): self.detokenize,
        }
        if self.cfg.dev_mode:
            self.routes[("GET", "/server_info")] = self.server_info

    # -- dispatch ------------------------------------------------------------------------------
    def handle(self, ex: Exchange) -> None:
        """Entry point from the HTTP layer."""
        req = ex.request
        route = self.routes.get((req.method, req.path))
        if route is None:
            known = any(path == req.path for _, path in self.routes)
            status = 405 if known else 404
            detail = b"Method Not Allowed" if known else b"Not Found"
            ex.respond(status, b'{"detail":"%b"}' % detail)
            return
        try:
            route(ex)
        except BadRequest as e:
            ex.respond(e.status, error_body(e.status, str(e), e.param, e.err_type))

    def _json(self, ex: Exchange) -> dict:
        try:
            body = orjson.loads(ex.request.body)
        except orjson.JSONDecodeError as e:
            raise _json_invalid(ex.request.body, e) from None
        if not isinstance(body, dict):
            raise BadRequest(400, "Request body must be a JSON object.")
        return body

    def _check_model(self, body: dict) -> None:
        model = body.get("model")
        if model is not None and model != self.cfg.model:
            raise BadRequest(404, f"The model `{model}` does not exist.", "model")

    # -- simple endpoints ----------------------------------------------------------------------
    def health(self, ex: Exchange) -> None:
        ex.respond(200, b"", "application/json")

    def version(self, ex: Exchange) -> None:
        ex.respond(200, orjson.dumps({"version": self.cfg.version}))

    def models(self, ex: Exchange) -> None:
        cfg = self.cfg
        card = {
            "id": cfg.model,
            "object": "model",
            "created": int(self.server.started_at),
            "owned_by": "vllm",
            "root": cfg.model_root,
            "parent": None,
            "max_model_len": cfg.max_model_len,
            "permission": [
                {
                    "id": "modelperm-agentloadsim",
                    "object": "model_permission",
                    "created": int(self.server.started_at),
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        ex.respond(200, orjson.dumps({"object": "list", "data": [card]}))

    def metrics(self, ex: Exchange) -> None:
        ex.respond(
            200, self.server.render_metrics().encode(), "text/plain; version=1.0.0; charset=utf-8"
        )

    def server_info(self, ex: Exchange) -> None:
        cfg = self.cfg
        env = {"VLLM_SERVER_DEV_MODE": "1"}
        if cfg.model_runner == "v2":
            env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        info = {
            "vllm_config": (
                f"model={cfg.model!r}, max_model_len={cfg.max_model_len}, "
                f"max_num_seqs={cfg.max_num_seqs}, max_num_batched_tokens="
                f"{cfg.max_num_batched_tokens}, block_size={cfg.block_size}, "
                f"enable_prefix_caching={cfg.enable_prefix_caching}, "
                f"speculative_config={{'num_speculative_tokens': {cfg.spec_k}}}, "
                f"scheduling_policy={cfg.scheduling_policy!r}"
            ),
            "vllm_env": env,
            "agentload_sim": {"preset": cfg.preset, "model_runner": cfg.model_runner},
        }
        ex.respond(200, orjson.dumps(info))

    def tokenize(self, ex: Exchange) -> None:
        body = self._json(ex)
        self._check_model(body)
        if "messages" in body:
            msgs = body["messages"]
            if not isinstance(msgs, list):
                raise BadRequest(400, "messages must be a list.", "messages")
            try:
                tokens = self.content.chat_prompt(
                    msgs, body.get("tools"), bool(body.get("add_generation_prompt", True))
                )
            except ValueError as e:
                raise BadRequest(400, str(e), "messages") from None
        elif isinstance(body.get("prompt"), str):
            tokens = self.content.text_prompt(body["prompt"])
        else:
            raise BadRequest(400, "Either prompt (string) or messages must be given.", "prompt")
        out = {
            "count": len(tokens),
            "max_model_len": self.cfg.max_model_len,
            "tokens": tokens,
            "token_strs": None,
        }
        ex.respond(200, orjson.dumps(out))

    def detokenize(self, ex: Exchange) -> None:
        body = self._json(ex)
        self._check_model(body)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            raise BadRequest(400, "tokens must be a list of integers.", "tokens")
        try:
            text = self.content.tok.decode(tokens)
        except Exception:  # noqa: BLE001 - tiktoken raises KeyError/ValueError for bad ids
            raise BadRequest(400, "tokens contain ids outside the vocabulary.", "tokens") from None
        ex.respond(200, orjson.dumps({"prompt": text}))

    # -- generation ------------------------------------------------------------------------------
    def chat(self, ex: Exchange) -> None:
        self._generate(ex, chat=True)

    def completions(self, ex: Exchange) -> None:
        self._generate(ex, chat=False)

    def _generate(self, ex: Exchange, chat: bool) -> None:
        cfg = self.cfg
        body = self._json(ex)
        self._check_model(body)
        tools = body.get("tools") if chat else None
        tool_choice = body.get("tool_choice", "auto" if tools else "none") if chat else "none"
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise BadRequest(400, "messages must be a non-empty list.", "messages")
            if tools is not None and not isinstance(tools, list):
                raise BadRequest(400, "tools must be a list.", "tools")
            try:
                prompt = self.content.chat_prompt(msgs, tools or None)
            except ValueError as e:
                raise BadRequest(400, str(e), "messages") from None
        else:
            p = body.get("prompt")
            if isinstance(p, list) and len(p) == 1:
                p = p[0]
            if isinstance(p, str):
                prompt = self.content.text_prompt(p)
            elif isinstance(p, list) and p and all(isinstance(t, int) for t in p):
                prompt = list(p)
            else:
                raise BadRequest(
                    400, "prompt must be a string or a list of token ids (one prompt).", "prompt"
                )
        named = self._check_tool_choice(tool_choice, tools)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest(400, "stream must be a boolean.", "stream")
        n = _int(body, "n", 1, 1)
        if n != 1:
            raise BadRequest(400, "n > 1 is not supported by agentload-sim.", "n")
        _num(body, "temperature", 0.0, 2.0)
        _num(body, "top_p", 1e-9, 1.0)
        max_tokens = _int(body, "max_completion_tokens", None, 1)
        if max_tokens is None:
            max_tokens = _int(body, "max_tokens", None, 1)
        min_tokens = _int(body, "min_tokens", 0, 0) or 0
        priority = _int(body, "priority", 0) or 0
        if priority and cfg.scheduling_policy != "priority":
            raise BadRequest(400, "Priority scheduling is not enabled.", "priority")
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise BadRequest(400, "cache_salt must be a non-empty string.", "cache_salt")
        ignore_eos = bool(body.get("ignore_eos", False))
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise BadRequest(400, "stream_options must be an object.", "stream_options")
        include_usage = bool(opts.get("include_usage", False))

        plen, limit = len(prompt), cfg.max_model_len
        if plen >= limit:
            raise BadRequest(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {plen} input tokens, which exceeds this limit even without any "
                f"output tokens. Please reduce the length of the input prompt. "
                f"(parameter=input_tokens, value={plen})",
                "input_tokens",
            )
        if max_tokens is not None and max_tokens > limit:
            raise BadRequest(
                400,
                f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please "
                f"request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
                "max_tokens",
            )
        if max_tokens is None:
            max_tokens = limit - plen
        elif plen + max_tokens > limit:
            raise BadRequest(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has {plen} "
                f"input tokens ({max_tokens} > {limit} - {plen}).",
                "max_tokens",
            )
        if min_tokens > max_tokens:
            raise BadRequest(
                400, "min_tokens must be less than or equal to max_tokens.", "min_tokens"
            )

        self._count += 1
        req_seed = (self.seed * 1_000_003 + self._count) & 0xFFFFFFFFFFFF
        rid_hdr = ex.request.headers.get("x-request-id")
        rid_core = rid_hdr or f"{req_seed:012x}{self._count:08x}"
        rid = ("chatcmpl-" if chat else "cmpl-") + rid_core

        fault = self._draw_fault()
        if fault in ("429", "500", "503"):
            status = int(fault)
            ex.respond(
                status,
                error_body(status, f"injected fault: HTTP {status}"),
                headers=[("x-request-id", rid_core)],
            )
            return

        rng = random.Random(req_seed)
        rep = self.content.repetitiveness(prompt)
        plan = self._plan(rng, rep, tools, tool_choice, named, max_tokens, min_tokens, ignore_eos)
        structured = tool_choice == "required" or named is not None
        k = cfg.spec_k
        ereq = EngineRequest(
            request_id=rid,
            prompt=prompt,
            output_len=min(len(plan.pieces), max_tokens),
            finish_reason=plan.finish,
            priority=priority,
            cache_salt=salt,
            accept_rate=min(0.97, cfg.spec_accept_base + cfg.spec_accept_rep_gain * rep),
            spec_enabled=k > 0 and not (cfg.spec_fallback_structured and structured),
            seed=req_seed,
            detailed_spec=cfg.spec_metrics == "detailed",
        )
        sink = Response(self, ex, ereq, plan, chat, stream, include_usage, fault, rng, rid_core)
        ereq.sink = sink
        try:
            self.server.submit(ereq)
        except QueueFull as e:
            ex.respond(503, error_body(503, f"Server is overloaded: {e}."))
            return
        ex.on_close = sink.client_gone
        sink.begin()

    def _check_tool_choice(self, tool_choice: object, tools: list | None) -> dict | None:
        if isinstance(tool_choice, str):
            if tool_choice not in ("none", "auto", "required"):
                raise BadRequest(400, f"Invalid tool_choice {tool_choice!r}.", "tool_choice")
            if tool_choice == "required" and not tools:
                raise BadRequest(
                    400, "When using `tool_choice`, `tools` must be set.", "tool_choice"
                )
            return None
        if isinstance(tool_choice, dict):
            name = (tool_choice.get("function") or {}).get("name")
            for tool in tools or []:
                if isinstance(tool, dict) and (tool.get("function") or {}).get("name") == name:
                    return tool
            raise BadRequest(400, f"Tool '{name}' has not been passed in `tools`.", "tool_choice")
        raise BadRequest(400, "tool_choice must be a string or an object.", "tool_choice")

    def _plan(
        self, rng, rep, tools, tool_choice, named, max_tokens, min_tokens, ignore_eos
    ) -> Plan:
        cfg = self.cfg
        call = None
        if tools and tool_choice != "none":
            if named is not None:
                call = named
            elif tool_choice == "required" or rng.random() < cfg.tool_call_prob:
                valid = [t for t in tools if isinstance(t, dict)]
                call = rng.choice(valid) if valid else None
        if call is not None:
            malformed = rng.random() < cfg.malformed_tool_rate
            name, frags = self.content.tool_call(rng, call, malformed)
            pieces = [""] + frags  # the first token carries the call header (name)
            finish = "length" if len(pieces) > max_tokens else "stop"
            tool_id = f"chatcmpl-tool-{rng.getrandbits(128):032x}"
            forced = named is not None or tool_choice == "required"
            return Plan(pieces, finish, name, tool_id, forced, named is not None)
        if ignore_eos:
            n = max_tokens
        else:
            sigma = cfg.output_len_sigma
            mu = math.log(max(1, cfg.output_len_mean)) - sigma * sigma / 2
            n = max(1, min_tokens, int(rng.lognormvariate(mu, sigma)))
        finish = "length" if n >= max_tokens else "stop"
        n = min(n, max_tokens)
        return Plan(self.content.text_pieces(rng, n, rep), finish)

    def _draw_fault(self) -> str | None:
        if not self._faults:
            return None
        u = self._fault_rng.random()
        acc = 0.0
        for kind, rate in self._faults:
            acc += rate
            if u < acc:
                return kind
        return None


class Response:
    """Delivers one request's output: streamed as SSE events or collected into one body."""

    def __init__(self, app, ex, req, plan, chat, stream, include_usage, fault, rng, rid_core):
        self.app: SimApp = app
        self.ex: Exchange = ex
        self.req: EngineRequest = req
        self.plan: Plan = plan
        self.chat = chat
        self.stream = stream
        self.include_usage = include_usage
        self.fault = fault
        self.events = 0
        self.rid_core = rid_core
        cfg = app.cfg
        self.fmt = ChunkFormatter(
            chat, req.request_id, int(time.time()), cfg.model, app.fingerprint, include_usage
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
            self.app.server.abort(self.req)
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
        plan = self.plan
        if start == 0:
            head = {"content": None, "tool_calls": [{"id": plan.tool_id, "type": "function", "index": 0, "function": {"name": plan.tool_name}}]}  # fmt: skip
            if n == 1:
                self._emit(self.fmt.delta(head, finish))
                return
            self._emit(self.fmt.delta(head, None))
            start, n = 1, n - 1
        args = "".join(plan.pieces[start : start + n])
        delta = {"content": None, "tool_calls": [{"index": 0, "function": {"arguments": args}}]}
        self._emit(self.fmt.delta(delta, finish))

    def _emit(self, data: bytes | None) -> None:
        """Send one SSE event (None ends the stream), applying the injected fault."""
        if self.ex.done:
            return
        if data is not None and data is not DONE:
            self.events += 1
            if self.events == self.fault_at:
                if self.fault == "reset":
                    self.ex.reset()
                    self.app.server.abort(self.req)
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
        cfg = self.app.cfg
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
        req, cfg = self.req, self.app.cfg
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
        if whole:
            usage["completion_tokens_details"] = None
        return usage

    def _metrics(self) -> dict | None:
        cfg = self.app.cfg
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
        cfg = self.app.cfg
        req, plan = self.req, self.plan
        text = "".join(plan.pieces[: req.num_output])
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
                args = "".join(plan.pieces[1 : req.num_output])
                if req.finish_reason == "length":
                    # cut off: vLLM's parser finds no complete call, the raw text comes back
                    message["content"] = (
                        '<tool_call>\n{"name": ' + json.dumps(plan.tool_name) + ', "arguments": '
                    ) + args
                else:
                    # named/required: content "" beside the call; auto: null
                    message["content"] = "" if plan.forced else None
                    message["tool_calls"] = [{"id": plan.tool_id, "type": "function", "function": {"name": plan.tool_name, "arguments": args}}]  # fmt: skip
            message["reasoning"] = None
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "stop_reason": None, "token_ids": None, "routed_experts": None}  # fmt: skip
            body = {
                "id": req.request_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": cfg.model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": self.app.fingerprint,
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
                "system_fingerprint": self.app.fingerprint,
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
