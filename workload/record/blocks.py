"""Token blocks of prompts, hashed in a chain: prefix reuse kept without the text.

A prompt is tokenized message by message (each message's tokens are kept in a small LRU by
its canonical bytes, so a growing conversation only tokenizes what it appended) and cut into
``BLOCK_TOKENS``-token blocks; block j's hash covers block j and the hash of block j-1, so
equal hashes mean equal prefixes (as Mooncake's ``hash_ids``). Hashes get small integer ids
in the order they were first seen; those ids are a round's ``hash_ids``. The prefix a round
reuses is its run of leading full blocks some earlier prompt already had.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence

BLOCK_TOKENS = 64
CACHE_MESSAGES = 4096  # messages whose tokens are kept (a long agent session re-sends them all)


class PromptBlocks:
    """Block-hash chains of prompts and the ids of every block seen so far."""

    def __init__(self, encode: Callable[[str], Sequence[int]], block: int = BLOCK_TOKENS) -> None:
        self._encode = encode
        self.block = block
        self._tokens: OrderedDict[bytes, array[int]] = OrderedDict()
        self._ids: dict[bytes, int] = {}

    def tokens(
        self, units: Sequence[tuple[bytes, str]], lengths: list[int] | None = None
    ) -> array[int]:
        """The tokens of a prompt given as (key, text) units, each unit tokenized once
        (``lengths`` gets each unit's token count)."""
        out: array[int] = array("I")
        for key, text in units:
            toks = self._tokens.get(key)
            if toks is None:
                toks = array("I", (t & 0xFFFFFFFF for t in self._encode(text)))
                self._tokens[key] = toks
                if len(self._tokens) > CACHE_MESSAGES:
                    self._tokens.popitem(last=False)
            else:
                self._tokens.move_to_end(key)
            out.extend(toks)
            if lengths is not None:
                lengths.append(len(toks))
        return out

    def chain(self, toks: array[int]) -> list[bytes]:
        """One hash per block (the last one may be short), each over the one before it."""
        out: list[bytes] = []
        prev = b""
        data = toks.tobytes()
        step = self.block * toks.itemsize
        for i in range(0, len(data), step):
            prev = hashlib.blake2b(prev + data[i : i + step], digest_size=8).digest()
            out.append(prev)
        return out

    def reused(self, hashes: Sequence[bytes], n_tokens: int) -> int:
        """Tokens of the prompt's leading full blocks that an earlier prompt had."""
        full = n_tokens // self.block
        k = 0
        while k < full and hashes[k] in self._ids:
            k += 1
        return k * self.block

    def ids(self, hashes: Sequence[bytes]) -> list[int]:
        """The blocks' ids (new blocks get the next ids), remembering them for later prompts."""
        out = []
        for h in hashes:
            i = self._ids.get(h)
            if i is None:
                i = self._ids[h] = len(self._ids)
            out.append(i)
        return out
