"""Build a tiny, random-weight chat model that real vLLM can serve on a CPU.

Runs inside the vLLM venv (scripts/setup_vllm_cpu.sh calls it); needs
`tokenizers`, `transformers` and `torch` (vLLM brings them) and `faker` (for
its word list). Nothing is downloaded: the tokenizer is trained here on
generated text.

What the model is for: exercising the wire format, prefix caching, n-gram
speculative decoding and the hermes tool-call parser -- not producing
sensible text. Output of the directory (`--out`):

  config.json, model.safetensors, generation_config.json   Qwen2ForCausalLM
  tokenizer.json, tokenizer_config.json, special_tokens_map.json
  agentload-model.json   what was built (for the fingerprint / test logs)

Example: HF_HUB_OFFLINE=1 python scripts/build_tiny_model.py --out /tmp/tiny
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

# ChatML with tools, close to Qwen2.5's template so vLLM's hermes parser sees
# the format it was written for: calls are emitted as
# <tool_call>{"name": ..., "arguments": {...}}</tool_call>, tool results go
# back in a user turn inside <tool_response>. Arguments may be a dict (vLLM
# parses OpenAI's JSON string before templating) or, if unparsable, a string.
CHAT_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'user' or message.role == 'system' or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- set fn = tool_call.function if tool_call.function is defined else tool_call %}
{{- '\n<tool_call>\n{"name": "' + fn.name + '", "arguments": ' }}
{%- if fn.arguments is string %}{{- fn.arguments }}{%- else %}{{- fn.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
""".strip()

# Control tokens: special (skipped in output text by default).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Tool markup: single tokens but NOT special, as in Qwen2.5, so they survive
# detokenization and the hermes parser finds them in the text and the vocab.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

WORDS = [
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
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "have",
    "not",
    "which",
    "but",
    "all",
    "were",
    "when",
    "we",
    "there",
    "can",
    "more",
    "if",
    "will",
    "one",
    "about",
    "up",
    "out",
    "so",
    "what",
    "agent",
    "tool",
    "call",
    "session",
    "step",
    "user",
    "assistant",
    "system",
    "request",
    "response",
    "token",
    "cache",
    "prefix",
    "context",
    "model",
    "server",
    "latency",
    "stream",
    "chunk",
    "prompt",
    "output",
    "input",
    "result",
    "error",
    "file",
    "path",
    "line",
    "code",
    "test",
    "function",
    "class",
    "return",
    "value",
    "list",
    "dict",
    "string",
    "number",
    "search",
    "read",
    "write",
    "edit",
    "run",
    "build",
    "query",
    "answer",
    "plan",
    "task",
    "search_web",
    "read_file",
    "write_file",
    "run_tests",
    "get_weather",
    "location",
    "units",
    "celsius",
    "city",
    "json",
    "schema",
    "object",
    "array",
    "boolean",
    "null",
    "true",
    "false",
    "data",
    "report",
    "summary",
    "analysis",
    "source",
    "document",
    "page",
]

CODE_LINES = [
    "def {w}({a}, {b}):\n    return {a} + {b}\n",
    "for {a} in range({n}):\n    print({a})\n",
    "if {a} is None:\n    raise ValueError('{w}')\n",
    "class {W}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n",
    "import {w}\nfrom {w} import {b}\n",
    "{a} = [{n}, {m}, {n}]\n",
]


def lorem_words() -> list[str]:
    """faker's en_US lorem words: agentload's token-exact prompts are built from them.

    workload.plan.prompts needs at least 100 of these to be single tokens (with a
    leading space) under the server's tokenizer for `--tokenizer server`; the
    corpus below makes nearly all of them single tokens.
    """
    from faker.providers.lorem.en_US import Provider

    return sorted({w for w in Provider.word_list if w.isascii() and w.isalpha()})


