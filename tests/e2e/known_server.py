"""A tiny OpenAI-compatible server with known timing, for end-to-end checks.

It streams a role-only chunk at once, the first content after `content_delay_s`,
further content every `gap_s`, then a final usage chunk (with vLLM's `metrics`
and `speculative_decoding`) and [DONE]. It remembers every X-Request-Id it saw, and the
W3C `traceparent` header each came with.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SPEC = {
    "mean_acceptance_length": 2.5,
    "draft_acceptance_rate": 0.5,
    "acceptance_histogram": [1, 1, 1, 1],
    "num_spec_steps": 4,
    "num_accepted_draft_tokens": 6,
    "num_draft_tokens": 12,
    "num_spec_tokens": 3,
}


class KnownServer:
    def __init__(
        self,
        content_delay_s: float = 0.2,
        gap_s: float = 0.01,
        chunks: int = 5,
        cached_tokens: int = 32,
        model: str = "known-model",
    ) -> None:
        self.content_delay_s = content_delay_s
        self.gap_s = gap_s
        self.chunks = chunks
        self.cached_tokens = cached_tokens
        self.model = model
        self.seen: list[str] = []
        self.traceparents: dict[str, str | None] = {}  # request id -> its traceparent header
        # request id -> (request read, first content chunk written), perf_counter_ns
        self.timings: dict[str, tuple[int, int]] = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _json(self, code: int, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                if self.path == "/v1/models":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": outer.model,
                                    "object": "model",
                                    "max_model_len": 32768,
                                    "root": outer.model,
                                }
                            ],
                        },
                    )
                else:
                    self._json(
                        404, {"error": {"message": "not found", "type": "NotFound", "code": 404}}
                    )

            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n) or b"{}")
                t_recv = time.perf_counter_ns()
                rid = self.headers.get("X-Request-Id", "")
                with outer.lock:
                    outer.seen.append(rid)
                    outer.traceparents[rid] = self.headers.get("traceparent")
                if not req.get("stream"):
                    self._json(
                        200,
                        {
                            "id": f"chatcmpl-{rid}",
                            "object": "chat.completion",
                            "model": outer.model,
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": "hi"},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 100,
                                "completion_tokens": 2,
                                "total_tokens": 102,
                                "prompt_tokens_details": {"cached_tokens": outer.cached_tokens},
                            },
                            "metrics": {"speculative_decoding": SPEC},
                        },
                    )
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def send(obj) -> None:
                    data = obj if isinstance(obj, str) else json.dumps(obj)
                    payload = f"data: {data}\n\n".encode()
                    self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                    self.wfile.flush()

                base = {
                    "id": f"chatcmpl-{rid}",
                    "object": "chat.completion.chunk",
                    "model": outer.model,
                }
                is_chat = self.path.endswith("/chat/completions")
                if is_chat:
                    send(
                        {
                            **base,
                            "choices": [
                                {"index": 0, "delta": {"role": "assistant", "content": ""}}
                            ],
                        }
                    )
                time.sleep(outer.content_delay_s)
                for i in range(outer.chunks):
                    if i:
                        time.sleep(outer.gap_s)
                    choice = (
                        {"index": 0, "delta": {"content": f"tok{i} "}}
                        if is_chat
                        else {"index": 0, "text": f"tok{i} "}
                    )
                    send({**base, "choices": [choice]})
                    if i == 0:
                        with outer.lock:
                            outer.timings[rid] = (t_recv, time.perf_counter_ns())
                send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                send(
                    {
                        **base,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 100,
                            "completion_tokens": outer.chunks,
                            "total_tokens": 100 + outer.chunks,
                            "prompt_tokens_details": {"cached_tokens": outer.cached_tokens},
                        },
                        "metrics": {"speculative_decoding": SPEC},
                    }
                )
                send("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        class Quiet(ThreadingHTTPServer):
            request_queue_size = 1024  # 50+ concurrent connects must not wait in a 5-deep backlog

            def handle_error(self, request, client_address):  # clients stopped mid-stream
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> KnownServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
