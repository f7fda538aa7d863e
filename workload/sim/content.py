"""What the simulated model reads and writes: chat template, output text, tool calls.

Chat template (documented so `/tokenize` and `usage.prompt_tokens` agree):
every segment below is tokenized on its own with cl100k_base (offline) and the
token lists are concatenated::

    [if tools]  "<|im_start|>system\\n# Tools\\n"  json(tools)  "<|im_end|>\\n"
    per message "<|im_start|>{role}\\n"  {content}  [json(tool_calls)]  "<|im_end|>\\n"
    [if add_generation_prompt] "<|im_start|>assistant\\n"

`content` may be a string, null, or a list of parts whose `text` fields are
joined. Per-segment tokenization lets agent sessions, which resend the same
history, hit a token cache instead of re-encoding every turn.

Output text is made of whole cl100k tokens (one common word each), so
`completion_tokens` counts exactly the pieces streamed. How repetitive the
prompt is (share of repeated token trigrams) sets how repetitive the output
is and how often drafts are accepted.
"""

from __future__ import annotations

import random
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import orjson

from workload.plan.tokens import get_tokenizer

# Token ids the segment cache holds at most: ~9 bytes each with the text keys, so ~18 MiB
# (measured: 4M ids held 36 MiB). Agent sessions resend their history every turn; this holds
# the histories of ~100 concurrent 20k-token sessions. At 4M, a 30-minute 20-user soak was
# still filling it after 24 minutes (+0.95 MiB/min over the last 15, docs/robustness.md).
# (Bounding entries instead let long one-off segments, e.g. 100k-token documents, grow the
# process by ~10 MiB a minute, towards gigabytes.)
CACHE_TOKENS = 2_000_000

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "at",
    "this",
    "are",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "all",
    "we",
    "when",
    "there",
    "can",
    "been",
    "has",
    "more",
    "if",
    "will",
    "would",
    "who",
    "so",
    "what",
    "about",
    "out",
    "up",
    "into",
    "them",
    "then",
    "some",
    "could",
    "time",
    "only",
    "other",
    "new",
    "these",
    "two",
    "may",
    "first",
    "any",
    "like",
    "now",
    "my",
    "such",
    "make",
    "over",
    "our",
    "even",
    "most",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "how",
    "too",
    "good",
    "very",
    "state",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "place",
    "made",
    "little",
    "world",
    "system",
    "file",
    "function",
    "value",
    "return",
    "data",
    "result",
    "error",
    "check",
    "call",
    "tool",
    "step",
    "run",
    "list",
    "update",
    "test",
    "code",
    "request",
    "model",
    "server",
]  # noqa: SIM905 - a word list reads better as text