def generate_corpus(seed: int, n_chars: int) -> list[str]:
    """Seeded mix of prose, JSON tool calls, code and numbers (BPE training text)."""
    rng = random.Random(seed)
    prose = lorem_words() + WORDS
    out: list[str] = []
    total = 0
    while total < n_chars:
        kind = rng.random()
        if kind < 0.6:
            words = [rng.choice(prose) for _ in range(rng.randint(8, 40))]
            s = " ".join(words).capitalize() + rng.choice([".", "?", "!", ":"])
        elif kind < 0.75:
            args = {
                rng.choice(WORDS): rng.choice([rng.choice(WORDS), rng.randint(0, 999)])
                for _ in range(rng.randint(1, 3))
            }
            s = (
                "<tool_call>\n"
                + json.dumps({"name": rng.choice(WORDS), "arguments": args})
                + "\n</tool_call>"
            )
        elif kind < 0.92:
            s = rng.choice(CODE_LINES).format(
                w=rng.choice(WORDS),
                W=rng.choice(WORDS).capitalize(),
                a=rng.choice(WORDS),
                b=rng.choice(WORDS),
                n=rng.randint(0, 100),
                m=rng.randint(0, 10000),
            )
        else:
            s = " ".join(
                str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(rng.randint(3, 12))
            )
        out.append(s)
        total += len(s)
    return out


def build_tokenizer(vocab_size: int, seed: int):
    """Byte-level BPE (every byte encodable) with ChatML and hermes tool tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(generate_corpus(seed, 3_000_000), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer, *, hidden: int, layers: int, max_len: int, dtype: str, seed: int):
    """Random-weight Qwen2ForCausalLM sized to the tokenizer."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    vocab = ((len(tokenizer) + 63) // 64) * 64  # padded like real checkpoints
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_len,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        torch_dtype=dtype,
    )
    model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[config.eos_token_id, config.bos_token_id],
        pad_token_id=config.bos_token_id,
    )
    return model


def main(argv: list[str] | None = None) -> int:
    """Build tokenizer + model into --out."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--max-len", type=int, default=8192, help="max_position_embeddings")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)

    t0 = time.monotonic()
    a.out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(a.vocab_size, a.seed)
    tokenizer.model_max_length = a.max_len
    tokenizer.save_pretrained(a.out)
    single = sum(
        1 for w in lorem_words() if len(tokenizer.encode(" " + w, add_special_tokens=False)) == 1
    )
    print(
        f"  tokenizer: {len(tokenizer)} tokens, {single} lorem words are one token "
        f"({time.monotonic() - t0:.1f} s)",
        flush=True,
    )
    if single < 300:
        raise SystemExit(f"only {single} lorem words are single tokens; agentload needs >= 100")

    model = build_model(
        tokenizer, hidden=a.hidden, layers=a.layers, max_len=a.max_len, dtype=a.dtype, seed=a.seed
    )
    model.save_pretrained(a.out, safe_serialization=True)
    n_params = sum(p.numel() for p in model.parameters())
    info = {
        "builder": "agentload scripts/build_tiny_model.py",
        "architecture": "Qwen2ForCausalLM",
        "params": n_params,
        "vocab_size": model.config.vocab_size,
        "tokenizer_tokens": len(tokenizer),
        "hidden_size": a.hidden,
        "num_hidden_layers": a.layers,
        "max_position_embeddings": a.max_len,
        "dtype": a.dtype,
        "seed": a.seed,
        "special_tokens": SPECIAL_TOKENS,
        "tool_tokens": TOOL_TOKENS,
        "single_token_lorem_words": single,
    }
    (a.out / "agentload-model.json").write_text(json.dumps(info, indent=2) + "\n")
    # Sanity: the template renders a tool-using conversation.
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<tool_call>" in rendered and rendered.endswith("<|im_start|>assistant\n"), rendered
    print(
        f"  model: {n_params / 1e6:.2f} M params, {a.dtype} ({time.monotonic() - t0:.1f} s)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
