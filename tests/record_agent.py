"""A small agent written with the openai SDK, and a TCP tap, for the recording-proxy tests.

The agent (``run_agent``): a tool loop with two tools. Round 0 asks for both at once (a
parallel pair, run concurrently, each sleeping its own time), round 1 for one more, round 2
streams the answer; after a think pause the user asks a follow-up (round 3, no tools). With
``server_tools=False`` (a model that does not call tools) the agent decides the calls itself
and still sends the assistant tool calls and their results, as an agent whose tool calls
come from elsewhere would. Every sleep is timed by the agent itself.

``Tap``: a TCP forwarder on 127.0.0.1 that keeps every byte in both directions per
connection, so a test can compare what a client received with what a server sent.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import openai

REPO = Path(__file__).resolve().parents[1]

SYSTEM = (
    "You are a careful assistant for travel planning. Use the tools when they help, keep "
    "answers short, cite the tool results you used, and never invent a weather report or a "
    "local time. " * 6
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]
SLEEP_S = {"get_weather": 0.15, "get_time": 0.25}
THINK_S = 0.12


@dataclass
class AgentRun:
    """What the agent did and saw."""

    rounds: int = 0
    usage: list[tuple[int, int]] = field(default_factory=list)  # (prompt, completion) per round
    tool_waits: list[float] = field(default_factory=list)  # the tools' own time, per tool round
    gaps: list[float] = field(default_factory=list)  # SDK call returned -> next SDK call, per round
    think: list[float] = field(default_factory=list)
    tools_per_round: list[list[str]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    returned: float | None = None  # when the last SDK call returned (perf_counter)
    wire: WireClock = field(default_factory=lambda: WireClock())


def _gap(run: AgentRun) -> None:
    if run.returned is not None:
        run.gaps.append(time.perf_counter() - run.returned)


class WireClock(httpx2.HTTPTransport):
    """The agent's HTTP transport, stamping (unix s) each request as it goes out and each
    response when its last byte was read: the agent's own view of the wire, without the
    SDK's parsing and request building around it."""

    def __init__(self, keep_alive: bool = True) -> None:
        """``keep_alive=False``: a new connection for every request (so that a recording
        with several proxy processes gets them on all of its processes)."""
        if keep_alive:
            super().__init__()
        else:
            super().__init__(limits=httpx2.Limits(max_connections=10, max_keepalive_connections=0))
        self.sent: list[float] = []
        self.ended: list[float] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(time.time())
        self.ended.append(float("nan"))
        k = len(self.ended) - 1
        resp = super().handle_request(request)
        inner, ended = resp.stream, self.ended

        class _Stamped(httpx2.SyncByteStream):
            def __iter__(self) -> Any:
                for chunk in inner:  # type: ignore[attr-defined]
                    ended[k] = time.time()  # the latest bytes read (a stream: its [DONE])
                    yield chunk

            def close(self) -> None:
                inner.close()  # type: ignore[attr-defined]

        resp.stream = _Stamped()
        return resp

    def gaps(self) -> list[float]:
        """Answer's last byte -> the next request, for each request after the first."""
        return [b - a for a, b in zip(self.ended, self.sent[1:], strict=False)]


def _tool(name: str) -> str:
    time.sleep(SLEEP_S[name])
    return f"{name}: fine"


def _run_tools(calls: list[tuple[str, str]], pool: ThreadPoolExecutor) -> tuple[list[str], float]:
    t0 = time.perf_counter()
    results = list(pool.map(_tool, [n for _, n in calls]))
    return results, time.perf_counter() - t0


def _stream_round(c: openai.OpenAI, model: str, msgs: list[dict[str, Any]], run: AgentRun) -> None:
    stream = c.chat.completions.create(
        model=model, messages=msgs, max_tokens=24, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True}, temperature=0,
    )  # fmt: skip
    text, usage = [], None
    for ch in stream:
        if ch.usage is not None:
            usage = ch.usage
        for choice in ch.choices:
            text.append(choice.delta.content or "")
    assert usage is not None, "the streamed answer carried no usage"
    run.usage.append((usage.prompt_tokens, usage.completion_tokens))
    run.answers.append("".join(text))
    run.tools_per_round.append([])
    msgs.append({"role": "assistant", "content": "".join(text)})
    run.rounds += 1


