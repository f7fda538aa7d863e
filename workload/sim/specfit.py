"""Speculative-decoding acceptance of a real server, from its `/metrics` counters.

vLLM counts, per request and decode step that carried drafts (vllm/v1/spec_decode/metrics.py
`SpecDecodingStats.observe_draft`): one draft (`vllm:spec_decode_num_drafts`), its draft
tokens (`..._num_draft_tokens`), the accepted ones (`..._num_accepted_tokens`) and, per draft
position, how many were accepted there (`..._num_accepted_tokens_per_pos{position=i}`; a
position counts only when every earlier one was accepted). Read before and after a sweep, the
differences give what the simulator's engine draws from:

- conditional acceptance per position, ``a_i = acc_i / acc_{i-1}`` (``acc_{-1}`` = drafts):
  the product ``a_0 ... a_i`` is ``acc_i / drafts``, so the twin's accepted tokens per draft
  step (``sum_i acc_i / drafts``) and its per-position counters match the server's; a draft
  the proposer made shorter than k counts as rejected at the positions it lacks;
- the proposer's hit rate: the share of decode steps that carried drafts. The decode steps
  are best counted by the client (one chunk per step: chunks - 1 per stream); the counters
  alone undercount them, since vLLM counts the drafts its sampler accepted past a request's
  `max_tokens` (vllm/v1/core/sched/scheduler.py `update_from_output`: the spec stats come
  before the output is cut at the stop), while `vllm:generation_tokens` counts only those
  delivered: a 48-token request of the test server reported 34 accepted drafts in 12 draft
  steps and 3 steps without drafts, of which generation - requests - accepted sees 1.
  Without a client count that formula is the fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE = re.compile(r"^(vllm:[a-z_]+?)(?:_total)?(\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)
_POSITION = re.compile(r'position="(\d+)"')


@dataclass
class SpecCounters:
    """The counters one `/metrics` read shows (0 where a counter is absent)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: list[float] = field(default_factory=list)
    generation_tokens: float = 0.0
    requests: float = 0.0  # finished requests, every reason

    def minus(self, other: SpecCounters) -> SpecCounters:
        """The change from `other` (an earlier read) to this one."""
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        pos = [0.0] * n
        for i, v in enumerate(self.accepted_per_pos):
            pos[i] += v
        for i, v in enumerate(other.accepted_per_pos):
            pos[i] -= v
        return SpecCounters(
            self.drafts - other.drafts,
            self.draft_tokens - other.draft_tokens,
            self.accepted - other.accepted,
            pos,
            self.generation_tokens - other.generation_tokens,
            self.requests - other.requests,
        )


def read_counters(text: str) -> SpecCounters:
    """Parse the spec-decode, generation-token and finished-request counters of `/metrics`."""
    out = SpecCounters()
    per_pos: dict[int, float] = {}
    simple = {
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:spec_decode_num_draft_tokens": "draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "accepted",
        "vllm:generation_tokens": "generation_tokens",
    }
    for name, labels, value in _LINE.findall(text):
        v = float(value)
        if name in simple:
            setattr(out, simple[name], getattr(out, simple[name]) + v)
        elif name == "vllm:request_success":
            out.requests += v
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            m = _POSITION.search(labels or "")
            if m:
                per_pos[int(m.group(1))] = per_pos.get(int(m.group(1)), 0.0) + v
    out.accepted_per_pos = [per_pos.get(i, 0.0) for i in range(max(per_pos, default=-1) + 1)]
    return out


def fit_acceptance(
    delta: SpecCounters, decode_steps: float | None = None
) -> dict[str, float | int | str] | None:
    """Simulator settings for the drafts of a sweep (counter changes); None if none drafted.

    `decode_steps` is the sweep's decode steps as the client counted them (chunks after the
    first), else they are inferred from the counters (an undercount, see the module doc).

    Returns spec_k (the positions the server counts), spec_accept_by_pos, spec_accept_base
    (accepted / draft tokens, for reference), spec_accept_rep_gain 0 (the content model has no
    basis on another server) and spec_propose_rate.
    """
    if delta.drafts <= 0 or not delta.accepted_per_pos:
        return None
    rates = []
    prev = delta.drafts
    for acc in delta.accepted_per_pos:
        rates.append(min(1.0, max(0.0, acc / prev)) if prev > 0 else 0.0)
        prev = acc
    if decode_steps is None:
        decode_steps = delta.generation_tokens - delta.requests - delta.accepted
    propose = delta.drafts / decode_steps if decode_steps > 0 else 1.0
    return {
        "spec_k": len(delta.accepted_per_pos),
        "spec_accept_by_pos": ",".join(f"{a:.4f}" for a in rates),
        "spec_accept_base": round(delta.accepted / delta.draft_tokens, 4)
        if delta.draft_tokens
        else 0.0,
        "spec_accept_rep_gain": 0.0,
        "spec_propose_rate": round(min(1.0, max(0.0, propose)), 4),
    }


def fit_cold(short: tuple[float, float], long: tuple[float, float]) -> tuple[int, float]:
    """(spec_cold_steps, spec_propose_rate) from two stream lengths' (decode steps, drafts)
    per stream.

    A proposer cold for a request's first N decode steps and drafting at rate p after them
    leaves U = N p + (1 - p) S decode steps without drafts in a stream of S steps: an
    n-gram proposer (vLLM's `ngram`, prompt lookup) finds no match until the answer repeats
    itself, so U hardly grows with S, while a proposer that misses at random gives U
    proportional to S. Two lengths separate the two.
    """
    (s1, d1), (s2, d2) = short, long
    u1, u2 = max(0.0, s1 - d1), max(0.0, s2 - d2)
    if s2 - s1 <= 0:
        return 0, round(min(1.0, d2 / s2), 4) if s2 > 0 else 1.0
    miss = min(1.0, max(0.0, (u2 - u1) / (s2 - s1)))
    p = 1.0 - miss
    cold = (u1 - miss * s1) / p if p > 0 else 0.0
    return max(0, round(cold)), round(p, 4)
