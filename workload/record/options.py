"""What `agentload record` was asked for, and the event loop its proxy processes run on.

The loop is uvloop's where it is installed (a dependency on Linux and macOS: its C loop
calls each read's callback straight from libuv, without asyncio's selector and handle per
read, which is what 50 streams' events arriving together wait on), else asyncio's own;
``AGENTLOAD_RECORD_LOOP=asyncio`` picks asyncio's (to compare the two).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from workload.errors import SetupError, UsageError
from workload.record.proxy import Upstream

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
    processes: int = 1  # proxy processes sharing the port (SO_REUSEPORT; Linux)


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


T = TypeVar("T")


def runner(name: str) -> Callable[[Coroutine[Any, Any, T]], T]:
    """``asyncio.run`` on the event loop of that name."""
    return uvloop.run if name == "uvloop" else asyncio.run  # type: ignore[no-any-return]