def run_agent(
    base_url: str, model: str, *, server_tools: bool = True, keep_alive: bool = True, **client: Any
) -> AgentRun:
    """The agent's whole session against ``base_url`` (…/v1); what it did and measured."""
    run = AgentRun(wire=WireClock(keep_alive))
    c = openai.OpenAI(
        base_url=base_url, api_key=client.pop("api_key", "sk-test"), max_retries=0,
        http_client=openai.DefaultHttpxClient(transport=run.wire), **client,
    )  # fmt: skip
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Weather and local time in Lisbon, please."},
    ]
    plan: list[tuple[bool, list[str]]] = [
        (True, ["get_weather", "get_time"]),
        (False, ["get_weather"]),
    ]
    with ThreadPoolExecutor(2) as pool:
        for k, (parallel, names) in enumerate(plan):
            extra: dict[str, Any] = {"tools": TOOLS, "temperature": 0}
            if server_tools:
                extra["tool_choice"] = "required"
                if parallel:
                    extra["parallel_tool_calls"] = True
            else:  # the tools are in the prompt, the model is not asked to call them
                extra["tool_choice"] = "none"
            _gap(run)
            r = c.chat.completions.create(model=model, messages=msgs, max_tokens=40, **extra)  # type: ignore[arg-type]
            run.returned = time.perf_counter()
            m = r.choices[0].message
            assert r.usage is not None
            run.usage.append((r.usage.prompt_tokens, r.usage.completion_tokens))
            run.answers.append(m.content or "")
            if server_tools:
                calls = [(tc.id, tc.function.name) for tc in m.tool_calls or ()]  # type: ignore[union-attr]
                msgs.append(m.model_dump(exclude_none=True))
            else:  # the agent picks the tools; the model's text is its answer
                calls = [(f"call_{k}_{i}", n) for i, n in enumerate(names)]
                msgs.append({
                    "role": "assistant", "content": m.content or "",
                    "tool_calls": [{"id": i, "type": "function",
                                    "function": {"name": n, "arguments": '{"city": "Lisbon"}'}}
                                   for i, n in calls],
                })  # fmt: skip
            run.tools_per_round.append([n for _, n in calls])
            run.rounds += 1
            results, waited = _run_tools(calls, pool)
            run.tool_waits.append(waited)
            for (cid, _), res in zip(calls, results, strict=True):
                msgs.append({"role": "tool", "tool_call_id": cid, "content": res})
    _gap(run)
    _stream_round(c, model, msgs, run)
    run.returned = time.perf_counter()
    t0 = time.perf_counter()
    time.sleep(THINK_S)
    run.think.append(time.perf_counter() - t0)
    msgs.append({"role": "user", "content": "Thanks. Anything to pack?"})
    _gap(run)
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0)  # type: ignore[arg-type]
    assert r.usage is not None
    run.usage.append((r.usage.prompt_tokens, r.usage.completion_tokens))
    run.answers.append(r.choices[0].message.content or "")
    run.tools_per_round.append([])
    run.rounds += 1
    return run


class Tap:
    """A TCP forwarder 127.0.0.1:port -> target keeping both directions' bytes per connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.connections: list[dict[str, bytearray]] = []  # {"up": client->server, "down": ...}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _pipe(
        self, r: asyncio.StreamReader, w: asyncio.StreamWriter, keep: bytearray
    ) -> None:
        try:
            while data := await r.read(65536):
                keep += data
                w.write(data)
                await w.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    async def _conn(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.target_port)
        rec = {"up": bytearray(), "down": bytearray()}
        self.connections.append(rec)
        await asyncio.gather(self._pipe(cr, sw, rec["up"]), self._pipe(sr, cw, rec["down"]))

    def start(self) -> Tap:
        self._thread.start()

        async def serve() -> int:
            self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
            return int(self._server.sockets[0].getsockname()[1])

        self.port = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class RecordProcess:
    """`agentload record` as a child process on a free port; ``stop(sig)`` -> (exit, stdout, stderr)."""

    def __init__(self, upstream: str, out: str, *extra: str) -> None:
        self.cmd = [sys.executable, "-m", "workload.cli", "record", "--upstream", upstream,
                    "--out", out, "--port", "0", *extra]  # fmt: skip
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    def start(self, timeout_s: float = 30.0) -> RecordProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, cwd=REPO)  # fmt: skip
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(
                    f"agentload record exited: {self.proc.stderr.read() if self.proc.stderr else ''}"
                )
            self.lines.append(line)
            m = re.search(r"listening on (http://\S+)/v1 ", line)
            if m:
                self.url = m.group(1)
                return self
        raise RuntimeError("agentload record did not say where it listens")

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 30.0) -> tuple[int, str, str]:
        assert self.proc is not None
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout_s)
        return self.proc.returncode, "".join(self.lines) + out, err
