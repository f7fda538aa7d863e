"""Real traces: read (Mooncake, Azure, run requests; agent sessions), replay, prompts, fit, export."""

from workload.errors import TraceError
from workload.plan.traces._agent import (
    AGENT_FORMAT,
    AgentRound,
    AgentTrace,
    ToolCall,
    nested_subagents,
    summarize_agents,
    write_agent_trace,
)
from workload.plan.traces._agent_export import export_run_sessions, run_agent_trace
from workload.plan.traces._agent_fit import (
    agent_stats,
    compare_stats,
    fit_agent_profile,
    profile_stats,
    too_deep,
)
from workload.plan.traces._agent_import import (
    AGENT_FORMATS,
    detect_agent_format,
    detect_any,
    read_agent_trace,
    recording_trace,
)
from workload.plan.traces._agent_replay import (
    AgentSession,
    ChildStart,
    ReplayOptions,
    fit_rounds,
    planned_duration_s,
    root_sessions,
    session_starts,
)
from workload.plan.traces._blocks import BlockSynth, HitRatio, hit_ratio
from workload.plan.traces._export import BlockHasher, ExportResult, export_run
from workload.plan.traces._fit import fit_profile, shared_prefix_blocks, summarize
from workload.plan.traces._read import (
    BLOCK_TOKENS,
    FORMATS,
    BadLine,
    Trace,
    TraceRequest,
    detect_format,
    parse_azure_timestamp,
    read_trace,
    write_trace,
)
from workload.plan.traces._replay import (
    TRACE_CLASS,
    TRACE_STREAM,
    ContextFit,
    TracePrompts,
    TraceSchedule,
    TraceSession,
    clip_request,
    fit_to_context,
)
from workload.plan.traces._rundir import read_trace_keeping_reuse
from workload.plan.traces._schedule import detect_quantum, schedule

__all__ = [
    "AGENT_FORMAT",
    "AGENT_FORMATS",
    "AgentRound",
    "AgentSession",
    "ChildStart",
    "ReplayOptions",
    "fit_rounds",
    "planned_duration_s",
    "root_sessions",
    "session_starts",
    "AgentTrace",
    "agent_stats",
    "compare_stats",
    "fit_agent_profile",
    "profile_stats",
    "too_deep",
    "ToolCall",
    "detect_agent_format",
    "recording_trace",
    "export_run_sessions",
    "run_agent_trace",
    "detect_any",
    "read_agent_trace",
    "summarize_agents",
    "nested_subagents",
    "write_agent_trace",
    "BLOCK_TOKENS",
    "TRACE_CLASS",
    "TRACE_STREAM",
    "ContextFit",
    "TracePrompts",
    "TraceSchedule",
    "TraceSession",
    "clip_request",
    "fit_to_context",
    "FORMATS",
    "BadLine",
    "BlockHasher",
    "BlockSynth",
    "ExportResult",
    "HitRatio",
    "Trace",
    "TraceError",
    "TraceRequest",
    "detect_format",
    "detect_quantum",
    "export_run",
    "fit_profile",
    "hit_ratio",
    "parse_azure_timestamp",
    "read_trace",
    "read_trace_keeping_reuse",
    "schedule",
    "shared_prefix_blocks",
    "summarize",
    "write_trace",
]
