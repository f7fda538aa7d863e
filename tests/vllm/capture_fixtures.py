"""Capture real vLLM wire samples into tests/fixtures/vllm_real/ (re-runnable).

Starts the real server (tests/vllm/server.py), sends a fixed set of small
requests at temperature 0 and writes each response body byte-for-byte, plus
index.json with the request, status and response headers of every exchange.
The samples are the reference the simulator and the parsers are held to.

    .venv/bin/python -m tests.vllm.capture_fixtures [--url http://127.0.0.1:PORT]

With --url it talks to an already running server started with
tests/vllm/server.py's flags (served model name agentload-tiny).
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

from tests.vllm.server import SERVED_MODEL_NAME, SERVER_FLAGS, VllmServer

OUT = Path(__file__).resolve().parents[1] / "fixtures/vllm_real"
M = SERVED_MODEL_NAME

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the workspace",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite",
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        },
    },
]
# Repetitive text: n-gram speculation finds matches, so acceptance shows.
REPEAT = "the agent reads the file and the agent runs the tests. " * 20
# ~1k tokens of shared prefix for the prefix-cache pair.
LONG_PREFIX = " ".join(
    f"line {i}: search result {i * 7 % 101} for the query about caching." for i in range(120)
)
KEEP_HEADERS = ("content-type", "transfer-encoding", "content-length", "x-request-id", "server")


class Capturer:
    def __init__(self, base_url: str) -> None:
        u = urlsplit(base_url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.index: dict[str, dict] = {}

    def exchange(
        self,
        name: str,
        method: str,
        path: str,
        body: object = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        note: str = "",
    ) -> bytes:
        """One request; the response body goes to OUT/name verbatim."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers=hdrs if data is not None else (headers or {}))
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        (OUT / name).write_bytes(payload)
        self.index[name] = {
            "request": {
                "method": method,
                "path": path,
                **({"headers": headers} if headers else {}),
                **({"body": _shorten(body)} if body is not None else {}),
                **({"raw_body": raw.decode(errors="replace")} if raw is not None else {}),
            },
            "status": resp.status,
            "response_headers": {
                k.lower(): v for k, v in resp.getheaders() if k.lower() in KEEP_HEADERS
            },
            **({"note": note} if note else {}),
        }
        print(f"  {resp.status} {method} {path} -> {name} ({len(payload)} B)", flush=True)
        return payload


def _shorten(obj: object, limit: int = 200) -> object:
    """Long strings in request bodies are recorded as a head plus their length."""
    if isinstance(obj, str) and len(obj) > limit:
        return f"{obj[:80]}... <{len(obj)} chars>"
    if isinstance(obj, dict):
        return {k: _shorten(v, limit) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shorten(v, limit) for v in obj]
    return obj


def chat(messages: list[dict], **kw: object) -> dict:
    return {"model": M, "messages": messages, "temperature": 0, "seed": 7, **kw}


STREAM = {"stream": True, "stream_options": {"include_usage": True}}


