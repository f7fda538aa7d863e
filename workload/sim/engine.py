"""The pure engine: continuous batching on an injected clock, no sockets, no asyncio.

`Engine.step(now)` plans one forward pass the way vLLM's v1 scheduler does
(running requests first, then admissions from the waiting queue, one token
budget shared by chunked prefills and decodes), charges its cost from the
latency model, advances every scheduled request, and returns what each emitted.
All timestamps are the step's end (`now + duration`), so a driver that sleeps
until then delivers tokens when a GPU would have produced them.

Determinism: output lengths are fixed by the caller; draft acceptance draws
from a per-request `random.Random(seed)`. Same config, same requests in the
same order at the same times -> the same steps, counters and timestamps.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workload.sim.config import SimConfig
from workload.sim.kvcache import BlockEntry, KVCache, block_hashes
from workload.sim.promtext import EngineStats

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


class QueueFull(Exception):
    """The waiting queue is at `max_waiting`; the request was not admitted."""


@dataclass(eq=False, slots=True)
class EngineRequest:
    """One sequence as the engine sees it; timing fields are filled while it runs."""

    request_id: str
    prompt: Sequence[int]
    output_len: int  # tokens to generate, decided by the caller (EOS or max_tokens)
    finish_reason: str = "stop"  # reported when output_len is reached
    priority: int = 0
    cache_salt: str | None = None
    accept_rate: float = 0.0  # per-draft acceptance probability
    spec_enabled: bool = True
    seed: int = 0
    detailed_spec: bool = False
    sink: Any = None  # the driver's delivery target; the engine never touches it
    # state
    status: str = WAITING
    arrival_seq: int = 0
    num_computed: int = 0  # tokens whose KV is computed (prompt, then recomputed outputs)
    prefill_len: int = 0  # tokens to prefill before the next sample (grows on preemption)
    num_output: int = 0
    cached_tokens: int = -1  # prefix-cache hit at first admission
    num_preemptions: int = 0
    blocks: list[BlockEntry] = field(default_factory=list)
    hashes: list[int] | None = None
    rng: random.Random | None = None
    # timestamps (engine clock, seconds)
    arrival_time: float = 0.0
    scheduled_time: float = -1.0
    first_token_time: float = -1.0
    last_token_time: float = -1.0
    finished_time: float = -1.0
    # speculative decoding, per request
    spec_steps: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_hist: list[int] = field(default_factory=list)
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)

    def spec_summary(self, k: int) -> dict:
        """vLLM's per-request `metrics.speculative_decoding` object."""
        steps = self.spec_steps
        out: dict = {
            "mean_acceptance_length": (1.0 + self.spec_accepted / steps) if steps else 1.0,
            "draft_acceptance_rate": (
                self.spec_accepted / self.spec_draft_tokens if self.spec_draft_tokens else 0.0
            ),
            "acceptance_histogram": list(self.spec_hist) or [0] * (k + 1),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": self.spec_accepted,
            "num_draft_tokens": self.spec_draft_tokens,
            "num_spec_tokens": k,
        }
        if self.detailed_spec:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
        return out


@dataclass(slots=True)
class StepOutput:
    """One forward pass: its cost and what each request got from it."""

    start: float
    duration_s: float
    emitted: list[tuple[EngineRequest, int]]  # (request, new tokens), in schedule order
    finished: list[EngineRequest]
    preempted: list[EngineRequest]
    prefill_tokens: int
    decode_seqs: int

    @property
    def end(self) -> float:
        return self.start + self.duration_s


