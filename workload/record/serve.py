"""Running a recording: the proxy on an event loop, the recorder in its own process, one stop path.

``record(options)`` serves until a stop signal (SIGINT, SIGTERM, SIGHUP): the first stops
accepting, lets in-flight exchanges finish for ``grace_s`` (a second signal cuts them now:
recorded as ``stopped``), then the trace is completed and summarized; the exit status is
128 + the signal. ``RecordThread`` runs the same in a background thread (tests, notebooks).

The loop is uvloop's where it is installed (a dependency on Linux and macOS: its C loop
calls each read's callback straight from libuv, without asyncio's selector and handle per
read, which is what 50 streams' events arriving together wait on), else asyncio's own;
``AGENTLOAD_RECORD_LOOP=asyncio`` picks asyncio's (to compare the two). Which one ran is in
the start-up line and ``summary.json`` (``recorder.event_loop``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import queue
import signal
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload.errors import SetupError, UsageError
from workload.plan.tokens import ServerTokenizer, TiktokenTokenizer
from workload.record.extract import Facts
from workload.record.proxy import RecordingProxy, Upstream
from workload.record.recorder import Recorder, summary_lines
from workload.stopping import (
    STOP_SIGNALS,
    StopLatch,
    exit_code_for_signal,
    set_parent_death_signal,
    signal_name,
)

try:
    import uvloop  # type: ignore[import-not-found]  # a dependency except on Windows
except ImportError:  # Windows (uvloop does not build there) or an install without it
    uvloop = None  # type: ignore[assignment]

GRACE_S = 10.0
SWITCH_INTERVAL_S = 0.0005
LOOP_ENV = "AGENTLOAD_RECORD_LOOP"
LOOPS = ("auto", "uvloop", "asyncio")  # auto: uvloop's where installed


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """What `agentload record` was asked for (validated by the CLI)."""

    upstream: Upstream
    out: Path
    host: str = "127.0.0.1"
    port: int = 8100
    session_header: str | None = None
    keep_content: bool = False
    tokenizer: str = "tiktoken"
    subagents: bool = True
    grace_s: float = GRACE_S


def event_loop() -> str:
    """The proxy's event loop, "uvloop" or "asyncio": uvloop's when installed, unless
    ``AGENTLOAD_RECORD_LOOP`` says otherwise (auto, uvloop, asyncio)."""
    want = os.environ.get(LOOP_ENV, "").strip().lower() or "auto"
    if want not in LOOPS:
        raise UsageError(
            f"{LOOP_ENV}={want} is not an event loop", hint="give auto, uvloop or asyncio"
        )
    if want == "uvloop" and uvloop is None:
        raise SetupError(f"{LOOP_ENV}=uvloop, but uvloop is not installed",
                         hint="pip install uvloop, or unset it (asyncio's loop then runs)")  # fmt: skip
    return "uvloop" if uvloop is not None and want != "asyncio" else "asyncio"


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new event loop of that name (``event_loop``)."""
    return uvloop.new_event_loop() if name == "uvloop" else asyncio.new_event_loop()


def _counters(o: RecordOptions) -> tuple[Any, Callable[[Facts, int], int], Callable[[str], int]]:
    """(encode for the block hashes, prompt counter, text counter) for --tokenizer."""
    tok = (
        TiktokenTokenizer(o.tokenizer.partition(":")[2] or "cl100k_base")
        if o.tokenizer != "server"
        else TiktokenTokenizer()
    )
    if o.tokenizer != "server":
        return tok.encode, lambda _f, local: local, tok.count
    servers: dict[str, ServerTokenizer] = {}

    def count_prompt(f: Facts, local: int) -> int:
        srv = servers.setdefault(f.model or "", ServerTokenizer(o.upstream.url, f.model or ""))
        if f.kind == "chat":
            return srv.count_messages([{"role": m.role, "content": m.text} for m in f.messages])
        return srv.count(f.prompt_text or "")

    def count_text(text: str) -> int:
        srv = next(iter(servers.values()), None)
        return srv.count(text) if srv is not None else tok.count(text)

    return tok.encode, count_prompt, count_text


def make_recorder(o: RecordOptions, loop: str) -> Recorder:
    encode, count_prompt, count_text = _counters(o)
    meta = {
        "upstream": o.upstream.url,
        "listen": f"{o.host}:{o.port}",
        "event_loop": loop,
        "session_header": o.session_header,
        "tokenizer": o.tokenizer,
        "subagents": "infer" if o.subagents else "off",
    }
    return Recorder(
        o.out, encode=encode, count_prompt=count_prompt, count_text=count_text,
        keep_content=o.keep_content, subagents=o.subagents, meta=meta,
    )  # fmt: skip