class ContentModel:
    """Tokenizes prompts through the template and writes outputs; caches segment tokens."""

    def __init__(self, cache_tokens: int = CACHE_TOKENS) -> None:
        self.tok = get_tokenizer("tiktoken:cl100k_base")
        # segment text -> its token ids (4 bytes each), least recently used first
        self._cache: OrderedDict[str, array] = OrderedDict()
        self._cache_tokens = 0
        self._cache_limit = cache_tokens
        words = []
        for w in _WORDS:
            ids = self.tok.encode(" " + w)
            if len(ids) == 1:
                words.append(" " + w)
        self.words: list[str] = words

    def encode(self, text: str) -> Sequence[int]:
        """Token ids of one segment (cached, LRU, at most ``cache_tokens`` ids in all)."""
        cache = self._cache
        ids = cache.get(text)
        if ids is not None:
            cache.move_to_end(text)
            return ids
        ids = array("I", self.tok.encode(text))
        if len(ids) <= self._cache_limit:
            cache[text] = ids
            self._cache_tokens += len(ids)
            while self._cache_tokens > self._cache_limit:
                _, old = cache.popitem(last=False)
                self._cache_tokens -= len(old)
        return ids

    def chat_prompt(
        self, messages: list, tools: list | None = None, add_generation_prompt: bool = True
    ) -> list[int]:
        """Prompt token ids for a chat request (raises ValueError on a malformed message)."""
        enc = self.encode
        out: list[int] = []
        if tools:
            out += enc("<|im_start|>system\n# Tools\n")
            out += enc(orjson.dumps(tools).decode())
            out += enc("<|im_end|>\n")
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise ValueError(f"messages[{i}] must be an object with a string 'role'")
            out += enc(f"<|im_start|>{msg['role']}\n")
            content = msg.get("content")
            if isinstance(content, str):
                out += enc(content)
            elif isinstance(content, list):
                texts = []
                for part in content:
                    if not isinstance(part, dict):
                        raise ValueError(f"messages[{i}].content parts must be objects")
                    if isinstance(part.get("text"), str):
                        texts.append(part["text"])
                out += enc("".join(texts))
            elif content is not None:
                raise ValueError(f"messages[{i}].content must be a string, a list or null")
            if msg.get("tool_calls"):
                out += enc(orjson.dumps(msg["tool_calls"]).decode())
            out += enc("<|im_end|>\n")
        if add_generation_prompt:
            out += enc("<|im_start|>assistant\n")
        return out

    def text_prompt(self, prompt: str) -> list[int]:
        """Prompt token ids for a completions request."""
        return list(self.encode(prompt))

    @staticmethod
    def repetitiveness(prompt: Sequence[int], window: int = 2048) -> float:
        """Share of repeated token trigrams in the prompt's tail, 0..1."""
        tail = prompt[-window:]
        n = len(tail) - 2
        if n <= 0:
            return 0.0
        uniq = len(set(zip(tail, tail[1:], tail[2:], strict=False)))
        return 1.0 - uniq / n

    def text_pieces(self, rng: random.Random, n: int, repetitiveness: float) -> list[str]:
        """`n` one-token pieces; repetitive prompts get outputs that repeat a short phrase."""
        words = self.words
        pieces = rng.choices(words, k=n)
        if repetitiveness > 0.05:
            period = 8
            rand = rng.random
            for i in range(period, n):
                if rand() < repetitiveness:
                    pieces[i] = pieces[i - period]
        return pieces

    def tool_call(self, rng: random.Random, tool: dict, malformed: bool) -> tuple[str, list[str]]:
        """(name, argument fragments) for a call to `tool`; fragments are whole tokens."""
        fn = tool.get("function") or {}
        name = str(fn.get("name", "tool"))
        params = fn.get("parameters") or {}
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        args = {}
        for key, schema in props.items():
            if key in required or rng.random() < 0.5:
                args[key] = self._value(rng, schema if isinstance(schema, dict) else {})
        text = orjson.dumps(args).decode()
        if malformed:
            text = text[: max(1, len(text) - rng.randint(1, 3))]  # cut the closing tokens off
        pieces = [self.tok.decode([t]) for t in self.tok.encode(text)]
        return name, pieces

    def _value(self, rng: random.Random, schema: dict, depth: int = 0) -> object:
        if "enum" in schema and schema["enum"]:
            return rng.choice(schema["enum"])
        kind = schema.get("type", "string")
        if isinstance(kind, list):
            kind = kind[0] if kind else "string"
        if kind == "integer":
            return rng.randint(0, 1000)
        if kind == "number":
            return round(rng.uniform(0, 100), 2)
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "array":
            raw_items = schema.get("items")
            items: dict = raw_items if isinstance(raw_items, dict) else {}
            return [self._value(rng, items, depth + 1) for _ in range(rng.randint(1, 3))]
        if kind == "object" and depth < 3:
            props = schema.get("properties") or {}
            return {
                k: self._value(rng, v, depth + 1) for k, v in props.items() if isinstance(v, dict)
            }
        return "".join(rng.choices(self.words, k=rng.randint(1, 4))).strip()
