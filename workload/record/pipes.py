"""The pipes from proxy processes to the recorder's process: a proxy's writing end, and the
recorder's reading of them all in order."""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import Any, cast

from workload.record.proxy import Exchange


def exchanges_in_order(inboxes: list[Connection]) -> Iterator[Exchange]:
    """The exchanges of every pipe until each ends (None or EOF). From one pipe: as sent,
    which is the order they finished in. From several (proxy processes): what each ready pipe
    holds, taken in one batch and ordered by end time, so that an exchange is seen after
    the one whose answer it continues (which ended before it was sent) even when the two
    came through different processes and the recorder had fallen behind."""
    left = list(inboxes)
    while left:
        batch: list[Exchange] = []
        for ready in mp_wait(left):
            conn = cast(Connection, ready)
            while True:
                try:
                    ex = conn.recv()
                except EOFError:
                    ex = None
                if ex is None:
                    left.remove(conn)
                    break
                batch.append(ex)
                if not conn.poll():
                    break
        if len(inboxes) > 1:
            batch.sort(key=lambda e: e.t_end if e.t_end is not None else e.t_arrival)
        yield from batch


class ExchangePipe:
    """The writing end of a pipe to the recorder, in a proxy's process.

    Once ``attach``ed to the proxy's loop the pipe is written by an asyncio pipe transport
    (non-blocking writes on the loop's own thread): no feeder thread in the proxy's process
    competes with the loop for the GIL while streams are relayed (a thread holding it when
    the OS preempts it stalls the loop for that long)."""

    def __init__(self, conn: Any) -> None:
        """``conn``: a ``multiprocessing`` Connection (the pipe's writing end)."""
        self.conn = conn
        self._tx: asyncio.WriteTransport | None = None
        self.ended = False  # the end (None) is in the pipe

    async def attach(self) -> None:
        """Write the pipe from the running loop from now on."""
        loop = asyncio.get_running_loop()
        f = os.fdopen(os.dup(self.conn.fileno()), "wb", buffering=0)
        self._tx, _ = await loop.connect_write_pipe(asyncio.Protocol, f)

    async def flush(self, alive: Callable[[], bool], give_up: asyncio.Event | None = None) -> None:
        """Everything submitted, then the end, written to the pipe (before the loop ends).

        Waits as long as the recorder reads: what is still buffered when the loop ends is
        lost, and a slow recorder (a long prompt to tokenize) is no reason to drop the
        exchanges after it. Only a recorder that died (``alive()`` false), or ``give_up``
        (a second Ctrl-C), stops the wait."""
        if self._tx is None:
            return
        tx, self._tx = self._tx, None
        self._frame(tx, None)
        self.ended = True
        while tx.get_write_buffer_size() and not tx.is_closing() and alive():
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
            self.blocking().send(ex)
            return
        self._frame(self._tx, ex)

    def blocking(self) -> Any:
        """The pipe for a plain ``send``: the loop's transport made the file description it
        shares non-blocking, and a send into a full pipe would then fail (BlockingIOError)
        instead of waiting for the recorder."""
        os.set_blocking(self.conn.fileno(), True)
        return self.conn
