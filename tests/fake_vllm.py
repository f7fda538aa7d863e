"""A tiny fake vLLM HTTP server for the observe tests: fixed routes on 127.0.0.1."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeVLLM:
    """A tiny HTTP server on 127.0.0.1 answering fixed routes; records request headers."""

    def __init__(self, routes: dict[str, tuple[int, str, str]]):
        self.routes = routes
        self.auth_headers: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                outer.auth_headers.append(self.headers.get("Authorization"))
                status, ctype, body = outer.routes.get(self.path, (404, "text/plain", "nope"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def text(body: str, status: int = 200) -> tuple[int, str, str]:
    return status, "text/plain; version=0.0.4", body


def js(obj) -> tuple[int, str, str]:
    return 200, "application/json", json.dumps(obj)
