"""The stop path of `agentload record` (workload/record/serve.py): every exchange handed to
the recorder's process reaches the recording, however late that process reads."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from workload.errors import SetupError
from workload.record import RecordOptions, parse_upstream
from workload.record.proxy import Exchange
from workload.record.serve import RecorderProcess, new_loop

T = TypeVar("T")
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 20_000}]})


def run_on(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on that event loop (``serve.new_loop``'s name)."""
    ev = new_loop(loop)
    try:
        return ev.run_until_complete(coro)
    finally:
        ev.close()


def test_exchanges_waiting_for_a_stalled_recorder_all_reach_the_recording(
    record_loop: str, tmp_path: Path
) -> None:
    # The recorder is stopped (SIGSTOP: a process that gets no core) while the proxy hands it
    # more than the pipe holds, then the stop begins; it is let go only a second later. The
    # flush used to give up after 60 s and close() sent the end into the pipe the loop's
    # transport had made non-blocking (BlockingIOError on a full pipe).
    up = parse_upstream("http://127.0.0.1:9")
    assert up is not None
    rp = RecorderProcess(RecordOptions(upstream=up, out=tmp_path / "rec", port=0), record_loop)
    pid = rp._proc.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    n = 8
    try:

        async def stop() -> int:
            await rp.attach()
            for k in range(1, n + 1):
                now = time.time()
                ex = Exchange(k, "c", "POST", "/v1/chat/completions", now, status=500, t_end=now)
                ex.request_body += BODY.encode()
                rp.submit(ex)
            held = rp.buffered
            asyncio.get_running_loop().call_later(1.0, os.kill, pid, signal.SIGCONT)
            await rp.flush()
            return held

        held = run_on(record_loop, stop())
    finally:
        os.kill(pid, signal.SIGCONT)
    summary = rp.close()
    assert held > 0  # the pipe was full: the rest waited in the loop's transport
    assert (
        summary["recorder"]["exchanges"] == n and summary["recorder"]["event_loop"] == record_loop
    )
    rows = (tmp_path / "rec" / "exchanges.jsonl").read_text().splitlines()
    assert [json.loads(r)["exchange"] for r in rows] == list(range(1, n + 1))


def test_a_recorder_that_died_is_one_error_at_close_not_a_ten_minute_wait(tmp_path: Path) -> None:
    up = parse_upstream("http://127.0.0.1:9")
    assert up is not None
    rp = RecorderProcess(RecordOptions(upstream=up, out=tmp_path / "rec", port=0), "asyncio")
    assert rp._proc.pid is not None
    os.kill(rp._proc.pid, signal.SIGKILL)
    rp._proc.join(10)
    t0 = time.monotonic()
    with pytest.raises(SetupError, match=r"the recorder process ended \(exit -9\) before"):
        rp.close()
    assert time.monotonic() - t0 < 60  # the old close waited 600 s for a summary never sent
