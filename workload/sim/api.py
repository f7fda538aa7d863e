"""The OpenAI-compatible routes: dispatch, the simple endpoints, and generation: validate
(``validate``), plan the output, hand the request to the engine, and let a ``Response``
stream or collect what the engine emits.
"""

from __future__ import annotations

import hashlib
import math
import random
from array import array
from dataclasses import replace
from typing import Protocol

import orjson

from workload.sim.config import SimConfig
from workload.sim.content import ContentModel
from workload.sim.engine import EngineRequest, QueueFull
from workload.sim.http11 import Exchange
from workload.sim.response import Plan, Response
from workload.sim.validate import (
    BadRequest,
    Generation,
    check_model,
    parse_generation,
    parse_json_body,
)
from workload.sim.wire import error_body


class Host(Protocol):
    """What the routes need from the process that owns the engine (``SimServer``)."""

    cfg: SimConfig
    content: ContentModel
    started_at: float

    def submit(self, req: EngineRequest) -> None: ...

    def abort(self, req: EngineRequest) -> None: ...

    def render_metrics(self) -> str: ...


class SimApp:
    """Routes requests; owns nothing but counters and RNGs (the server owns the engine)."""

    def __init__(self, server: Host, seed: int):
        self.server = server
        self.cfg = server.cfg
        self.content = server.content
        self.seed = seed
        self._count = 0
        self._fault_rng = random.Random(seed * 7919 + 17)
        self._faults = sorted(self.cfg.faults.items())
        self.fingerprint = self.cfg.fingerprint()
        self._accept_by_pos = self.cfg.accept_by_pos()  # measured per-position acceptance
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
        body = parse_json_body(ex.request.body)
        check_model(body, self.cfg.model)
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
        body = parse_json_body(ex.request.body)
        check_model(body, self.cfg.model)
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
        body = parse_json_body(ex.request.body)
        check_model(body, self.cfg.model)
        g = parse_generation(body, chat, cfg, self.content)
        prompt, tools, tool_choice, named = g.prompt, g.tools, g.tool_choice, g.named
        max_tokens, stream, include_usage = g.max_tokens, g.stream, g.include_usage

        self._count += 1
        req_seed = self._answer_seed(g)
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
        plan = self._plan(
            rng, rep, tools, tool_choice, named, max_tokens, g.min_tokens, g.ignore_eos
        )
        if (
            plan.tool_name is not None
            and not plan.named
            and body.get("parallel_tool_calls") is True
        ):
            plan = self._parallel(rng, plan, tools, max_tokens)
        if cfg.reasoning_field and g.thinking_budget and plan.tool_name is None:
            plan = self._think(rng, rep, plan, g.thinking_budget, max_tokens, g.ignore_eos)
        structured = tool_choice == "required" or named is not None
        k = cfg.spec_k
        ereq = EngineRequest(
            request_id=rid,
            prompt=prompt,
            output_len=min(len(plan.pieces), max_tokens),
            finish_reason=plan.finish,
            priority=g.priority,
            cache_salt=g.cache_salt,
            accept_rate=min(0.97, cfg.spec_accept_base + cfg.spec_accept_rep_gain * rep),
            accept_by_pos=self._accept_by_pos,
            spec_enabled=k > 0 and not (cfg.spec_fallback_structured and structured),
            seed=req_seed,
            detailed_spec=cfg.spec_metrics == "detailed",
        )
        sink = Response(
            cfg,
            self.fingerprint,
            self.server.abort,
            ex,
            ereq,
            plan,
            chat=chat,
            stream=stream,
            include_usage=include_usage,
            fault=fault,
            rng=rng,
            rid_core=rid_core,
        )
        ereq.sink = sink
        try:
            self.server.submit(ereq)
        except QueueFull as e:
            ex.respond(503, error_body(503, f"Server is overloaded: {e}."))
            return
        ex.on_close = sink.client_gone
        sink.begin()

    def _answer_seed(self, g: Generation) -> int:
        """The seed of this request's answer (its length, tool call, text, draft acceptance).

        vLLM answers the same request the same way when it samples greedily (temperature 0,
        agentload's default) or with the request's own `seed`, on any instance: two instances
        that are sent the same conversation give the same reply, so a `history: actual`
        session follows the same path on both sides of a canary. Other requests draw in
        arrival order from --seed, as sampling at a temperature does.
        """
        if g.seed is None and g.temperature > 0:
            return (self.seed * 1_000_003 + self._count) & 0xFFFFFFFFFFFF
        why = ("seed", g.seed) if g.seed is not None else ("greedy", self.seed)
        key = repr((why, g.max_tokens, g.min_tokens, g.ignore_eos, g.tool_choice))
        h = hashlib.blake2b(key.encode(), digest_size=6)
        try:
            h.update(array("q", g.prompt).tobytes())
        except OverflowError:  # a token id past 64 bits (vLLM would refuse it)
            h.update(repr(g.prompt).encode())
        return int.from_bytes(h.digest(), "big")

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

    def _parallel(
        self, rng: random.Random, plan: Plan, tools: list | None, max_tokens: int
    ) -> Plan:
        """A request that asks for ``parallel_tool_calls: true`` gets a second call, to the
        next other tool offered (a model that calls two tools at once); one tool: one call."""
        valid = [t for t in tools or () if isinstance(t, dict)]
        names = [str((t.get("function") or {}).get("name", "tool")) for t in valid]
        others = [t for t, n in zip(valid, names, strict=True) if n != plan.tool_name]
        if not others:
            return plan
        name, frags = self.content.tool_call(rng, others[0], False)
        tool_id = f"chatcmpl-tool-{rng.getrandbits(128):032x}"
        more = ((len(plan.pieces), name, tool_id),)
        pieces = [*plan.pieces, "", *frags]
        finish = "length" if len(pieces) > max_tokens else plan.finish
        return replace(plan, pieces=pieces, more_calls=more, finish=finish)

    def _think(self, rng, rep, plan: Plan, budget: int, max_tokens: int, ignore_eos: bool) -> Plan:
        """A text answer preceded by up to ``budget`` reasoning tokens, within max_tokens."""
        if ignore_eos:
            r = min(budget, max_tokens - 1)
            answer = max_tokens - r
        else:
            r = min(budget, max_tokens)
            answer = min(len(plan.pieces), max_tokens - r)
        finish = "length" if r + answer >= max_tokens else plan.finish
        pieces = self.content.text_pieces(rng, r, rep) + plan.pieces[:answer]
        if len(pieces) < r + answer:  # ignore_eos: the answer runs to max_tokens
            pieces += self.content.text_pieces(rng, r + answer - len(pieces), rep)
        return Plan(pieces, finish, reasoning=r)

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
