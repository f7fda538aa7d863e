"""One measured HTTP exchange with an OpenAI-compatible server -> RequestRecord.

Timing (see ../shared/DESIGN.md "Definitions"):

* ``t_start`` (wall, unix seconds) and the perf_counter_ns origin are stamped by the transport's
  ``on_send`` callback, right before the first request byte is written to an already connected
  socket, so connect time and pool waits are not part of TTFT.
* Every read is stamped the moment it returns, before any parsing: the SSE parser and
  ``orjson.loads`` run after the stamp. An event's time is the stamp of the read that completed it.
  Where the transport has the kernel's receive time of the read's newest bytes
  (``rx_ns``: Linux SO_TIMESTAMPNS on plain HTTP), the stamp is moved back to it: the time
  the bytes reached this host, not the time this process got round to reading them (other
  streams' parsing, a collection, a busy machine). It is never moved before the previous
  read's stamp or the send stamp, so times stay in order whatever the realtime clock does.
* TTFT: first chunk with non-empty ``content``, ``reasoning_content``/``reasoning`` or a
  ``tool_calls`` delta (``text`` for /v1/completions). A role-only chunk never counts.
  ``ttft_content_ms``: the first visible chunk (content or a tool call; reasoning excluded);
  chunks that carried reasoning only are counted in ``reasoning_chunks``.
  Non-streamed requests leave ``ttft_ms`` None (the first token is not observable) and measure
  ``e2e_ms`` only.
* ITL: gaps between consecutive content-bearing chunks (``itl_gaps_ms``; summary ``itl_ms``).
  How many tokens one chunk carried is not on the wire (speculative decoding sends several), so
  per-token ITL is derived, not measured: gap / (completion_tokens / chunks), i.e. assuming an
  even spread. TPOT = (E2E - TTFT) / (completion_tokens - 1) uses the server's token count.
* E2E: request sent -> ``data: [DONE]`` (or end of stream / failure). Failed requests keep the
  time they took in ``e2e_ms`` and any TTFT they reached.

Errors are data: ``exchange`` never raises (``gevent.Timeout`` objects that are not its own
propagate). The first error wins, except that what ended a stream early (timeout, stall,
stream_reset, cancelled) replaces an earlier malformed_chunk / bad_response; the detail keeps
both. A malformed data line makes the request an error but the stream is read to the end.

The client trusts ``PreparedRequest.body``: re-parsing a 100k-token prompt per request would cost
the CPU the measurement needs. Payload builders call :func:`ensure_stream_options` so that
streaming bodies carry ``stream_options.include_usage: true``.

The transport (``workload.measure.transport``) sends the bytes and hands back what each socket
read delivered (one or many events, or part of one); one
``Client`` belongs to one thread. Tests inject a fake with the small ``Transport`` protocol.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

import gevent
import orjson
from gevent import GreenletExit

from workload.measure.records import (
    STATUS_CANCELLED,
    STATUS_ERROR,
    RequestRecord,
    ToolCall,
)
from workload.measure.sse import SSEParser
from workload.measure.transport import (
    GeventTransport,
    PreparedRequest,
    Transport,
    TransportError,
    TransportResponse,
)
from workload.observe.safe import clean_server_text, redact_url, sanitize

ERROR_EXCERPT_CHARS = 500
_TERMINAL = frozenset(("timeout", "stall", "stream_reset", "cancelled", "connect"))


def parse_retry_after(value: str | None, now_s: float) -> float | None:
    """Retry-After (delta seconds or an HTTP date) -> seconds from ``now_s``; None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        secs = when.timestamp() - now_s
    if not math.isfinite(secs):
        return None
    return round(max(0.0, secs), 3)


def request_id_for(seed: int, session_id: str, step: int, attempt: int, run_tag: str = "") -> str:
    """Deterministic X-Request-Id: 24 hex chars of blake2b over the tuple."""
    key = repr((run_tag, int(seed), session_id, int(step), int(attempt))).encode()
    return hashlib.blake2b(key, digest_size=12).hexdigest()


def ensure_stream_options(body: dict[str, Any]) -> dict[str, Any]:
    """Make a streaming request body ask for the final usage chunk; returns ``body``."""
    if body.get("stream"):
        opts = body.get("stream_options")
        if not isinstance(opts, dict):
            opts = {}
            body["stream_options"] = opts
        opts["include_usage"] = True
    return body