async def _start(o: RecordOptions, sink: Callable[[Any], None]) -> tuple[RecordingProxy, int]:
    proxy = RecordingProxy(o.upstream, sink, session_header=o.session_header)
    try:
        port = await proxy.start(o.host, o.port)
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else str(e)
        raise SetupError(
            f"cannot listen on {o.host}:{o.port} ({reason})",
            hint="pick another --port (0 picks a free one)",
        ) from None
    return proxy, port


def record(o: RecordOptions, *, out: Any = None) -> int:
    """Serve until a stop signal; the exit status (128 + the signal), the trace complete."""
    out = out or sys.stdout
    _counters(o)  # a tokenizer that cannot load is one line before anything listens
    loop = event_loop()
    # The recorder's queue thread pickles exchanges beside the proxy's loop: a short GIL
    # switch interval lets the loop stamp and forward a read within ~0.5 ms of its arrival
    # instead of the default 5 ms.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    held: list[RecorderProcess] = []  # made once the port is bound: a refused port leaves no files
    run = uvloop.run if loop == "uvloop" else asyncio.run
    try:
        code = run(_serve(o, held, out, loop))
    finally:
        summary = held[0].close() if held else None
    assert summary is not None
    for line in summary_lines(summary):
        print(line, file=out)
    print(f"wrote     {o.out}/trace.jsonl, exchanges.jsonl, summary.json", file=out)
    print(f"agentload: exit {code}: recording stopped ({signal_name(code - 128)})", file=sys.stderr)
    return code


async def _serve(o: RecordOptions, held: list[RecorderProcess], out: Any, name: str) -> int:
    loop = asyncio.get_running_loop()
    proxy, port = await _start(o, lambda ex: held[0].submit(ex))
    held.append(RecorderProcess(o, name))
    await held[0].attach()
    latch = StopLatch()
    stop, now = asyncio.Event(), asyncio.Event()

    def on_signal(signum: int) -> None:
        what = latch.receive(signum)
        if what == "stop":
            stop.set()
        elif what == "now":
            now.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    print(f"agentload record: listening on http://{o.host}:{port}/v1 -> {o.upstream.url} "
          f"(event loop: {name})", file=out)  # fmt: skip
    print(
        f"agentload record: writing {o.out}/trace.jsonl; Ctrl-C stops and completes it",
        file=out,
        flush=True,
    )
    await stop.wait()
    if proxy.in_flight:
        print(f"agentload record: stopping; {proxy.in_flight} exchanges in flight get {o.grace_s:g} s "
              "(Ctrl-C again: now)", file=out, flush=True)  # fmt: skip
    closing = asyncio.ensure_future(proxy.close(o.grace_s))
    cut = asyncio.ensure_future(now.wait())
    await asyncio.wait({closing, cut}, return_when=asyncio.FIRST_COMPLETED)
    if not closing.done():
        await proxy.close(0.0)
    cut.cancel()
    if held[0].buffered:
        print(f"agentload record: the recorder is {held[0].buffered} bytes behind; waiting for it "
              "(Ctrl-C again: stop now, losing them)", file=out, flush=True)  # fmt: skip
    now.clear()  # a press during the grace cut the exchanges; only a later one cuts this wait
    await held[0].flush(give_up=now)
    for sig in STOP_SIGNALS:
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)  # the trace is being completed: late presses wait
    return exit_code_for_signal(latch.signum or signal.SIGINT)


def _recorder_main(o: RecordOptions, loop: str, inbox: Any, outbox: Any) -> None:
    """The recorder's own process: exchanges from the ``inbox`` pipe until None (or the
    parent's end of it closing), then the summary."""
    for sig in STOP_SIGNALS:  # the parent decides when the recording stops, and tells us
        signal.signal(sig, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)  # rows already appended stay; nothing hangs on
    _counters(o)[0]("warm up")  # the tokenizer's first call builds tables
    rec = make_recorder(o, loop)
    outbox.put("ready")
    while True:
        try:
            ex = inbox.recv()
        except EOFError:
            break
        if ex is None:
            break
        rec.submit(ex)
    outbox.put(rec.close())


