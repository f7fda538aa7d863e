"""`agentload`: the composition root. Every user-facing error is one line and exit 2."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from workload import __version__
from workload.errors import (
    EXIT_BAD_INPUT,
    EXIT_SIGINT,
    AgentloadError,
    ProfileError,
    SetupError,
    UsageError,
    exit_code_for_signal,
    stopped_before_run_line,
)
from workload.measure import artifacts
from workload.observe.safe import redact_url
from workload.run.spec import (
    ArgParser,
    RunSpec,
    build_run_parser,
    check_host,
    parse_duration,
    raw_values,
    resolve_spec,
)

__all__ = ["check_host", "main", "parse_duration", "resolve_run", "UsageError"]


# ---------------------------------------------------------------------------------------------
# agentload run


def resolve_run(argv: list[str]) -> RunSpec:
    """`agentload run ARGV` -> its RunSpec (the profile loaded once). Raises UsageError."""
    args = build_run_parser().parse_args(argv)
    values = raw_values(args)
    values["locust_args"] = list(args.locust_args)
    values["argv"] = " ".join(["agentload", "run", *argv])
    return resolve_spec(values)


class _StoppedBeforeRun(BaseException):
    """SIGTERM / SIGHUP before the Locust child runs (run_child routes them from then on)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_before_run(signum: int, _frame: object) -> None:
    raise _StoppedBeforeRun(signum)


def cmd_run(argv: list[str]) -> int:
    # A CI cancel (SIGTERM) or a closed terminal (SIGHUP) while the profile loads, the target is
    # probed or the simulator starts: one line and 143 / 129, like Ctrl-C (main), not a silent
    # death; the simulator is stopped on the way out.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_before_run)
    try:
        return _cmd_run(argv)
    except _StoppedBeforeRun as e:
        print(stopped_before_run_line(e.signum), file=sys.stderr)
        return exit_code_for_signal(e.signum)


def _cmd_run(argv: list[str]) -> int:
    from workload.locust.command import locust_argv
    from workload.run.checks import check_out_dir, check_workers

    spec = resolve_run(argv)
    run_id = artifacts.new_run_id()
    out = Path(spec.out) if spec.out else artifacts.default_out_dir(run_id)
    check_workers(spec.workers)
    check_out_dir(out, overwrite=spec.overwrite)
    spec = spec.replace(run_id=run_id, out=str(out))
    sim = None
    try:
        if not spec.host:
            from workload.run.simhost import start_embedded_sim

            sim, spec = start_embedded_sim(spec)
        preflight(spec)
        from workload.run.stop import run_child

        code = run_child(locust_argv(spec), out)
        for sig in (signal.SIGTERM, signal.SIGHUP):  # over: only the simulator's stop is left
            signal.signal(sig, signal.SIG_IGN)
        return code
    finally:
        if sim is not None:
            sim.stop()


def preflight(spec: RunSpec) -> None:
    """Fail fast, with one line, before Locust starts: the target and the profile's fit."""
    from workload.observe.target import probe_target
    from workload.plan.sessions import SessionPlanner
    from workload.plan.tokens import TokenizerUnavailable, get_tokenizer

    # Bounded: a target slower to answer than the run is long cannot be measured by it.
    timeout_s = min(PROBE_TIMEOUT_S, max(spec.duration_s, 1.0))
    started = time.monotonic()
    try:
        facts = probe_target(
            spec.host, os.environ.get(spec.api_key_env) or None, spec.model or None, timeout_s
        )
    except SetupError as e:
        took = time.monotonic() - started
        if took >= timeout_s * 0.9:
            raise UsageError(
                f"{redact_url(spec.host)}/v1/models did not answer within {timeout_s:g}s "
                f"(the run is {spec.duration_s:g}s): is the target overloaded or --host wrong?"
            ) from None
        raise UsageError(str(e)) from None
    took = time.monotonic() - started
    if took > spec.duration_s:
        raise UsageError(
            f"{redact_url(spec.host)}/v1/models took {took:.1f}s, longer than the run ({spec.duration_s:g}s): "
            "use a longer --duration or check the target"
        )
    if spec.trace:
        _preflight_trace(spec, facts.get("max_model_len"))
    if spec.tokenizer != "tiktoken":
        return  # the server tokenizer is checked where it is built (inside the run)
    try:
        SessionPlanner(
            spec.profile,
            get_tokenizer("tiktoken:cl100k_base"),
            model=facts["model"],
            max_model_len=facts.get("max_model_len"),
        )
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None
    except TokenizerUnavailable as e:
        raise UsageError(str(e)) from None