# ---------------------------------------------------------------- measurement


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _gaps_ms(times_ns: list[int]) -> list[float]:
    """``_ms`` of each gap between consecutive stamps, without a ``round`` per gap (it is
    measurable at 100+ chunks per request): d ns is d/1e6 ms rounded to 3 decimals, i.e.
    (d + 500) // 1000 / 1000, exactly the float ``round(d / 1e6, 3)`` gives, except at a tie
    (d % 1000 == 500: that one rounds the binary value of d / 1e6) and for d < 0 (-0.0)."""
    return [
        (d + 500) // 1000 / 1000 if d >= 0 and d % 1000 != 500 else round(d / 1e6, 3)
        for d in [b - a for a, b in zip(times_ns, times_ns[1:], strict=False)]
    ]


def _pct(sorted_vals: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of a sorted, non-empty list."""
    pos = (len(sorted_vals) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def itl_summary(gaps_ms: list[float]) -> dict[str, float] | None:
    """mean, p50, p99, max of ITL gaps (ms); None without gaps."""
    if not gaps_ms:
        return None
    s = sorted(gaps_ms)
    return {
        "mean": round(sum(s) / len(s), 3),
        "p50": round(_pct(s, 0.50), 3),
        "p99": round(_pct(s, 0.99), 3),
        "max": s[-1],
    }


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _excerpt(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return text[:ERROR_EXCERPT_CHARS]


class _Reply:
    """What the server said, accumulated chunk by chunk (or from one body)."""

    __slots__ = (
        "rec",
        "chat",
        "content_times",
        "text_parts",
        "calls",
        "done_ns",
        "events",
        "bad",
        "choices_seen",
        "last_ns",
        "visible_ns",
    )

    def __init__(self, rec: RequestRecord, chat: bool) -> None:
        self.rec = rec
        self.chat = chat
        self.content_times: list[int] = []
        self.text_parts: list[str] = []
        self.calls: dict[int, list[Any]] = {}  # index -> [id, name, [arg parts]]
        self.done_ns: int | None = None
        self.events = 0
        self.bad: str | None = None  # first malformed detail
        self.choices_seen = False  # some chunk carried a `choices` list (else: not a completion)
        self.last_ns = 0  # stamp of the last read (0: nothing read yet)
        self.visible_ns = 0  # stamp of the first visible chunk (0: none yet)

    # --- streaming

    def on_data(self, data: bytes, t_ns: int) -> None:
        """One event's data (UTF-8 bytes, as ``SSEParser.feed_data`` hands them out)."""
        self.events += 1
        if data == b"[DONE]":
            if self.done_ns is None:
                self.done_ns = t_ns
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            # what the SSE text says: bytes that are not UTF-8 read as U+FFFD, as a decoder would
            text = data.decode("utf-8", "replace")
            try:
                obj = orjson.loads(text)
            except orjson.JSONDecodeError:
                self._malformed(f"not JSON: {text[:200]!r}")
                return
        if not isinstance(obj, dict):
            self._malformed(f"not a JSON object: {_text(data)[:200]!r}")
            return
        if "error" in obj or obj.get("object") == "error":
            fail(self.rec, "bad_response", f"error event in stream: {_excerpt(data)}")
            return
        try:
            bearing = self._chunk(obj)  # 1: reasoning only, 2: visible
            if bearing:
                self.content_times.append(t_ns)
                if bearing == 1:
                    self.rec.reasoning_chunks += 1
                elif not self.visible_ns:
                    self.visible_ns = t_ns
        except (TypeError, AttributeError, ValueError) as e:
            self._malformed(f"unexpected chunk shape ({e}): {_text(data)[:200]!r}")

    def _malformed(self, detail: str) -> None:
        if self.bad is None:
            self.bad = detail
            fail(self.rec, "malformed_chunk", detail)

    def _chunk(self, obj: dict[str, Any]) -> int:
        self._envelope(obj)
        bearing = 0
        choices = obj.get("choices")
        if isinstance(choices, list):
            self.choices_seen = True
        for ch in choices or ():
            primary = ch.get("index", 0) == 0
            if self.chat:
                delta = ch.get("delta") or {}
                content = delta.get("content")
                if content:  # the common chunk: content bears; only tool calls can add to it
                    bearing = 2
                    if primary:
                        self.text_parts.append(content)
                    if len(delta) > 1:
                        tcs = delta.get("tool_calls")
                        if tcs:
                            self._tool_deltas(tcs)
                else:
                    if (delta.get("reasoning_content") or delta.get("reasoning")) and not bearing:
                        bearing = 1
                    tcs = delta.get("tool_calls")
                    if tcs:
                        bearing = 2
                        self._tool_deltas(tcs)
            else:
                text = ch.get("text")
                if text:
                    bearing = 2
                    if primary:
                        self.text_parts.append(text)
            finish = ch.get("finish_reason")
            if finish:
                self.rec.finish_reason = finish
        return bearing

    def _tool_deltas(self, tcs: list[dict[str, Any]]) -> None:
        for tc in tcs:
            idx = tc.get("index", 0)
            slot = self.calls.get(idx)
            if slot is None:
                slot = self.calls[idx] = [None, None, []]
            if tc.get("id") and slot[0] is None:
                slot[0] = tc["id"]
            fn = tc.get("function") or {}
            if fn.get("name") and slot[1] is None:
                slot[1] = fn["name"]
            args = fn.get("arguments")
            if args:
                slot[2].append(args)

    # --- shared by streaming and non-streaming

    def _envelope(self, obj: dict[str, Any]) -> None:
        rec = self.rec
        if rec.response_id is None and obj.get("id"):
            rec.response_id = obj["id"]
        if rec.model is None and obj.get("model"):
            rec.model = obj["model"]
        fingerprint = obj.get("system_fingerprint")
        if fingerprint:
            rec.system_fingerprint = fingerprint
        usage = obj.get("usage")
        if usage is not None and isinstance(usage, dict):
            rec.prompt_tokens = usage.get("prompt_tokens")
            rec.completion_tokens = usage.get("completion_tokens")
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                rec.cached_tokens = details.get("cached_tokens")
            out_details = usage.get("completion_tokens_details")
            if isinstance(out_details, dict):
                rec.reasoning_tokens = out_details.get("reasoning_tokens")
        metrics = obj.get("metrics")
        if metrics is not None and isinstance(metrics, dict):
            rec.server_metrics = metrics
            spec = metrics.get("speculative_decoding")
            rec.spec_decode = spec if isinstance(spec, dict) else None

    def body(self, raw: bytes) -> None:
        """A non-streamed completion body."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            fail(self.rec, "bad_response", f"body is not JSON: {_excerpt(raw)}")
            return
        if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
            fail(self.rec, "bad_response", f"body is not a completion: {_excerpt(raw)}")
            return
        try:
            self._envelope(obj)
            for ch in obj["choices"]:
                if ch.get("finish_reason"):
                    self.rec.finish_reason = ch["finish_reason"]
                if ch.get("index", 0) != 0:
                    continue
                if self.chat:
                    msg = ch.get("message") or {}
                    if msg.get("content"):
                        self.text_parts.append(msg["content"])
                    for i, tc in enumerate(msg.get("tool_calls") or ()):
                        fn = tc.get("function") or {}
                        self.calls[tc.get("index", i)] = [
                            tc.get("id"),
                            fn.get("name"),
                            [fn.get("arguments") or ""],
                        ]
                elif ch.get("text"):
                    self.text_parts.append(ch["text"])
        except (TypeError, AttributeError, ValueError) as e:
            fail(self.rec, "bad_response", f"unexpected body shape ({e}): {_excerpt(raw)}")

    def finish(self) -> None:
        rec = self.rec
        rec.text = "".join(self.text_parts)
        calls = []
        for idx in sorted(self.calls, key=lambda i: (not isinstance(i, int), i)):
            cid, name, parts = self.calls[idx]
            args = "".join(parts)
            calls.append(ToolCall(idx, cid, name, args, _args_valid(args)).to_json())
        rec.tool_calls = calls


def _args_valid(args: str) -> bool:
    try:
        return isinstance(orjson.loads(args), dict)
    except orjson.JSONDecodeError:
        return False


def fail(rec: RequestRecord, kind: str, detail: str) -> None:
    """Mark ``rec`` failed; see the module docstring for which error wins."""
    if rec.error_kind is None:
        rec.error_kind, rec.error_detail = kind, detail
    elif kind in _TERMINAL and rec.error_kind not in _TERMINAL:
        rec.error_detail = f"{detail} (after {rec.error_kind}: {rec.error_detail})"
        rec.error_kind = kind
    else:
        return
    rec.status = STATUS_CANCELLED if kind == "cancelled" else STATUS_ERROR


class _Deadline(Exception):
    pass


class Client:
    """Measures exchanges with one server; one instance per thread (or per Locust user)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        concurrency: int = 1000,
        transport: Transport | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        wall: Callable[[], float] = time.time,
        wall_ns: Callable[[], int] = time.time_ns,
        run_id: str = "",
        worker: str = "0",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._target = redact_url(self.base_url)  # records never carry user:password@
        self._clock = clock
        self._wall = wall
        self._wall_ns = wall_ns  # the clock of the kernel's receive stamps (CLOCK_REALTIME)
        self._run_id = run_id
        self._worker = worker
        headers = {"User-Agent": "agentload", "Content-Type": "application/json"}
        if api_key:
            if any(c in api_key for c in "\r\n"):
                raise ValueError("api_key must not contain line breaks")
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers = headers
        self._secrets = (api_key,)  # never stored: redacted from every server string kept
        self._transport: Transport = transport or GeventTransport(
            self.base_url, connect_timeout_s=connect_timeout_s, concurrency=concurrency
        )

    def close(self) -> None:
        """Close pooled connections."""
        self._transport.close()

    def exchange(self, req: PreparedRequest) -> RequestRecord:
        """Send ``req``, read the whole reply, return the measured record. Never raises.

        A ``GreenletExit`` (Locust stopping the user) yields status "cancelled"; the caller
        re-raises it after recording.

        Long because it is the measured hot path: send, stamp and read in one frame, so
        nothing (no call, no extra object) sits between a read and its stamp.
        """
        rec = RequestRecord(
            run_id=self._run_id,
            target=self._target,
            worker=self._worker,
            user_class=req.user_class,
            session_id=req.session_id,
            step=req.step,
            attempt=req.attempt,
            request_id=req.request_id,
            endpoint=req.endpoint,
            stream=req.stream,
            planned_tool=req.planned_tool,
        )
        reply = _Reply(rec, req.endpoint == "chat")
        clock = self._clock
        sent = [0]
        timer = gevent.Timeout(req.timeout_s)
        timer.start()
        resp: TransportResponse | None = None
        end_ns: int | None = None
        try:

            def on_send() -> None:
                rec.t_start = round(self._wall(), 6)
                sent[0] = clock()

            headers = dict(self._headers)
            headers["Accept"] = "text/event-stream" if req.stream else "application/json"
            headers["X-Request-Id"] = req.request_id
            if req.traceparent:
                headers["traceparent"] = req.traceparent
            # non-streamed replies are silent until done: only the overall timeout applies
            read_timeout = req.stall_timeout_s if req.stream else req.timeout_s + 1.0
            resp = self._transport.post(
                req.path, headers, req.body, read_timeout_s=read_timeout, on_send=on_send
            )
            rec.http_status = resp.status
            ctype = str(resp.headers.get("content-type", "")) if resp.headers else ""
            if not 200 <= resp.status < 300:
                rec.retry_after_s = parse_retry_after(
                    resp.headers.get("retry-after") if resp.headers else None, self._wall()
                )
                body = resp.read()
                end_ns = clock()
                fail(rec, "http_status", f"HTTP {resp.status}: {_excerpt(body)}")
            elif req.stream and ctype and "event-stream" not in ctype.lower():
                # an HTML error page or a JSON body answering a streaming call: say what it was
                body = resp.read()
                end_ns = clock()
                fail(
                    rec,
                    "bad_response",
                    f"streaming reply is {ctype[:80]}, not text/event-stream: {_excerpt(body)}",
                )
            elif req.stream:
                end_ns = self._read_stream(resp, reply, sent[0], sent[0] + int(req.timeout_s * 1e9))
            else:
                body = resp.read()
                end_ns = clock()
                reply.body(body)
        except TransportError as e:
            fail(rec, e.kind, e.detail)
        except _Deadline:
            fail(rec, "timeout", f"no complete reply within {req.timeout_s:g}s")
        except gevent.Timeout as t:
            if t is not timer:
                raise
            fail(rec, "timeout", f"no complete reply within {req.timeout_s:g}s")
        except GreenletExit:
            # say how long the server had been silent: a stall the run outlived is not hidden
            last = reply.last_ns or sent[0]
            quiet = f" after {(clock() - last) / 1e9:.1f}s without bytes" if last else ""
            fail(rec, "cancelled", f"user stopped mid-request{quiet}")
        except Exception as e:  # a bug here must not kill the simulated user
            fail(rec, "bad_response", f"client error: {e!r}")
        finally:
            timer.close()
            if resp is not None:
                with contextlib.suppress(Exception):
                    resp.close()
        self._measure(rec, reply, sent[0], end_ns)
        if rec.error_detail:
            # stored and shown (requests.jsonl, report.html, the console): no escapes, no key
            rec.error_detail = clean_server_text(rec.error_detail, self._secrets)
        for name in ("model", "system_fingerprint", "finish_reason", "response_id"):
            value = getattr(rec, name)
            if isinstance(value, str) and not value.isprintable():
                setattr(rec, name, sanitize(value))
        return rec

    def _read_stream(
        self, resp: TransportResponse, reply: _Reply, sent_ns: int, deadline_ns: int
    ) -> int:
        """Read SSE to the end of the body; return the end-of-stream stamp."""
        parser = SSEParser()
        # read_some: everything one socket read delivered (many events under a backlog); the
        # fakes in tests hand out lines or whole events through readline
        some = getattr(resp, "read_some", None)
        read = some or resp.readline
        kernel = some is not None and hasattr(resp, "rx_ns")  # kernel receive stamps
        wall_ns = self._wall_ns
        clock = self._clock
        on_data = reply.on_data
        feed = parser.feed_data
        head = b""  # first non-comment bytes, kept only to explain a stream without events
        t = clock()
        prev = sent_ns
        try:
            while True:
                line = read()
                t = clock()  # stamp before any parsing: every event this read completed gets it
                if kernel:
                    rx = resp.rx_ns  # type: ignore[attr-defined]  # kernel: hasattr said so
                    if rx:
                        # when the bytes arrived, kept in order (a realtime clock step)
                        t = max(t - max(wall_ns() - rx, 0), prev)
                    prev = t
                reply.last_ns = t
                if not line:
                    break
                if t > deadline_ns:
                    raise _Deadline
                if reply.done_ns is not None:
                    continue  # drain to the end so the connection can be reused
                if len(head) < ERROR_EXCERPT_CHARS and line[:1] not in b":\r\n":
                    head += line
                for data in feed(line):
                    on_data(data, t)
            for data in parser.close_data():
                on_data(data, t)
        finally:
            if reply.events == 0 and head:
                reply.bad = reply.bad or "no events"
                fail(reply.rec, "bad_response", f"not an event stream: {_excerpt(head)}")
        data_events = reply.events - (reply.done_ns is not None)
        if data_events > 0 and not reply.choices_seen and reply.rec.error_kind is None:
            fail(reply.rec, "bad_response", f"no chunk carried choices: {_excerpt(head)}")
        if reply.done_ns is None:
            if reply.events == 0 and not head:
                fail(reply.rec, "missing_done", "empty stream")
            else:
                fail(reply.rec, "missing_done", "stream ended without data: [DONE]")
            return t
        return reply.done_ns

    def _measure(self, rec: RequestRecord, reply: _Reply, sent_ns: int, end_ns: int | None) -> None:
        reply.finish()
        if not sent_ns:
            return  # never sent (connect failure): no times
        if end_ns is None:
            end_ns = self._clock()
        rec.e2e_ms = _ms(end_ns - sent_ns)
        times = reply.content_times
        rec.chunks = len(times)
        if (
            rec.ok
            and not times
            and not rec.text
            and not rec.tool_calls
            and not rec.completion_tokens
        ):
            # `data: [DONE]` alone, or a body without a message: nothing was generated, which
            # is a failure of its own (it used to count as an answered request)
            fail(rec, "empty_response", "the reply has no content, no tool call and no "
                 "completion tokens")  # fmt: skip
        if times:
            rec.ttft_ms = _ms(times[0] - sent_ns)
            if reply.visible_ns:
                rec.ttft_content_ms = _ms(reply.visible_ns - sent_ns)
            gaps = _gaps_ms(times)
            rec.itl_gaps_ms = gaps
            rec.itl_ms = itl_summary(gaps)
            n = rec.completion_tokens
            if isinstance(n, int) and n > 1 and rec.ok:
                rec.tpot_ms = round((rec.e2e_ms - rec.ttft_ms) / (n - 1), 3)