class RecorderProcess:
    """The Recorder in a child process: the proxy's loop only hands exchanges to a pipe, so
    reading bodies, tokenizing and hashing never hold the GIL the loop stamps reads under.

    Once ``attach``ed to the proxy's loop the pipe is written by an asyncio pipe transport
    (non-blocking writes on the loop's own thread): no feeder thread in the proxy's process
    competes with the loop for the GIL while streams are relayed (a thread holding it when
    the OS preempts it stalls the loop for that long)."""

    def __init__(self, o: RecordOptions, loop: str) -> None:
        """``loop``: the name of the event loop the proxy runs on (for the summary)."""
        ctx = multiprocessing.get_context("spawn")
        self._outbox = ctx.Queue()
        inbox, self._pipe = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_recorder_main, args=(o, loop, inbox, self._outbox), name="agentload-recorder",
            daemon=True,
        )  # fmt: skip
        self._proc.start()
        inbox.close()
        self._tx: asyncio.WriteTransport | None = None
        self._ended = False  # the end (None) is in the pipe
        ready = self._outbox.get(timeout=120)
        if ready != "ready":
            raise SetupError(f"the recorder did not start ({ready})")

    async def attach(self) -> None:
        """Write the pipe from the running loop from now on."""
        loop = asyncio.get_running_loop()
        f = os.fdopen(os.dup(self._pipe.fileno()), "wb", buffering=0)
        self._tx, _ = await loop.connect_write_pipe(asyncio.Protocol, f)

    async def flush(self, give_up: asyncio.Event | None = None) -> None:
        """Everything submitted, then the end, written to the pipe (before the loop ends).

        Waits as long as the recorder reads: what is still buffered when the loop ends is
        lost, and a slow recorder (a long prompt to tokenize) is no reason to drop the
        exchanges after it. Only a recorder that died, or ``give_up`` (a second Ctrl-C),
        stops the wait."""
        if self._tx is None:
            return
        tx, self._tx = self._tx, None
        self._frame(tx, None)
        self._ended = True
        while tx.get_write_buffer_size() and not tx.is_closing() and self._proc.is_alive():
            if give_up is not None and give_up.is_set():
                break
            await asyncio.sleep(0.01)
        tx.close()

    @property
    def buffered(self) -> int:
        """Bytes of exchanges not yet in the pipe (the recorder reads slower than they come)."""
        return self._tx.get_write_buffer_size() if self._tx is not None else 0

    @staticmethod
    def _frame(tx: asyncio.WriteTransport, obj: Any) -> None:
        b = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        tx.write(struct.pack("!i", len(b)) + b)  # bodies are capped far below 2 GiB

    def submit(self, ex: Any) -> None:
        """Hand a finished exchange on (the pipe's framing: multiprocessing.Connection's)."""
        if self._tx is None:
            self._blocking().send(ex)
            return
        self._frame(self._tx, ex)

    def _blocking(self) -> Any:
        """The pipe for a plain ``send``: the loop's transport made the file description it
        shares non-blocking, and a send into a full pipe would then fail (BlockingIOError)
        instead of waiting for the recorder."""
        os.set_blocking(self._pipe.fileno(), True)
        return self._pipe

    def close(self) -> dict[str, Any]:
        """Finish the recording; the summary. Waits as long as the recorder lives (a long
        trace to finish is no reason to cut it); one that died is one line, not a wait."""
        if not self._ended and self._proc.is_alive():
            self._blocking().send(None)
        while True:
            try:
                summary: dict[str, Any] = self._outbox.get(timeout=0.5)
                break
            except queue.Empty:
                if not self._proc.is_alive() and self._outbox.empty():
                    raise SetupError(
                        f"the recorder process ended (exit {self._proc.exitcode}) before "
                        "it wrote its summary",
                        hint="trace.jsonl and exchanges.jsonl hold the rounds it wrote; "
                        "the console above has its error",
                    ) from None
        self._proc.join(30)
        return summary


class RecordThread:
    """A recording proxy on its own loop in a daemon thread: ``.url``, ``.stop()`` -> summary."""

    def __init__(self, options: RecordOptions) -> None:
        self.o = options
        self.url = ""
        self.recorder: Recorder | None = None
        self.event_loop = event_loop()
        self._loop = new_loop(self.event_loop)
        self._proxy: RecordingProxy | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> RecordThread:
        self.recorder = make_recorder(self.o, self.event_loop)
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="agentload-record-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        fut = asyncio.run_coroutine_threadsafe(_start(self.o, self.recorder.submit), self._loop)
        self._proxy, port = fut.result(30)
        self.url = f"http://{self.o.host}:{port}"
        return self

    def stop(self, grace_s: float = 5.0) -> dict[str, Any]:
        """Stop the proxy, complete the files; the summary."""
        assert self._proxy is not None and self.recorder is not None
        asyncio.run_coroutine_threadsafe(self._proxy.close(grace_s), self._loop).result(
            grace_s + 30
        )
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        return self.recorder.close()

    def __enter__(self) -> RecordThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if (
            self._proxy is not None
            and self.recorder is not None
            and self._thread is not None
            and self._thread.is_alive()
        ):
            self.stop()
