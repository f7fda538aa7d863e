"""The recording: exchanges in, the recording directory out (off the proxy's event loop).

    DIR/trace.jsonl      agent-session rows (v1, ``workload.plan.traces``), each round appended
                         once final (its tools came back or it had none); rewritten whole at
                         stop with every round, so it is complete after Ctrl-C
    DIR/exchanges.jsonl  one line per exchange, rounds or not: path, status, outcome, times,
                         tokens, session and round (no content, no headers)
    DIR/summary.json     the trace summary (``agentload trace import``'s) plus the recorder's
    DIR/content.jsonl    only with --keep-content: each exchange's request and response bodies

The proxy hands each finished exchange to ``Recorder.submit`` (a queue); one thread reads
the bodies, tokenizes, hashes and infers sessions, so none of that runs between a read
and its write on the proxy's loop.
"""

from __future__ import annotations

import math
import os
import queue
import threading
from array import array
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from workload.plan.traces import summarize_agents
from workload.plan.traces._agent import round_from_json, trace_of
from workload.record.blocks import BLOCK_TOKENS, PromptBlocks
from workload.record.encodings import decode_body
from workload.record.extract import Facts, read_exchange
from workload.record.proxy import Exchange
from workload.record.sessions import CountPrompt, SessionBook

TRACE = "trace.jsonl"
EXCHANGES = "exchanges.jsonl"
SUMMARY = "summary.json"
CONTENT = "content.jsonl"


