"""`agentload record`: put agentload between your agent and its server, get its sessions.

agentload record --upstream URL --out DIR [--port 8100] [--host 127.0.0.1]
                 [--session-header X-Session-Id] [--keep-content] [--tokenizer tiktoken|server]
                 [--subagents infer|off] [--grace S] [--processes N] [--overwrite]
"""

from __future__ import annotations

import sys
from pathlib import Path

from workload.errors import ArgParser, UsageError, print_warning
from workload.record import RecordOptions, check_out_dir, parse_upstream, record

LOOPBACK = ("127.0.0.1", "::1", "localhost")
MAX_PROCESSES = 64


def build_parser() -> ArgParser:
    p = ArgParser(
        prog="agentload record",
        description="A recording proxy for OpenAI-compatible servers: point your agent's base "
        "URL at it, work as usual, stop with Ctrl-C; DIR/trace.jsonl is an agent-session trace.",
    )
    p.add_argument(
        "--upstream", required=True, help="the server to forward to, e.g. http://127.0.0.1:8000"
    )
    p.add_argument(
        "--out",
        required=True,
        help="recording directory (trace.jsonl, exchanges.jsonl, summary.json)",
    )
    p.add_argument("--port", default="8100", help="port to listen on (default 8100; 0: a free one)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--session-header",
        default="",
        help="request header naming the session (else the user field, else inferred)",
    )
    p.add_argument(
        "--keep-content",
        action="store_true",
        help="also store request and response bodies (content.jsonl)",
    )
    p.add_argument(
        "--tokenizer",
        default="tiktoken",
        help="counts tokens a response's usage lacks: tiktoken[:ENCODING] or server (the upstream's /tokenize)",
    )
    p.add_argument(
        "--subagents",
        default="infer",
        choices=["infer", "off"],
        help="infer candidate subagent sessions (default) or not",
    )
    p.add_argument(
        "--grace",
        default="10",
        help="seconds requests in flight get to finish at Ctrl-C / SIGTERM (default 10; "
        "a second Ctrl-C cuts them at once)",
    )
    p.add_argument(
        "--processes",
        default="1",
        help="proxy processes sharing the port (Linux; default 1): for many concurrent streams, "
        "up to one per core",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a recording already in --out")
    return p  # fmt: skip


def options(argv: list[str]) -> RecordOptions:
    """The validated options of `agentload record ARGV`; UsageError."""
    a = build_parser().parse_args(argv)
    up = parse_upstream(a.upstream)
    if up is None:
        raise UsageError(
            f"bad --upstream {a.upstream!r}: give the server's URL, e.g. http://127.0.0.1:8000"
        )
    try:
        port = int(a.port)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(f"bad --port {a.port!r}: a number from 0 to 65535 (0: a free port)")
    try:
        grace = float(a.grace)
    except ValueError:
        grace = -1.0
    if not 0 <= grace < float("inf"):
        raise UsageError(
            f"bad --grace {a.grace!r}: seconds (0 or more) requests in flight get at stop"
        )
    try:
        processes = int(a.processes)
    except ValueError:
        processes = 0
    if not 1 <= processes <= MAX_PROCESSES:
        raise UsageError(f"bad --processes {a.processes!r}: a number from 1 to {MAX_PROCESSES}")
    if processes > 1 and not sys.platform.startswith("linux"):
        raise UsageError(
            f"--processes {processes} needs Linux (its SO_REUSEPORT spreads connections over "
            "processes); give --processes 1"
        )
    tok = a.tokenizer
    if tok != "server" and tok.partition(":")[0] != "tiktoken":
        raise UsageError(f"bad --tokenizer {tok!r}: tiktoken[:ENCODING] or server")
    out = Path(a.out)
    problem = check_out_dir(out, a.overwrite)
    if problem:
        raise UsageError(problem)
    return RecordOptions(
        upstream=up, out=out, host=a.host, port=port,
        session_header=a.session_header or None, keep_content=a.keep_content,
        tokenizer=tok, subagents=a.subagents == "infer", grace_s=grace, processes=processes,
    )  # fmt: skip


def main_record(argv: list[str]) -> int:
    """Run `agentload record ...` until Ctrl-C / SIGTERM (exit 130 / 143, the trace complete)."""
    o = options(argv)
    if o.host not in LOOPBACK:
        print_warning(
            f"listening on {o.host}: anyone who can reach this port can use "
            f"{o.upstream.url} through it with their own key, and their traffic is recorded"
        )
    if o.keep_content:
        print_warning(
            f"--keep-content stores every prompt and answer in "
            f"{o.out}/content.jsonl (headers, and so API keys, are never stored)"
        )
    return record(o)
