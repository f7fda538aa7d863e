"""What the canary's console says while its blocks run: progress inside a block, each
block's outcome (its exit code and the SLOs it failed), and a tally at the end.

The child runs write their own console to OUT/<side>/<block>.log; these lines are read
from their run directories (requests recorded so far; run.json once a block ended).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workload.measure.artifacts import count_lines, read_json
from workload.report.blocks import block_outcome

# Seconds between progress lines inside a block.
PROGRESS_S = 10.0


def _requests(out: Path) -> int:
    try:
        return count_lines(out, "requests")
    except OSError:
        return 0


def _first_start(out: Path) -> float | None:
    """The unix time the block's first recorded request started (None: none yet)."""
    starts = []
    for p in Path(out).glob("requests*.jsonl"):
        try:
            with open(p, "rb") as fh:
                line = fh.readline()
            t = json.loads(line).get("t_start") if line.endswith(b"\n") else None
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(t, (int, float)):
            starts.append(float(t))
    return min(starts) if starts else None


def progress_line(
    label: str,
    outs: Sequence[tuple[str, Path]],
    since_launch_s: float,
    block_s: float,
    now: float | None = None,
) -> str:
    """`agentload canary: block-3 of 8: 20 s of 60 s; baseline 45 requests, candidate 44
    requests`: seconds since the block's first request (its runs start first: the profile,
    the probe, Locust), or "starting" / "writing its summary" around the traffic."""
    counts = ", ".join(f"{side} {_requests(out)} requests" for side, out in outs)
    firsts = [t for t in (_first_start(out) for _, out in outs) if t is not None]
    now = time.time() if now is None else now
    if not firsts:
        where = f"starting ({since_launch_s:.0f} s since launch)"
    elif now - min(firsts) <= block_s:
        where = f"{max(0.0, now - min(firsts)):.0f} s of {block_s:g} s"
    else:
        where = f"{block_s:g} s of traffic done, writing the summary"
    return f"agentload canary: {label}: {where}; {counts}"


def outcome(out: Path) -> dict[str, Any]:
    """A finished block run's outcome (block_outcome of its run.json; {} when it has none)."""
    try:
        run = read_json(out / "run.json")
    except (OSError, ValueError):
        return {}
    return block_outcome(run) if isinstance(run, dict) else {}


def outcome_line(label: str, ended: Sequence[tuple[str, Path, int]]) -> str:
    """`agentload canary: block-3 done: baseline exit 0; candidate exit 3: 2 SLOs failed: ...`."""
    parts = []
    for side, out, code in ended:
        o = outcome(out)
        text = f"{side} exit {code}"
        if o.get("slo_failed"):
            text += f" (SLO failed: {'; '.join(o['slo_failed'])})"
        elif code not in (0, 3) and o.get("exit_reason"):
            text += f" ({o['exit_reason']})"
        parts.append(text)
    return f"agentload canary: {label} done: {'; '.join(parts)}"


def tally_line(outs: Sequence[Path]) -> str | None:
    """`agentload canary: SLOs failed in 6 of 16 block runs: baseline block-1, ...` (None: none)."""
    failed = [out for out in outs if outcome(out).get("slo_failed")]
    if not failed:
        return None
    names = ", ".join(f"{out.parent.name} {out.name}" if out.name.startswith("block-") else out.name
                      for out in failed)  # fmt: skip
    return (
        f"agentload canary: SLOs failed in {len(failed)} of {len(outs)} block runs ({names}); "
        "the verdict below compares the sides, each block's SLOs are in its run.json and compare.html"
    )
