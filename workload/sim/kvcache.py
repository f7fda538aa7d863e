"""Block KV cache with a prefix cache, modelled on vLLM's v1 block pool.

Prompts are cut into fixed-size token blocks; each full block's hash chains the
previous block's hash, so a block only matches when everything before it
matches too. `cache_salt` seeds the chain, which isolates tenants. Blocks whose
last user finished stay cached (evictable) until a new allocation needs room;
the least recently freed goes first, and a request's tail blocks are freed
ahead of its head so shared prefixes outlive private suffixes.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

# One entry per block a request holds: its hash when the block is shared
# through the prefix cache, or None for a private block.
BlockEntry = int | None


def salt_seed(cache_salt: str | None) -> int:
    """Chain seed for a cache salt (0 for none); stable across processes."""
    if not cache_salt:
        return 0
    return int.from_bytes(hashlib.blake2b(cache_salt.encode(), digest_size=8).digest(), "big")


def block_hashes(
    tokens: Sequence[int], block_size: int, cache_salt: str | None = None
) -> list[int]:
    """Chained hashes of the full blocks of `tokens` (ints and tuples hash stably)."""
    out = []
    prev = salt_seed(cache_salt)
    for start in range(0, len(tokens) - block_size + 1, block_size):
        prev = hash((prev, tuple(tokens[start : start + block_size])))
        out.append(prev)
    return out


class KVCache:
    """Counts blocks; shares full prompt blocks by hash; evicts cached blocks LRU."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.free_uncached = num_blocks
        self.ref: dict[int, int] = {}  # hash -> users
        self.evictable: OrderedDict[int, None] = OrderedDict()  # ref == 0, oldest first
        self.evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take (never-used plus evictable cached ones)."""
        return self.free_uncached + len(self.evictable)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests (vllm:kv_cache_usage_perc)."""
        return 1.0 - self.num_free / self.num_blocks

    def longest_hit(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks of `hashes` that are cached."""
        if not self.enable_prefix_caching:
            return 0
        n = 0
        ref = self.ref
        for h in hashes:
            if h not in ref:
                break
            n += 1
        return n

    def can_admit(self, hit_hashes: Sequence[int], new_blocks: int) -> bool:
        """Whether touching `hit_hashes` and allocating `new_blocks` more fits now."""
        reclaimed = sum(1 for h in hit_hashes if h in self.evictable)
        return new_blocks <= self.num_free - reclaimed

    def touch(self, blocks: list[BlockEntry], hit_hashes: Sequence[int]) -> None:
        """Take a reference on cached blocks and append them to a request's blocks."""
        for h in hit_hashes:
            self.ref[h] += 1
            self.evictable.pop(h, None)
            blocks.append(h)

    def allocate(self, blocks: list[BlockEntry], n: int) -> bool:
        """Append `n` private blocks, evicting LRU cached blocks if needed."""
        if n <= 0:
            return True
        if n > self.num_free:
            return False
        take = min(n, self.free_uncached)
        self.free_uncached -= take
        for _ in range(n - take):
            h, _ = self.evictable.popitem(last=False)
            del self.ref[h]
            self.evictions += 1
        blocks.extend([None] * n)
        return True

    def register(self, blocks: list[BlockEntry], hashes: Sequence[int], upto: int) -> None:
        """Share a request's full prompt blocks [0, upto) by hash once computed."""
        if not self.enable_prefix_caching:
            return
        ref = self.ref
        for i in range(min(upto, len(hashes), len(blocks))):
            if blocks[i] is not None:
                continue
            h = hashes[i]
            if h in ref:
                continue  # another request computed the same block meanwhile: keep ours private
            ref[h] = 1
            blocks[i] = h

    def free(self, blocks: list[BlockEntry]) -> None:
        """Release a request's blocks, tail first, so heads stay cached longest."""
        ref = self.ref
        for entry in reversed(blocks):
            if entry is None:
                self.free_uncached += 1
                continue
            ref[entry] -= 1
            if ref[entry] == 0:
                self.evictable[entry] = None
        blocks.clear()
