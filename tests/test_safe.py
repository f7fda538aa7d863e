"""Safe output (issue 14): server strings sanitized for the terminal, URL credentials redacted."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from tests.fake_vllm import FakeVLLM, js
from workload.observe.http_get import http_get
from workload.observe.safe import redact_url, redact_urls_in, sanitize
from workload.observe.target import SetupError, probe_target


def test_sanitize_strips_escapes_and_controls():
    hostile = "ok\x1b[2J\x1b[31mred\x1b[0m\x1b]0;pwned\x07 \x1b]8;;http://x\x1b\\link\x9b1m\x07\x08\u202egnp\r\nend"
    out = sanitize(hostile)
    assert out == "okred linkgnp end"
    assert all(c >= " " for c in out)
    assert sanitize("a\nb", keep_newlines=True) == "a\nb"
    assert sanitize(42) == "42"
    assert sanitize("plain: ünïcode ✓ \t tab") == "plain: ünïcode ✓ \t tab"


@pytest.mark.parametrize(
    "url, want",
    [
        ("http://user:pass@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
        ("https://tok@host/x?q=1", "https://***@host/x?q=1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://a:b@[::1]:9", "http://***@[::1]:9"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url(url, want):
    assert redact_url(url) == want


def test_redact_urls_in_text():
    assert redact_urls_in("GET http://u:p@h:1/x failed; see https://k@y") == (
        "GET http://***@h:1/x failed; see https://***@y"
    )


def test_probe_never_echoes_the_password():
    with pytest.raises(SetupError) as e:
        probe_target("http://alice:hunter2@127.0.0.1:9", None, None, timeout_s=2)
    assert "hunter2" not in str(e.value) and "***@" in str(e.value)


def test_probe_sanitizes_model_ids_in_messages():
    evil = "m\x1b]0;owned\x07\x1b[2J"
    with FakeVLLM({"/v1/models": js({"data": [{"id": evil}]})}) as srv:
        with pytest.raises(SetupError) as e:
            probe_target(srv.url, None, "other\x1b[31m", timeout_s=5)
        assert "\x1b" not in str(e.value) and "\x07" not in str(e.value)
        got = probe_target(srv.url, None, None, timeout_s=5)
    assert got["model"] == evil  # requests still carry the id as served


def test_probe_refuses_non_string_model_ids():
    with (
        FakeVLLM(
            {"/v1/models": (200, "application/json", json.dumps({"data": [{"id": 5}]}))}
        ) as srv,
        pytest.raises(SetupError, match="without a model list"),
    ):
        probe_target(srv.url, None, None, timeout_s=5)


class _NotHTTP:
    """A TCP server on 127.0.0.1 that answers every connection with bytes that are not HTTP."""

    def __init__(self, reply: bytes = b"SSH-2.0-OpenSSH_9.6\r\n\r\n") -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(self.reply)

    def __enter__(self) -> _NotHTTP:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_a_target_that_answers_non_http_bytes_is_one_setup_error():
    with _NotHTTP() as srv, pytest.raises(SetupError, match="did not answer in HTTP") as e:
        probe_target(srv.url, None, None, timeout_s=5)
    assert "\n" not in str(e.value)
    with _NotHTTP() as srv:
        status, reason = http_get(srv.url, "/metrics", None, 5)
    assert status is None and "BadStatusLine" in str(reason)


@pytest.mark.parametrize(
    ("served", "want"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("4k", None),
        (-1, None),
        (True, None),
        ([1], None),
        (None, None),
    ],
)
def test_a_wrong_typed_max_model_len_from_the_server_is_unknown(served, want):
    models = {"data": [{"id": "m", "max_model_len": served, "root": 7}]}
    with FakeVLLM({"/v1/models": js(models)}) as srv:
        got = probe_target(srv.url, None, None, timeout_s=5)
    assert got["max_model_len"] == want and got["root"] is None
