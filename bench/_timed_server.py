"""A known-timing OpenAI-compatible chat server for the benchmarks, in its own process.

Single-threaded asyncio on raw sockets, so its stamps are not delayed by a GIL shared with
handler threads; a request's arrival is the kernel's receive time of its last bytes. Every POST is answered as a streamed chat completion: a role-only chunk at
once, the first content chunk after ``ttft_s``, then one content chunk every ``itl_s`` up to
``tokens``, a usage chunk and ``data: [DONE]``. Any GET gets a one-model /v1/models list.

Per X-Request-Id it records wall-clock nanoseconds (``time.time_ns``, comparable with the
client's ``t_start`` on the same machine): request read, first content chunk written, last
content chunk written, content chunks, largest gap between content chunks, and events written.
On stop it writes them as JSON ``{request_id: [arrive, first, last, n, max_gap, events]}``.

    srv = TimedServer(ttft_s=0.2, itl_s=0.02, tokens=100).start()
    ...  # drive http://127.0.0.1:{srv.port}
    timings = srv.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import socket
import tempfile
import time
from pathlib import Path

MODELS = json.dumps(
    {"object": "list", "data": [{"id": "known", "object": "model", "max_model_len": 32768}]}
).encode()
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
# Marker a client may look for to spot a content-bearing chunk (the role chunk's content is "").
CONTENT_MARK = b'"content":"t'


# Request arrival is the kernel's receive time of the request's last bytes (Linux
# SO_TIMESTAMPNS, read as agentload's transport reads it), not when this loop got round to
# reading them: a busy loop would otherwise shorten the server's TTFT by its own lateness
# and put that into the client's "TTFT error". Without it, arrival is when the read returned.


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def _event(json_bytes: bytes) -> bytes:
    return _chunked(b"data: " + json_bytes + b"\n\n")


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def serve(
    port_q: mp.Queue, stop_fd: int, out_path: str, ttft_s: float, itl_s: float, tokens: int
) -> None:
    """The server's process body; writes the timings to ``out_path`` when stop_fd is readable."""
    # here, not at module level: the raw floor client imports this module too
    from workload.measure.transport import RX_ANC_SPACE, SO_TIMESTAMPNS, kernel_ns

    timings: dict[str, list[int]] = {}
    now = time.time_ns

    async def stream(sock: socket.socket, rid: str, t_arrive: int) -> None:
        loop = asyncio.get_running_loop()
        # the first content is due ttft_s after the request arrived, not after it was read
        due = loop.time() + ttft_s - max(now() - t_arrive, 0) / 1e9
        head = (
            b'{"id":"chatcmpl-%s","object":"chat.completion.chunk","model":"known","choices":'
            % (rid.encode())
        )
        await loop.sock_sendall(
            sock,
            SSE_HEAD + _event(head + b'[{"index":0,"delta":{"role":"assistant","content":""}}]}'),
        )
        rec = [t_arrive, 0, 0, 0, 0, 1]  # filled as chunks go out, so a cut stream still counts
        for i in range(tokens):
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await loop.sock_sendall(
                sock, _event(head + b'[{"index":0,"delta":{"content":"t%d "}}]}' % i)
            )
            t = now()
            if i == 0:
                rec[1] = t
                timings[rid] = rec
            else:
                rec[4] = max(rec[4], t - rec[2])
            rec[2] = t
            rec[3] += 1
            rec[5] += 1
            due += itl_s
        usage = b'{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}' % (
            tokens,
            tokens + 10,
        )
        await loop.sock_sendall(
            sock, _event(head + b'[],"usage":' + usage + b"}") + _event(b"[DONE]") + b"0\r\n\r\n"
        )
        rec[5] += 2

    async def read_more(sock: socket.socket) -> tuple[bytes, int]:
        """Wait for bytes; return them with their arrival (kernel stamp, else when read)."""
        loop = asyncio.get_running_loop()
        while True:
            try:  # the kernel's receive stamp of the read's newest bytes (0: none)
                data, anc, _flags, _addr = sock.recvmsg(65536, RX_ANC_SPACE)
                return data, kernel_ns(anc) or now()
            except BlockingIOError:
                pass
            ready = loop.create_future()
            loop.add_reader(sock.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())

    async def handle(sock: socket.socket) -> None:
        buf, arrived = b"", 0
        try:
            while True:
                end = -1
                while True:
                    head_end = buf.find(b"\r\n\r\n")
                    if head_end >= 0:
                        lines = buf[:head_end].decode().split("\r\n")
                        hdrs = {
                            k.lower(): v.strip()
                            for k, _, v in (x.partition(":") for x in lines[1:] if x)
                        }
                        end = head_end + 4 + int(hdrs.get("content-length", "0"))
                        if len(buf) >= end:
                            break
                    data, arrived = await read_more(sock)
                    if not data:
                        return
                    buf += data
                # the request's last bytes came with the read stamped `arrived`
                method = lines[0].split(" ", 1)[0]
                buf, t_arrive = buf[end:], arrived
                if method == "GET":
                    await asyncio.get_running_loop().sock_sendall(
                        sock,
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(MODELS) + MODELS,
                    )
                    continue
                await stream(sock, hdrs.get("x-request-id", ""), t_arrive)
        except (ConnectionError, OSError):
            pass
        finally:
            sock.close()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        with contextlib.suppress(OSError):  # inherited by accepted sockets: a request that
            lsock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # came before accept too
        lsock.listen(4096)
        lsock.setblocking(False)
        port_q.put(lsock.getsockname()[1])
        stop = loop.create_future()
        loop.add_reader(stop_fd, lambda: stop.done() or stop.set_result(None))
        tasks: set[asyncio.Task] = set()

        async def accept() -> None:
            while True:
                conn, _ = await loop.sock_accept(lsock)
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with contextlib.suppress(OSError):  # no kernel stamps: stamped when read
                    conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                t = loop.create_task(handle(conn))
                tasks.add(t)
                t.add_done_callback(tasks.discard)

        acceptor = loop.create_task(accept())
        await stop
        acceptor.cancel()
        for t in list(tasks):
            t.cancel()
        Path(out_path).write_text(json.dumps(timings))
        lsock.close()

    asyncio.run(main())