class Recorder:
    """Consumes exchanges on its own thread; ``close()`` finishes the files and summarizes."""

    def __init__(
        self,
        out: Path,
        *,
        encode: Any,
        count_prompt: CountPrompt,
        count_text: Any,
        keep_content: bool = False,
        subagents: bool = True,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.out = out
        self.book = SessionBook(PromptBlocks(encode), count_prompt, count_text, subagents=subagents)
        self.keep_content = keep_content
        self.meta = dict(meta or {})
        self.outcomes: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.failures: list[str] = []  # the recorder's own problems (never the proxy's)
        self.relay = RelayTimes()  # every body read's time in the proxy
        self._q: queue.SimpleQueue[Exchange | None] = queue.SimpleQueue()
        out.mkdir(parents=True, exist_ok=True)
        self._trace: BinaryIO = open(out / TRACE, "wb")  # noqa: SIM115 - closed in close()
        self._exchanges: BinaryIO = open(out / EXCHANGES, "wb")  # noqa: SIM115
        self._content: BinaryIO | None = open(out / CONTENT, "wb") if keep_content else None  # noqa: SIM115
        self._thread = threading.Thread(target=self._work, name="agentload-record", daemon=True)
        self._thread.start()

    def submit(self, ex: Exchange) -> None:
        """Queue a finished exchange (called on the proxy's loop: returns at once)."""
        self._q.put(ex)

    def _work(self) -> None:
        while True:
            ex = self._q.get()
            if ex is None:
                return
            try:
                self._one(ex)
            except Exception as e:  # noqa: BLE001 - one odd exchange must not end the recording
                self.failures.append(f"exchange {ex.n}: {type(e).__name__}: {e}")

    def _one(self, ex: Exchange) -> None:
        request, why_req = decode_body(bytes(ex.request_body), ex.request_encoding)
        body, why = decode_body(bytes(ex.response_body), ex.encoding)
        # a body in a coding not read is forwarded as it came, and nothing is taken from it
        f = read_exchange(ex.path, ex.status, b"" if why_req else request,
                          b"" if why or why_req else body, ex.streamed)  # fmt: skip
        if why_req or why:
            f.ok, f.problem = False, f"request {why_req}" if why_req else f"response {why}"
        self.outcomes[ex.outcome] += 1
        self.kinds[f.kind] += 1
        s = self.book.add(ex, f)
        self.relay.add(ex.relay_us)
        self._exchanges.write(orjson.dumps(_exchange_row(ex, f, s)) + b"\n")
        self._exchanges.flush()
        if self._content is not None:
            self._content.write(orjson.dumps({
                "exchange": ex.n, "path": ex.path, "status": ex.status,
                "request": ex.request_body.decode("utf-8", "replace"),
                "response": ex.response_body.decode("utf-8", "replace"),
            }) + b"\n")  # fmt: skip
            self._content.flush()
        if s is not None:
            sessions = [s]
            if s.parent is not None and s.parent in self.book.sessions:
                sessions.append(self.book.sessions[s.parent])
            for sess in sessions:
                for row in self.book.ready_rows(sess):
                    self._trace.write(orjson.dumps(row) + b"\n")
            self._trace.flush()

    def close(self) -> dict[str, Any]:
        """Drain the queue, rewrite trace.jsonl whole, write summary.json; the summary."""
        self._q.put(None)
        self._thread.join()
        self._trace.close()
        self._exchanges.close()
        if self._content is not None:
            self._content.close()
        rows = list(self.book.final_rows())
        tmp = self.out / (TRACE + ".tmp")
        with open(tmp, "wb") as fh:
            for row in rows:
                fh.write(orjson.dumps(row) + b"\n")
        os.replace(tmp, self.out / TRACE)
        summary = self.summary(rows)
        (self.out / SUMMARY).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
        return summary

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The trace's summary (as `trace import` prints it) and what the recorder saw."""
        trace = trace_of((round_from_json(r) for r in rows), str(self.out / TRACE), "agent-session")
        s = summarize_agents(trace)
        named = Counter(x.named for x in self.book.sessions.values() if x.rounds)
        s["format"] = "agent-session"
        s["recorder"] = {
            **self.meta,
            "exchanges": sum(self.outcomes.values()),
            "outcomes": dict(sorted(self.outcomes.items())),
            "endpoints": dict(sorted(self.kinds.items())),
            "sessions_by": dict(sorted(named.items())),
            "inferred_subagents": sum(1 for x in self.book.sessions.values() if x.parent_inferred and x.rounds),
            "tokens_from_usage": sum(1 for r in rows if r["record"]["tokens_from"] == "usage"),
            "tokens_from_tokenizer": sum(1 for r in rows if r["record"]["tokens_from"] == "tokenizer"),
            "hash_block_tokens": BLOCK_TOKENS,
            "content_kept": self.keep_content,
            "relay_us": self.relay.summary(),
            "recorder_errors": self.failures[:20],
        }  # fmt: skip
        return s


class RelayTimes:
    """How long the proxy held each body read (its callback's entry -> the client socket's
    send returned), in µs: a count per µs up to 100 ms, so percentiles stay exact and small."""

    TOP_US = 100_000

    def __init__(self) -> None:
        self.counts = np.zeros(self.TOP_US + 1, dtype=np.int64)
        self.max = 0

    def add(self, us: Sequence[int]) -> None:
        if len(us):
            a = np.frombuffer(us, dtype=np.uint32) if isinstance(us, array) else np.asarray(us)
            self.counts += np.bincount(np.minimum(a, self.TOP_US), minlength=self.TOP_US + 1)
            self.max = max(self.max, int(a.max()))

    def summary(self) -> dict[str, int] | None:
        """{reads, p50, p99, max} (µs; None: no body was read)."""
        n = int(self.counts.sum())
        if not n:
            return None
        cum = np.cumsum(self.counts)
        p50, p99 = (int(np.searchsorted(cum, q * n)) for q in (0.5, 0.99))
        return {"reads": n, "p50": p50, "p99": p99, "max": self.max}

    @staticmethod
    def of(us: Sequence[int]) -> dict[str, int] | None:
        """The same for one exchange's reads (nearest rank, as ``summary``)."""
        if not len(us):
            return None
        a = sorted(us)
        n = len(a)
        return {"reads": n, "p50": a[math.ceil(0.5 * n) - 1], "p99": a[math.ceil(0.99 * n) - 1],
                "max": a[-1]}  # fmt: skip


def _exchange_row(ex: Exchange, f: Facts, s: Any) -> dict[str, Any]:
    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - ex.t_arrival, 6)

    rnd = None
    if s is not None and s.rounds and s.rounds[-1].ex is ex:
        rnd = len(s.rounds) - 1
    return {
        "exchange": ex.n,
        "client": ex.client,
        "method": ex.method,
        "path": ex.path,
        "kind": f.kind,
        "status": ex.status,
        "outcome": ex.outcome,
        "error": ex.error or f.problem,
        "t_arrival": round(ex.t_arrival, 6),
        "head_s": rel(ex.t_head),
        "ttft_s": rel(ex.t_first),
        "e2e_s": rel(ex.t_end),
        "streamed": ex.streamed,
        "bytes_in": ex.bytes_in,
        "bytes_out": ex.bytes_out,
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "reasoning_tokens": f.reasoning_tokens,
        "tool_calls": [n for _, n in f.tool_calls],
        "relay_us": RelayTimes.of(ex.relay_us),
        "session": s.name if s is not None else None,
        "round": rnd,
    }


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The one-screen summary printed at stop."""
    rec = s["recorder"]
    tw = s["tool_wait_s"]
    reuse = "-" if s["prefix_reuse"] is None else f"{s['prefix_reuse']:.1%}"
    outcomes = ", ".join(f"{k} {v}" for k, v in rec["outcomes"].items()) or "none"
    lines = [
        f"exchanges {rec['exchanges']} ({outcomes})",
        f"sessions  {s['sessions']} ({s['subagents']} subagents, {rec['inferred_subagents']} of them inferred)",
        f"rounds    {s['rounds']} ({s['tool_rounds']} asked for tools, {s['parallel_tool_rounds']} in parallel)",
        "tool wait "
        + (f"p50 {tw['p50']:g} s, p90 {tw['p90']:g} s, max {tw['max']:g} s ({tw['n']})" if tw["n"] else "-"),
        f"reuse     {reuse} of input tokens were a prefix an earlier prompt had",
        f"tokens    {rec['tokens_from_usage']} rounds counted by the server's usage, "
        f"{rec['tokens_from_tokenizer']} by the tokenizer",
    ]  # fmt: skip
    if rec["recorder_errors"]:
        lines.append(
            f"problems  {len(rec['recorder_errors'])} exchanges could not be read: {rec['recorder_errors'][0]}"
        )
    return lines


def check_out_dir(out: Path, overwrite: bool) -> str | None:
    """Why ``out`` cannot take a new recording (None: it can)."""
    if out.exists() and not out.is_dir():
        return f"{out} is a file; --out names a directory"
    if (out / TRACE).exists() and not overwrite:
        return f"{out} already holds a recording ({TRACE}); give another --out or --overwrite"
    near = out
    while not near.exists() and near != near.parent:  # created only once recording starts
        near = near.parent
    if not os.access(near, os.W_OK):
        return f"{out} cannot be written ({near} is not writable)"
    return None
