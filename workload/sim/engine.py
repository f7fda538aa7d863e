"""The pure engine: vLLM's V1 scheduler on an injected clock, no sockets, no asyncio.

One `Engine.step(now)` is one forward pass, planned the way vLLM's V1 scheduler plans it
(vllm/v1/core/sched/scheduler.py `Scheduler.schedule`, vLLM 0.32):

1. **Running requests first**, in order, while the token budget lasts
   (`max_num_batched_tokens`): a request mid-prefill gets its next chunk, a decoding one its
   last sampled token plus the drafts proposed for it. A prefill chunk is capped by
   `long_prefill_token_threshold` when more than one request is eligible. When a request
   needs a KV block and none is free, the *last* running request (FCFS) or the
   lowest-priority one is preempted: its blocks are freed, it goes back to the front of the
   waiting queue and later recomputes its prompt and output so far (prefix-cache hits
   included).
2. **Then waiting requests**, unless this step preempted: in queue order, while there is
   budget and fewer than `max_num_seqs` are running; each looks up its longest prefix-cache
   hit (whole blocks; the last token is always recomputed) and is admitted only if its
   blocks fit. Without chunked prefill, a prompt that does not fit the budget waits.
3. **Run**: every scheduled request advances; a finished prefill samples one token, a decode
   samples one plus the accepted drafts. Full blocks (prompt *and* generated tokens) enter
   the prefix cache by hash.
4. **Cost**: the step's shape costs `costmodel.step_cost_ms`, then instance noise applies.

Requests reach the scheduler through the API server first (`api_ms_per_request`, served
one at a time as vLLM's single API process does, so a burst of arrivals queues there; then
`api_latency_ms`, a delay that overlaps other requests).
All timestamps are the step's end (`now + duration`): a driver that sleeps until then
delivers tokens when the real engine would have produced them.

Determinism: output lengths are fixed by the caller; draft acceptance draws from a
per-request `random.Random(seed)`; noise from the instance seed. Same config, same instance
seed, same requests at the same times -> the same steps, counters and timestamps.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workload.sim.config import SimConfig
from workload.sim.costmodel import InstanceNoise, StepShape, step_cost_ms
from workload.sim.kvcache import BlockEntry, KVCache, block_hashes
from workload.sim.promtext import EngineStats

INGRESS, WAITING, RUNNING, FINISHED = "ingress", "waiting", "running", "finished"


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
    # measured conditional acceptance per draft position (position i accepted given i-1 was);
    # when set it replaces accept_rate, the last value standing for later positions
    accept_by_pos: tuple[float, ...] = ()
    spec_enabled: bool = True
    seed: int = 0
    detailed_spec: bool = False
    output_ids: Sequence[int] | None = None  # the tokens it will generate (prefix-cache keys)
    sink: Any = None  # the driver's delivery target; the engine never touches it
    # state
    status: str = INGRESS
    arrival_seq: int = 0
    num_computed: int = 0  # tokens whose KV is computed (prompt, outputs, recomputed ones)
    prefill_len: int = 0  # tokens to compute before the next sample (grows on preemption)
    num_output: int = 0
    pending_drafts: int = 0  # drafts proposed for the next decode step
    decode_steps: int = 0  # decode steps run so far (the proposer is cold for the first ones)
    cached_tokens: int = -1  # prefix-cache hit at first admission
    num_preemptions: int = 0
    blocks: list[BlockEntry] = field(default_factory=list)
    hashes: list[int] | None = None
    rng: random.Random | None = None
    # timestamps (engine clock, seconds)
    arrival_time: float = 0.0  # reached the server
    queued_time: float = 0.0  # reached the scheduler (after the API server)
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
    shape: StepShape
    scheduled: int = 0  # requests in the batch

    @property
    def end(self) -> float:
        return self.start + self.duration_s

    @property
    def prefill_tokens(self) -> int:
        return self.shape.prefill_tokens

    @property
    def decode_seqs(self) -> int:
        return self.shape.decode_seqs


class Engine:
    """V1 scheduler + KV cache + cost model + instance noise, stepped by the caller."""

    def __init__(self, cfg: SimConfig, instance_seed: int | None = None):
        self.cfg = cfg
        self.k = cfg.spec_k
        self.kv = KVCache(cfg.num_gpu_blocks, cfg.block_size, cfg.enable_prefix_caching)
        self.stats = EngineStats(k=cfg.spec_k)
        self.running: list[EngineRequest] = []
        self._ingress: deque[EngineRequest] = deque()
        self._num_ingress = 0  # live requests in _ingress (aborted ones are skipped lazily)
        self._api_free = float("-inf")  # when the API server is next free
        self._fcfs: deque[EngineRequest] = deque()
        self._heap: list[tuple[int, int, EngineRequest]] = []
        self._num_waiting = 0
        self._seq = 0
        self.priority = cfg.scheduling_policy == "priority"
        seed = cfg.instance_seed if instance_seed is None else instance_seed
        self.instance_seed = max(0, seed)
        self.noise = InstanceNoise(cfg, self.instance_seed)
        self._rng = random.Random(self.instance_seed * 31 + 7)  # draft proposals

    # -- queue -------------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        """Requests waiting for the scheduler (vllm:num_requests_waiting), API stage included."""
        return self._num_waiting + self._num_ingress

    def has_work(self) -> bool:
        """Whether anything is queued or running."""
        return bool(self.running) or self._num_waiting > 0 or self._num_ingress > 0

    def has_runnable(self) -> bool:
        """Whether a step now could schedule something (requests past the API server)."""
        return bool(self.running) or self._num_waiting > 0

    def next_ready(self) -> float | None:
        """When the next request leaves the API server, or None."""
        while self._ingress and self._ingress[0].status == FINISHED:
            self._ingress.popleft()
        return self._ingress[0].queued_time if self._ingress else None

    def add_request(self, req: EngineRequest, now: float) -> None:
        """Accept a request at `now` (raises QueueFull past max_waiting)."""
        if self.num_waiting >= self.cfg.max_waiting:
            raise QueueFull(f"waiting queue is full ({self.cfg.max_waiting})")
        cfg = self.cfg
        req.arrival_seq = self._seq
        self._seq += 1
        req.arrival_time = now
        req.prefill_len = req.prompt_len
        req.rng = random.Random(req.seed)
        req.spec_hist = [0] * (self.k + 1)
        self.stats.prompt_tokens += req.prompt_len
        api_s = cfg.api_ms_per_request * cfg.ttft_scale / 1000.0
        wait_s = cfg.api_latency_ms * cfg.ttft_scale / 1000.0
        frozen = self.noise.api_delay(now)  # the API server descheduled (instance noise)
        wait_s += self.noise.api_spell_delay(now)  # ... or slow for a spell (instance noise)
        if api_s <= 0.0 and wait_s <= 0.0 and frozen <= 0.0:
            req.queued_time = now
            self._push_waiting(req, front=False)
            return
        # the serial part holds the API server; the latency part overlaps other requests
        self._api_free = max(now + frozen, self._api_free) + api_s
        req.queued_time = self._api_free + wait_s
        req.status = INGRESS
        self._num_ingress += 1
        self._ingress.append(req)

    def _admit_ingress(self, now: float) -> None:
        ing = self._ingress
        while ing and (ing[0].status == FINISHED or ing[0].queued_time <= now):
            req = ing.popleft()
            if req.status != FINISHED:
                self._num_ingress -= 1
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
        elif req.status == INGRESS:
            self._num_ingress -= 1  # lazily skipped when it leaves the API stage
        elif req.status == RUNNING:
            self.running.remove(req)
            self.kv.free(req.blocks)
        req.status = FINISHED
        req.finish_reason = "abort"
        req.finished_time = now
        self.stats.success["abort"] += 1

    # -- scheduling ------------------------------------------------------------------------------
    def _victim(self) -> EngineRequest:
        if self.priority:
            return max(self.running, key=lambda r: (r.priority, r.arrival_seq))
        return self.running[-1]

    def _preempt(self, req: EngineRequest) -> None:
        self.running.remove(req)
        self.kv.free(req.blocks)
        req.num_computed = 0
        req.pending_drafts = 0
        req.prefill_len = req.prompt_len + req.num_output  # recompute prompt and outputs so far
        req.num_preemptions += 1
        self.stats.preemptions += 1
        self._push_waiting(req, front=True)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.cfg.block_size)

    def _lookahead(self, req: EngineRequest) -> int:
        # vLLM reserves slots for the drafts the next step will verify
        return self.k if req.spec_enabled else 0

    def _schedule_running(
        self, budget: int, threshold: int, scheduled: dict[EngineRequest, int]
    ) -> tuple[int, list[EngineRequest]]:
        """Step 1: running requests in order; returns (budget left, preempted)."""
        preempted: list[EngineRequest] = []
        running, kv = self.running, self.kv
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            if req.num_computed < req.prefill_len:
                n = req.prefill_len - req.num_computed
                if 0 < threshold < n:
                    n = threshold
            else:
                n = 1 + req.pending_drafts
            n = min(n, budget)
            need = self._blocks_for(req.num_computed + n + self._lookahead(req)) - len(req.blocks)
            while not kv.allocate(req.blocks, need):
                victim = self._victim()
                if running.index(victim) < i:
                    i -= 1
                if victim in scheduled:
                    budget += scheduled.pop(victim)
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            if req.status != RUNNING:
                break  # could not schedule it even alone: vLLM stops here too
            scheduled[req] = n
            budget -= n
            i += 1
        return budget, preempted

    def _schedule_waiting(
        self, now: float, budget: int, threshold: int, scheduled: dict[EngineRequest, int]
    ) -> None:
        """Step 2: admissions from the waiting queue."""
        cfg, kv = self.cfg, self.kv
        bs = cfg.block_size
        while budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self._peek_waiting()
            if req is None:
                break
            if req.hashes is None:
                tokens = list(req.prompt)
                if req.output_ids is not None:
                    tokens += list(req.output_ids)[: req.output_len]
                req.hashes = block_hashes(tokens, bs, req.cache_salt)
            hits = min(kv.longest_hit(req.hashes), (req.prefill_len - 1) // bs)
            hit_hashes = req.hashes[:hits]
            computed = hits * bs  # the last token is always recomputed
            n = req.prefill_len - computed
            if 0 < threshold < n:
                n = threshold
            if not cfg.enable_chunked_prefill and n > budget:
                break
            n = min(n, budget)
            new_blocks = self._blocks_for(computed + n + self._lookahead(req)) - hits
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

    # -- one forward pass ---------------------------------------------------------------------
    def step(self, now: float) -> StepOutput:
        """Schedule, cost and run one forward pass starting at `now`."""
        cfg = self.cfg
        self._admit_ingress(now)
        eligible = len(self.running) + self._num_waiting
        threshold = cfg.long_prefill_token_threshold if eligible > 1 else 0
        scheduled: dict[EngineRequest, int] = {}
        budget, preempted = self._schedule_running(cfg.max_num_batched_tokens, threshold, scheduled)
        if not preempted:  # vLLM admits nothing in a step that had to preempt
            self._schedule_waiting(now, budget, threshold, scheduled)
        shape = StepShape()
        emitted = self._run(scheduled, shape)
        ms = self.noise.apply(now, step_cost_ms(cfg, shape))
        end = now + ms / 1000.0
        finished = self._deliver(emitted, end)
        return StepOutput(now, ms / 1000.0, emitted, finished, preempted, shape, len(scheduled))

    def _run(
        self, scheduled: dict[EngineRequest, int], shape: StepShape
    ) -> list[tuple[EngineRequest, int]]:
        """Step 3: advance every scheduled request; returns (request, new tokens)."""
        kv, bs, stats = self.kv, self.cfg.block_size, self.stats
        emitted: list[tuple[EngineRequest, int]] = []
        for req, n in scheduled.items():
            before = req.num_computed
            if before < req.prefill_len:
                shape.add(before, n, prefill=True)
                req.num_computed = before + n
                if req.num_computed < req.prefill_len:
                    kv.register(req.blocks, req.hashes or (), req.num_computed // bs)
                    continue  # more chunks to go
                new = 1
            else:
                drafts = n - 1
                req.decode_steps += 1
                shape.add(before, n, prefill=False, drafts=drafts)
                accepted = self._speculate(req, drafts) if drafts else 0
                new = 1 + accepted
                req.num_computed = before + new  # rejected drafts' slots are recomputed
            new = min(new, req.output_len - req.num_output)
            req.num_output += new
            stats.generation_tokens += new
            kv.register(req.blocks, req.hashes or (), req.num_computed // bs)
            req.pending_drafts = self._propose(req)
            emitted.append((req, new))
        return emitted

    def _propose(self, req: EngineRequest) -> int:
        """Drafts for the next decode step (an n-gram proposer finds none without a match)."""
        if not (self.k and req.spec_enabled) or req.num_output >= req.output_len:
            return 0
        if req.decode_steps < self.cfg.spec_cold_steps:
            return 0  # no match yet: the answer has not repeated itself
        rate = self.cfg.spec_propose_rate
        if rate < 1.0 and self._rng.random() >= rate:
            return 0
        return self.k

    def _deliver(self, emitted: list[tuple[EngineRequest, int]], end: float) -> list[EngineRequest]:
        """Step 5: timestamps, histograms, completions."""
        stats, kv = self.stats, self.kv
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
                kv.free(req.blocks)
                req.status = FINISHED
                req.finished_time = end
                stats.success[req.finish_reason] = stats.success.get(req.finish_reason, 0) + 1
                stats.e2e.observe(end - req.arrival_time)
                stats.queue.observe(req.scheduled_time - req.queued_time)
                stats.prefill.observe(req.first_token_time - req.scheduled_time)
                stats.decode.observe(end - req.first_token_time)
                finished.append(req)
        return finished

    def _speculate(self, req: EngineRequest, drafts: int) -> int:
        """Draw accepted drafts for one decode step (stop at the first rejection)."""
        rng = req.rng
        assert rng is not None
        accepted = 0
        by_pos = req.accept_by_pos
        rate = req.accept_rate
        while accepted < drafts:
            if by_pos:
                rate = by_pos[min(accepted, len(by_pos) - 1)]
            if rng.random() >= rate:
                break
            accepted += 1
        # drafts past the requested length are discarded, not counted as accepted
        accepted = min(accepted, max(0, req.output_len - req.num_output - 1))
        req.spec_steps += 1
        req.spec_draft_tokens += drafts
        req.spec_accepted += accepted
        req.spec_hist[accepted] += 1
        if req.detailed_spec:
            req.per_step_accepted.append(accepted)
            req.per_step_drafted.append(drafts)
        st = self.stats
        st.spec_drafts += 1
        st.spec_draft_tokens += drafts
        st.spec_accepted += accepted
        pos = st.spec_accepted_per_pos
        for i in range(accepted):
            pos[i] += 1
        return accepted

    # -- observability -------------------------------------------------------------------------
    def cache_info(self) -> dict[str, str]:
        """Labels of vllm:cache_config_info."""
        return cache_info_labels(self.cfg)


def cache_info_labels(cfg: SimConfig) -> dict[str, str]:
    """vllm:cache_config_info labels for a config (vLLM 0.32's label set; values the
    simulator has no model for are vLLM's defaults)."""
    tokens = cfg.num_gpu_blocks * cfg.block_size
    return {
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