class TimedServer:
    """Start/stop handle for the server process; ``stop`` returns its timings."""

    def __init__(self, ttft_s: float = 0.2, itl_s: float = 0.02, tokens: int = 100) -> None:
        self.ttft_s, self.itl_s, self.tokens = ttft_s, itl_s, tokens
        self.port = 0
        self._dir = tempfile.TemporaryDirectory(prefix="timed-server-")
        self._out = str(Path(self._dir.name) / "timings.json")
        self._proc: mp.process.BaseProcess | None = None
        self._stop_w = -1
        self._t0 = 0.0
        self.cpu_s = 0.0  # the server's own CPU, read at stop
        self.wall_s = 0.0

    def start(self) -> TimedServer:
        r, self._stop_w = os.pipe()
        q: mp.Queue = mp.get_context("fork").Queue()
        self._proc = mp.get_context("fork").Process(
            target=serve, args=(q, r, self._out, self.ttft_s, self.itl_s, self.tokens), daemon=True
        )
        self._proc.start()
        self._t0 = time.monotonic()
        os.close(r)
        self.port = q.get(timeout=10)
        return self

    def stop(self) -> dict[str, list[int]]:
        """Stop the server; per request id: [arrive, first, last, n, max_gap, events] (ns)."""
        assert self._proc is not None
        self.wall_s = time.monotonic() - self._t0
        with open(f"/proc/{self._proc.pid}/stat") as f:  # utime + stime, in clock ticks
            fields = f.read().rsplit(")", 1)[1].split()
        self.cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        os.write(self._stop_w, b"x")
        os.close(self._stop_w)
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()
        try:
            return json.loads(Path(self._out).read_text())
        except FileNotFoundError:
            return {}
        finally:
            self._dir.cleanup()