def _preflight_trace(spec: RunSpec, max_model_len: int | None) -> None:
    """Say what the replay sends; refuse (or clip, with --trace-clip) too-long requests."""
    from workload.run.replay import check_context, trace_note

    print(trace_note(spec), flush=True)
    fit = check_context(spec, max_model_len)
    if fit.clipped:
        print(
            f"agentload: {fit.message('--trace ' + spec.trace)}; clipped (--trace-clip)", flush=True
        )
    elif max_model_len is None:
        print(
            "agentload: the server's max_model_len is unknown: trace lengths not checked",
            flush=True,
        )


PROBE_TIMEOUT_S = 10.0  # the longest agentload waits for GET /v1/models before a run


# ---------------------------------------------------------------------------------------------
# agentload profiles


def cmd_profiles(argv: list[str]) -> int:
    import json

    from workload.plan.loading import list_profiles, load_profile, profile_schema

    p = ArgParser(
        prog="agentload profiles", description="List, show, validate profiles; print the schema."
    )
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("list", help="built-in profiles")
    s = sub.add_parser("show", help="the resolved profile as YAML")
    s.add_argument("name")
    s.add_argument("--set", dest="sets", action="append", default=[])
    v = sub.add_parser("validate", help="check a profile file")
    v.add_argument("file")
    v.add_argument("--set", dest="sets", action="append", default=[])
    sub.add_parser("schema", help="JSON Schema of the profile format")
    args = p.parse_args(argv)
    if args.what == "list":
        for name, desc in list_profiles():
            print(f"{name:16s} {desc}")
        return 0
    if args.what == "schema":
        print(json.dumps(profile_schema(), indent=2))
        return 0
    try:
        prof = load_profile(args.name if args.what == "show" else args.file, args.sets)
    except ProfileError as e:
        for line in e.problems:
            print(f"agentload: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.what == "show":
        import yaml

        print(yaml.safe_dump(prof.model_dump(mode="json", exclude_none=True), sort_keys=False))
    else:
        print(f"{args.file}: ok ({len(prof.classes)} traffic classes: {', '.join(prof.classes)})")
    return 0


# ---------------------------------------------------------------------------------------------


def cmd_sim(argv: list[str]) -> int:
    from workload.sim.__main__ import main as sim_main

    return int(sim_main(argv) or 0)


def cmd_compare(argv: list[str]) -> int:
    from workload.cli.compare import main_compare

    return int(main_compare(argv))


def cmd_canary(argv: list[str]) -> int:
    from workload.run.canary import main_canary

    return int(main_canary(argv))


def cmd_report(argv: list[str]) -> int:
    from workload.cli.report import main_report

    return int(main_report(argv))


def cmd_capacity(argv: list[str]) -> int:
    from workload.cli.capacity import main_capacity

    return int(main_capacity(argv, preflight=preflight))


def cmd_trace(argv: list[str]) -> int:
    from workload.cli.trace import main_trace

    return int(main_trace(argv))


COMMANDS = {
    "run": (cmd_run, "run agent traffic against a server or the embedded simulator"),
    "canary": (cmd_canary, "run the same traffic against a baseline and a candidate, then compare"),
    "capacity": (cmd_capacity, "find the largest load at which every class meets its SLOs"),
    "compare": (cmd_compare, "compare two run directories and give a verdict"),
    "report": (cmd_report, "write the HTML report of a run directory"),
    "profiles": (cmd_profiles, "list | show NAME | validate FILE | schema"),
    "sim": (cmd_sim, "serve the embedded vLLM simulator"),
    "trace": (cmd_trace, "import | fit | export real request traces (Mooncake, Azure)"),
}


def usage() -> str:
    lines = [
        f"agentload {__version__}: agent-shaped load for OpenAI-compatible servers",
        "",
        "usage: agentload COMMAND [options]   (agentload COMMAND --help for details)",
        "",
    ]
    lines += [f"  {name:10s} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"agentload: error: unknown command {name!r}; one of: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        return COMMANDS[name][0](rest)
    except AgentloadError as e:
        # The one place an error becomes a line and an exit code.
        print(f"agentload: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        # Ctrl-C before the run started (loading, probing, starting the simulator).
        print(stopped_before_run_line(signal.SIGINT), file=sys.stderr)
        return EXIT_SIGINT


if __name__ == "__main__":
    sys.exit(main())
