"""Token-exact prompts from Mooncake block hash ids, and prefix-cache hit ratios.

A block is ``block_tokens`` (512) words drawn from (seed, hash_id): equal ids
give byte-identical blocks, and a request's prompt is its blocks concatenated
with nothing before them, the last block cut to the remaining tokens (a prefix
of that block as it appears elsewhere). A prefix cache therefore sees exactly
the reuse the trace describes.

Exactness: every word is one token for the tokenizer and a whole pre-token
(" word", letters only; the set ``PromptSynth`` already checks), so any run of
words encodes to one token per word, across block boundaries too. For
/v1/completions send the text (or ``token_ids``); a chat template adds its own
fixed header before the blocks, which shifts block alignment but not reuse.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from workload.plan.prompts import synth_for
from workload.plan.tokens import Tokenizer, get_tokenizer
from workload.plan.traces._read import BLOCK_TOKENS, Trace, TraceRequest


class BlockSynth:
    """Text (and token ids) for hash-id blocks; build once per tokenizer and seed."""

    def __init__(
        self,
        tokenizer: Tokenizer | None = None,
        *,
        seed: int = 0,
        block_tokens: int = BLOCK_TOKENS,
        cache_blocks: int = 4096,
    ) -> None:
        self.tokenizer = tokenizer or get_tokenizer("tiktoken:cl100k_base")
        words = synth_for(self.tokenizer).words  # single-token " word" pieces, checked
        self.words = np.asarray(words, dtype=object)
        self._word_ids: np.ndarray | None = None  # built on first token_ids() call
        self._lens = np.asarray([len(w) for w in words], dtype=np.int64)
        self.seed = seed
        self.block_tokens = block_tokens
        self._cache: OrderedDict[int, tuple[str, np.ndarray, np.ndarray]] = OrderedDict()
        self._cache_blocks = cache_blocks

    def _block(self, hash_id: int) -> tuple[str, np.ndarray, np.ndarray]:
        b = self._cache.get(hash_id)
        if b is not None:
            self._cache.move_to_end(hash_id)
            return b
        if hash_id < 0:
            raise ValueError(f"hash id must be >= 0, got {hash_id}")
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, hash_id])
        idx = rng.integers(0, len(self.words), self.block_tokens)
        offs = np.zeros(self.block_tokens + 1, dtype=np.int64)
        np.cumsum(self._lens[idx], out=offs[1:])
        b = ("".join(self.words[idx]), offs, idx)
        self._cache[hash_id] = b
        if len(self._cache) > self._cache_blocks:
            self._cache.popitem(last=False)
        return b

    def _check(self, hash_ids: Sequence[int], input_tokens: int) -> None:
        need = math.ceil(input_tokens / self.block_tokens)
        if len(hash_ids) != need or input_tokens < 1:
            raise ValueError(
                f"{len(hash_ids)} hash ids for {input_tokens} tokens (need {need} blocks of "
                f"{self.block_tokens})"
            )

    def prompt(self, hash_ids: Sequence[int], input_tokens: int) -> str:
        """Exactly input_tokens tokens of text: the blocks in order, the last one cut."""
        self._check(hash_ids, input_tokens)
        parts = [self._block(h)[0] for h in hash_ids[:-1]]
        last = input_tokens - self.block_tokens * (len(hash_ids) - 1)
        text, offs, _ = self._block(hash_ids[-1])
        parts.append(text[: int(offs[last])])
        return "".join(parts)

    def token_ids(self, hash_ids: Sequence[int], input_tokens: int) -> list[int]:
        """The token ids of ``prompt`` (for a /v1/completions prompt given as ids)."""
        self._check(hash_ids, input_tokens)
        last = input_tokens - self.block_tokens * (len(hash_ids) - 1)
        if self._word_ids is None:  # one encode per word: a server tokenizer is asked only once
            self._word_ids = np.asarray([self.tokenizer.encode(w)[0] for w in self.words])
        out: list[int] = []
        for i, h in enumerate(hash_ids):
            idx = self._block(h)[2]
            out.extend(self._word_ids[idx[: last if i == len(hash_ids) - 1 else None]].tolist())
        return out

    def request_prompt(self, req: TraceRequest) -> str:
        """The prompt of a trace request (needs hash_ids)."""
        if req.hash_ids is None:
            raise ValueError("this request has no hash_ids (not a Mooncake-style trace)")
        return self.prompt(req.hash_ids, req.input_tokens)


# ------------------------------------------------------------------------- hit ratios
@dataclass(frozen=True, slots=True)
class HitRatio:
    """Prefix-cache hits over a trace, by blocks and by tokens."""

    blocks: int
    hit_blocks: int
    tokens: int
    hit_tokens: int
    capacity_blocks: int | None  # None: infinite cache

    @property
    def ratio(self) -> float:
        return self.hit_blocks / self.blocks if self.blocks else 0.0

    @property
    def token_ratio(self) -> float:
        return self.hit_tokens / self.tokens if self.tokens else 0.0


def hit_ratio(
    requests: Trace | Iterable[TraceRequest],
    capacity_blocks: int | None = None,
    *,
    block_tokens: int = BLOCK_TOKENS,
) -> HitRatio:
    """Prefix-cache hits if requests ran in order on one cache (vLLM-style).

    A block hits when it and every block before it in the request are cached
    (the leading run). Then all the request's blocks are cached. With
    ``capacity_blocks`` the cache is LRU over blocks; None means infinite.
    Requests without hash_ids are skipped.
    """
    reqs = requests.requests if isinstance(requests, Trace) else requests
    seen: OrderedDict[int, None] = OrderedDict()
    blocks = hits = tokens = hit_tokens = 0
    for r in reqs:
        ids = r.hash_ids
        if ids is None:
            continue
        n = len(ids)
        blocks += n
        tokens += r.input_tokens
        k = 0
        while k < n and ids[k] in seen:
            k += 1
        hits += k
        if k:
            hit_tokens += min(k * block_tokens, r.input_tokens)
        for h in ids:
            if h in seen:
                seen.move_to_end(h)
            else:
                seen[h] = None
        if capacity_blocks is not None:
            while len(seen) > capacity_blocks:
                seen.popitem(last=False)
    return HitRatio(blocks, hits, tokens, hit_tokens, capacity_blocks)