def capture(c: Capturer) -> None:
    """The fixed set of exchanges; keep each response small."""
    c.exchange("models.json", "GET", "/v1/models")
    c.exchange("version.json", "GET", "/version")
    c.exchange(
        "server_info.txt",
        "GET",
        "/server_info",
        note="only served with VLLM_SERVER_DEV_MODE=1; otherwise 404",
    )
    user = [{"role": "user", "content": "Summarise: " + REPEAT}]
    c.exchange(
        "chat_stream.sse",
        "POST",
        "/v1/chat/completions",
        chat(user, max_tokens=16, **STREAM),
        headers={"X-Request-Id": "agentload-s1-step1-a0"},
        note="X-Request-Id header becomes the response id (chatcmpl-<id>)",
    )
    c.exchange(
        "chat_stream_no_usage.sse",
        "POST",
        "/v1/chat/completions",
        chat([{"role": "user", "content": "hi"}], max_tokens=4, stream=True),
        note="stream without stream_options.include_usage: no usage/metrics chunk",
    )
    c.exchange("chat_nonstream.json", "POST", "/v1/chat/completions", chat(user, max_tokens=16))
    c.exchange(
        "chat_stream_tool_call.sse",
        "POST",
        "/v1/chat/completions",
        chat(
            [{"role": "user", "content": "Read README.md then run the tests."}],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "read_file"}},
            max_tokens=40,
            **STREAM,
        ),
        note="named tool_choice: guided JSON, random weights give garbage arguments",
    )
    c.exchange(
        "chat_nonstream_tool_required.json",
        "POST",
        "/v1/chat/completions",
        chat(
            [{"role": "user", "content": "Run the tests."}],
            tools=TOOLS,
            tool_choice="required",
            max_tokens=40,
        ),
    )
    c.exchange(
        "chat_stream_tool_auto.sse",
        "POST",
        "/v1/chat/completions",
        chat(
            [{"role": "user", "content": "Run the tests."}],
            tools=TOOLS,
            tool_choice="auto",
            max_tokens=8,
            **STREAM,
        ),
        note="auto: the random model never emits <tool_call>, so plain content",
    )
    # Actual-history mode: the model's own (malformed) call goes back in the history.
    history = [
        {"role": "user", "content": "Read README.md."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "READ'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "# agentload"},
    ]
    c.exchange(
        "chat_malformed_tool_args_in_history.json",
        "POST",
        "/v1/chat/completions",
        chat(history, tools=TOOLS, max_tokens=4),
        note="assistant tool_call arguments that are not valid JSON sent back in history",
    )
    c.exchange(
        "completions_stream.sse",
        "POST",
        "/v1/completions",
        {"model": M, "prompt": REPEAT, "max_tokens": 16, "temperature": 0, **STREAM},
    )
    c.exchange(
        "completions_nonstream.json",
        "POST",
        "/v1/completions",
        {"model": M, "prompt": "The agent", "max_tokens": 8, "temperature": 0},
    )
    # Prefix cache: the same ~1k-token prompt twice; the second reports cached_tokens.
    for i in (1, 2):
        c.exchange(
            f"chat_prefix_cache_{i}.json",
            "POST",
            "/v1/chat/completions",
            chat(
                [
                    {"role": "system", "content": LONG_PREFIX},
                    {"role": "user", "content": f"question {i}"},
                ],
                max_tokens=2,
            ),
            note="same long system prompt twice: cached_tokens in whole KV blocks",
        )
    c.exchange(
        "tokenize_prompt.json",
        "POST",
        "/tokenize",
        {"model": M, "prompt": "The agent reads the file."},
    )
    c.exchange(
        "tokenize_messages.json",
        "POST",
        "/tokenize",
        {
            "model": M,
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Read README.md."},
            ],
            "add_generation_prompt": True,
        },
    )
    c.exchange("detokenize.json", "POST", "/detokenize", {"model": M, "tokens": [10, 300, 2000]})
    c.exchange(
        "error_unknown_model.json",
        "POST",
        "/v1/chat/completions",
        {
            "model": "no-such-model",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        },
    )
    c.exchange(
        "error_invalid_json.json",
        "POST",
        "/v1/chat/completions",
        raw=b'{"model": "x", "messages": [',
    )
    c.exchange(
        "error_prompt_too_long.json",
        "POST",
        "/v1/chat/completions",
        chat([{"role": "user", "content": "word " * 9000}], max_tokens=16),
    )
    c.exchange(
        "error_max_tokens_too_large.json",
        "POST",
        "/v1/completions",
        {"model": M, "prompt": "hi", "max_tokens": 9000},
    )
    c.exchange(
        "chat_priority_without_policy.json",
        "POST",
        "/v1/chat/completions",
        chat([{"role": "user", "content": "hi"}], max_tokens=2, priority=5),
        note="accepted (200) although the server runs the default fcfs policy",
    )
    c.exchange(
        "chat_extras_accepted.json",
        "POST",
        "/v1/chat/completions",
        chat(
            [{"role": "user", "content": "hi"}],
            max_completion_tokens=3,
            min_tokens=3,
            ignore_eos=True,
            cache_salt="run-1",
        ),
        note="vLLM request extras accepted without extra server flags",
    )
    c.exchange("metrics.txt", "GET", "/metrics", note="after all the requests above")


def trim_startup_log(text: str) -> str:
    """Keep the lines an operator (and server-log parsing) cares about.

    Everything identifying up to "Application startup complete", then only
    the first line of each runtime WARNING/ERROR (no tracebacks, no periodic
    throughput lines).
    """
    keep = re.compile(
        r"(vLLM API server version|non-default args|Initializing a V1 LLM engine|"
        r"model runner|Model Runner|KV cache|kv cache|GPU KV|CPU KV|num_gpu_blocks|"
        r"Maximum concurrency|speculative|Speculative|prefix|Prefix|chunked|"
        r"tool|Tool|chat template|Chat template|Starting vLLM|Route: /v1|"
        r"Application startup complete|WARNING|fallback|Falling back|dtype|"
        r"Loading weights took|Model loading took|init engine|Uvicorn|Started server)"
    )
    out: list[str] = []
    started = False
    last_err = ""
    for line in text.splitlines():
        if started:
            m = re.search(r"(WARNING|ERROR) \S+ \S+ \[([^\]]+)\]", line)
            if m and m.group(2) != last_err and "Traceback" not in line and "HTTP/1.1" not in line:
                out.append(line if len(line) < 400 else line[:400] + " ...")
            last_err = m.group(2) if m else ""
            continue
        if "Application startup complete" in line:
            started = True
            out.append(line)
            out.append("# --- runtime warnings/errors during the capture (first line of each) ---")
            continue
        if keep.search(line):
            # engine config lines are huge; the head is what identifies them
            out.append(line if len(line) < 600 else line[:600] + " ...")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Capture (starting a server unless --url is given)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url")
    p.add_argument("--log", type=Path, default=Path("/tmp/agentload-vllm-capture.log"))
    a = p.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    srv = None
    if not a.url:
        srv = VllmServer(log_path=a.log)
        srv.start()
    try:
        c = Capturer(a.url or srv.base_url)  # type: ignore[union-attr]
        capture(c)
        # Read the log before stopping: shutdown noise is not part of the sample.
        if a.log.exists():
            (OUT / "server_startup.log").write_text(
                trim_startup_log(a.log.read_text(errors="replace"))
            )
    finally:
        if srv:
            srv.stop()
    version = json.loads((OUT / "version.json").read_text())["version"]
    index = {
        "vllm_version": version,
        "served_model_name": M,
        "server_flags": list(SERVER_FLAGS),
        "exchanges": c.index,
    }
    (OUT / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"wrote {len(c.index)} samples to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