class Engine:
    """Continuous-batching scheduler + KV cache + latency model, stepped by the caller."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.k = cfg.spec_k
        self.kv = KVCache(cfg.num_gpu_blocks, cfg.block_size, cfg.enable_prefix_caching)
        self.stats = EngineStats(k=cfg.spec_k)
        self.running: list[EngineRequest] = []
        self._fcfs: deque[EngineRequest] = deque()
        self._heap: list[tuple[int, int, EngineRequest]] = []
        self._num_waiting = 0
        self._seq = 0
        self.priority = cfg.scheduling_policy == "priority"

    # -- queue -------------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return self._num_waiting

    def has_work(self) -> bool:
        """Whether a step would do anything."""
        return bool(self.running) or self._num_waiting > 0

    def add_request(self, req: EngineRequest, now: float) -> None:
        """Queue a request (raises QueueFull past max_waiting)."""
        if self._num_waiting >= self.cfg.max_waiting:
            raise QueueFull(f"waiting queue is full ({self.cfg.max_waiting})")
        req.arrival_seq = self._seq
        self._seq += 1
        req.arrival_time = now
        req.prefill_len = req.prompt_len
        req.rng = random.Random(req.seed)
        req.spec_hist = [0] * (self.k + 1)
        self.stats.prompt_tokens += req.prompt_len
        self._push_waiting(req, front=False)

    def _push_waiting(self, req: EngineRequest, front: bool) -> None:
        req.status = WAITING
        self._num_waiting += 1
        if self.priority:
            heapq.heappush(self._heap, (req.priority, req.arrival_seq, req))
        elif front:
            self._fcfs.appendleft(req)
        else:
            self._fcfs.append(req)

    def _peek_waiting(self) -> EngineRequest | None:
        if self.priority:
            while self._heap and self._heap[0][2].status != WAITING:
                heapq.heappop(self._heap)  # aborted while waiting
            return self._heap[0][2] if self._heap else None
        while self._fcfs and self._fcfs[0].status != WAITING:
            self._fcfs.popleft()
        return self._fcfs[0] if self._fcfs else None

    def _pop_waiting(self) -> None:
        if self.priority:
            heapq.heappop(self._heap)
        else:
            self._fcfs.popleft()
        self._num_waiting -= 1

    def abort(self, req: EngineRequest, now: float) -> None:
        """Drop a request (client went away); frees its blocks."""
        if req.status == FINISHED:
            return
        if req.status == WAITING:
            self._num_waiting -= 1  # lazily skipped by _peek_waiting
        else:
            self.running.remove(req)
            self.kv.free(req.blocks)
        req.status = FINISHED
        req.finish_reason = "abort"
        req.finished_time = now
        self.stats.success["abort"] += 1

    # -- one forward pass ---------------------------------------------------------------------
    def _victim(self) -> EngineRequest:
        if self.priority:
            return max(self.running, key=lambda r: (r.priority, r.arrival_seq))
        return self.running[-1]

    def _preempt(self, req: EngineRequest) -> None:
        self.running.remove(req)
        self.kv.free(req.blocks)
        req.num_computed = 0
        req.prefill_len = req.prompt_len + req.num_output  # recompute prompt and outputs so far
        req.num_preemptions += 1
        self.stats.preemptions += 1
        self._push_waiting(req, front=True)

    def step(self, now: float) -> StepOutput:
        """Schedule, cost and run one forward pass starting at `now`."""
        scheduled: dict[EngineRequest, int] = {}
        preempted: list[EngineRequest] = []
        budget = self._schedule_running(self.cfg.max_num_batched_tokens, scheduled, preempted)
        if not preempted:  # admissions, unless this step had to preempt (vLLM does the same)
            self._admit(now, budget, scheduled)
        emitted, prefill_tokens, decode_seqs, draft_tokens, context_tokens = self._advance(
            scheduled
        )
        ms = 0.0
        if scheduled:
            ms = self._pass_ms(prefill_tokens, decode_seqs, draft_tokens, context_tokens)
        finished = self._stamp(emitted, now + ms / 1000.0)
        return StepOutput(
            now, ms / 1000.0, emitted, finished, preempted, prefill_tokens, decode_seqs
        )

    def _schedule_running(
        self, budget: int, scheduled: dict[EngineRequest, int], preempted: list[EngineRequest]
    ) -> int:
        """Running requests: continue chunked prefills, decode one token plus k drafts,
        preempting for KV blocks; returns the token budget left."""
        kv, k, bs = self.kv, self.k, self.cfg.block_size
        for req in list(self.running):
            if req.status != RUNNING:
                continue  # preempted earlier in this loop
            if req.num_computed < req.prefill_len:
                n = min(req.prefill_len - req.num_computed, budget)
            else:
                n = 1 + (k if req.spec_enabled else 0)  # last sampled token + k lookahead
            need = req.num_computed + n
            if n <= 0 or n > budget:
                continue
            blocks_needed = -(-need // bs) - len(req.blocks)
            while not kv.allocate(req.blocks, blocks_needed):
                victim = self._victim()
                if victim in scheduled:
                    budget += scheduled.pop(victim)
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            if req.status != RUNNING:
                continue
            scheduled[req] = n
            budget -= n
        return budget

    def _admit(self, now: float, budget: int, scheduled: dict[EngineRequest, int]) -> None:
        """Waiting requests in order, while the budget, the seats and the KV cache allow."""
        cfg, kv, bs = self.cfg, self.kv, self.cfg.block_size
        while budget > 0 and len(self.running) < cfg.max_num_seqs:
            head = self._peek_waiting()
            if head is None:
                break
            req = head
            if req.hashes is None:
                req.hashes = block_hashes(req.prompt, bs, req.cache_salt)
            hits = kv.longest_hit(req.hashes)
            if hits * bs >= req.prefill_len:
                hits = (req.prefill_len - 1) // bs  # the last token is always recomputed
            hit_hashes = req.hashes[:hits]
            computed = hits * bs
            n = min(req.prefill_len - computed, budget)
            new_blocks = -(-(computed + n) // bs) - hits
            if not kv.can_admit(hit_hashes, new_blocks):
                break
            self._pop_waiting()
            kv.touch(req.blocks, hit_hashes)
            kv.allocate(req.blocks, new_blocks)
            req.status = RUNNING
            req.num_computed = computed
            if req.cached_tokens < 0:
                req.cached_tokens = computed
                req.scheduled_time = now
            self.stats.prefix_queries += req.prefill_len
            self.stats.prefix_hits += computed
            self.running.append(req)
            scheduled[req] = n
            budget -= n

    def _advance(
        self, scheduled: dict[EngineRequest, int]
    ) -> tuple[list[tuple[EngineRequest, int]], int, int, int, int]:
        """Run the pass: advance every scheduled request. Returns (emitted, prefill tokens,
        decode sequences, draft tokens, context tokens)."""
        kv, k, bs = self.kv, self.k, self.cfg.block_size
        emitted: list[tuple[EngineRequest, int]] = []
        prefill_tokens = decode_seqs = draft_tokens = context_tokens = 0
        stats = self.stats
        for req, n in scheduled.items():
            context_tokens += req.num_computed
            if req.num_computed < req.prefill_len:
                req.num_computed += n
                prefill_tokens += n
                if kv.enable_prefix_caching:
                    kv.register(req.blocks, req.hashes or (), req.num_computed // bs)
                if req.num_computed < req.prefill_len:
                    continue  # more chunks to go
                new = 1
            else:
                decode_seqs += 1
                new = 1
                if req.spec_enabled and k:
                    new += self._speculate(req)
                    draft_tokens += k
                req.num_computed += new
            remaining = req.output_len - req.num_output
            new = min(new, remaining)
            req.num_output += new
            stats.generation_tokens += new
            emitted.append((req, new))
        return emitted, prefill_tokens, decode_seqs, draft_tokens, context_tokens

    def _pass_ms(
        self, prefill_tokens: int, decode_seqs: int, draft_tokens: int, context_tokens: int
    ) -> float:
        """The cost of a pass that scheduled something (the latency model), in ms."""
        cfg = self.cfg
        decode_ms = 0.0
        if decode_seqs:
            decode_ms = (
                cfg.decode_ms_base
                + cfg.decode_ms_per_seq * decode_seqs
                + cfg.decode_ms_per_kv_ktoken * context_tokens / 1000.0
                + cfg.draft_ms_per_token * draft_tokens
            )
        overhead_scale = cfg.ttft_scale if prefill_tokens else cfg.itl_scale
        return (
            cfg.step_overhead_ms * overhead_scale
            + cfg.prefill_ms_per_token * prefill_tokens * cfg.ttft_scale
            + decode_ms * cfg.itl_scale
        )

    def _stamp(self, emitted: list[tuple[EngineRequest, int]], end: float) -> list[EngineRequest]:
        """Timestamps and histograms of the pass ending at `end`; returns the finished."""
        stats = self.stats
        finished: list[EngineRequest] = []
        for req, _new in emitted:
            if req.first_token_time < 0:
                req.first_token_time = end
                stats.ttft.observe(end - req.arrival_time)
            else:
                stats.itl.observe(end - req.last_token_time)
            req.last_token_time = end
            if req.num_output >= req.output_len:
                self.running.remove(req)
                self.kv.free(req.blocks)
                req.status = FINISHED
                req.finished_time = end
                stats.success[req.finish_reason] = stats.success.get(req.finish_reason, 0) + 1
                stats.e2e.observe(end - req.arrival_time)
                stats.queue.observe(req.scheduled_time - req.arrival_time)
                stats.prefill.observe(req.first_token_time - req.scheduled_time)
                stats.decode.observe(end - req.first_token_time)
                finished.append(req)
        return finished

    def _speculate(self, req: EngineRequest) -> int:
        """Draw accepted drafts for one decode step (stop at the first rejection)."""
        k = self.k
        rng = req.rng
        assert rng is not None
        accepted = 0
        rate = req.accept_rate
        while accepted < k and rng.random() < rate:
            accepted += 1
        # drafts past the requested length are discarded, not counted as accepted
        accepted = min(accepted, max(0, req.output_len - req.num_output - 1))
        req.spec_steps += 1
        req.spec_draft_tokens += k
        req.spec_accepted += accepted
        req.spec_hist[accepted] += 1
        if req.detailed_spec:
            req.per_step_accepted.append(accepted)
            req.per_step_drafted.append(k)
        st = self.stats
        st.spec_drafts += 1
        st.spec_draft_tokens += k
        st.spec_accepted += accepted
        pos = st.spec_accepted_per_pos
        for i in range(accepted):
            pos[i] += 1
        return accepted

    # -- observability -------------------------------------------------------------------------
    def cache_info(self) -> dict[str, str]:
        """Labels of vllm:cache_config_info."""
        cfg = self.cfg
        tokens = cfg.num_gpu_blocks * cfg.block_size
        return {  # vLLM 0.32's label set; values it has no model for are vLLM's defaults
            "_block_size_resolved": "True",
            "block_size": str(cfg.block_size),
            "cache_dtype": cfg.cache_dtype,
            "cache_hit_alignment_tokens": "None",
            "effective_attention_block_size": str(cfg.block_size),
            "enable_mamba_shared_prefix_checkpoint": "False",
            "enable_prefix_caching": str(cfg.enable_prefix_caching),
            "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
            "hash_block_size": "None",
            "is_attention_free": "False",
            "kv_cache_dtype_skip_layers": "[]",
            "kv_cache_layout": "None",
            "kv_cache_max_concurrency": str(tokens / cfg.max_model_len),
            "kv_cache_memory_bytes": str(tokens * cfg.kv_bytes_per_token),
            "kv_cache_size_tokens": str(tokens),
            "kv_offloading_backend": "native",
            "kv_offloading_size": "None",
            "kv_sharing_fast_prefill": "False",
            "mamba_block_size": "None",
            "mamba_cache_dtype": "auto",
            "mamba_cache_mode": "none",
            "mamba_page_size_padded": "None",
            "mamba_ssm_cache_dtype": "float32",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(cfg.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "prefix_cache_retention_interval": "0",
            "prefix_caching_hash_algo": "sha256",
            "prefix_match_unit": "None",
            "replayssm_buffer_len": "16",
            "skip_page_size_padded": "None",
            "sliding_window": "None",
            "swa_bounded_replay": "True",
            "use_kda_recoverssm": "False",
            "use_replayssm": "False",
            "user_specified_block_size": "False",
        }
