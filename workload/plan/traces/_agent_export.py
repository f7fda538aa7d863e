"""Export a run as an agent-session trace: its sessions, one row per answered step.

From the run's ``requests.jsonl`` only (no content, no re-planning): per session its
answered steps in order (the last attempt of a step that was retried), each a round with
``t_start`` / ``t_end`` (start + E2E), ``input_tokens`` = the server's prompt tokens,
``prefix_tokens`` = the server's ``cached_tokens`` (the reuse the server served; 0 when
it did not report it), ``output_tokens``. The wait before the next step is what the run
measured between the answer and the next request: a tool wait when the step ended in
tool calls (one parallel group, each call waited as long), else think time. Subagent
links and per-tool latencies are not in a run's records, so an exported trace has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from workload.measure.artifacts import read_records
from workload.plan.traces._agent import AgentTrace, RawRound, RawTool, build_session, trace_of


def _names(row: Mapping[str, Any]) -> list[str]:
    calls = row.get("tool_calls") or []
    names = [str(c.get("name") or "tool") for c in calls if isinstance(c, dict)]
    if not names and row.get("planned_tool"):
        names = [str(row["planned_tool"])]
    return names


def _session_rounds(rows: list[Mapping[str, Any]]) -> list[RawRound]:
    last: dict[int, Mapping[str, Any]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("prompt_tokens"):
            k = int(r.get("step") or 0)
            if k not in last or int(r.get("attempt") or 0) >= int(last[k].get("attempt") or 0):
                last[k] = r
    raws: list[RawRound] = []
    steps = [last[k] for k in sorted(last)]
    for i, r in enumerate(steps):
        t0 = float(r["t_start"])
        t1 = t0 + float(r.get("e2e_ms") or 0.0) / 1000
        nxt = float(steps[i + 1]["t_start"]) if i + 1 < len(steps) else t1
        tools = [RawTool(name, t1, nxt) for name in _names(r)]
        prompt = int(r["prompt_tokens"])
        raws.append(
            RawRound(
                t_start=t0,
                t_end=t1,
                input_tokens=prompt,
                prefix_tokens=min(prompt, int(r.get("cached_tokens") or 0)),
                output_tokens=int(r.get("completion_tokens") or 0),
                tools=tools,
                appended_user=int(not raws or not raws[-1].tools),
                appended_tool_results=len(raws[-1].tools) if raws else 0,
                model=r.get("model") if isinstance(r.get("model"), str) else None,
            )
        )
    return raws


def run_agent_trace(rows: Iterable[Mapping[str, Any]], source: str) -> AgentTrace:
    """The agent-session trace of a run's request rows (see the module docstring)."""
    by_session: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("session_id"):
            by_session.setdefault(str(r["session_id"]), []).append(r)
    rounds = []
    for sid, rs in by_session.items():
        raws = _session_rounds(rs)
        if raws:
            rounds.extend(build_session(sid, raws, source="agentload"))
    return trace_of(rounds, source, "agent-session")


def export_run_sessions(run_dir: str | Path) -> tuple[AgentTrace, list[str]]:
    """A run directory's sessions as an agent-session trace, and the corrupt lines skipped."""
    skipped: list[str] = []
    rows = read_records(Path(run_dir), "requests", skipped)
    return run_agent_trace(rows, str(run_dir)), skipped
