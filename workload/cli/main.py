"""`agentload`: the composition root. Every command's errors become one line at one edge.

Each subcommand parses its options and hands the typed result on; `main` runs it through
`workload.errors.run_edge` (an AgentloadError: its one line and exit code) and
`workload.stopping.before_run` (a stop signal before any traffic: 128 + the signal).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Callable

import yaml

from workload import __version__
from workload.cli.trace import main_trace
from workload.errors import (
    EXIT_BAD_INPUT,
    ArgParser,
    ProfileError,
    UsageError,
    print_error,
    run_edge,
)
from workload.plan.loading import list_profiles, load_profile, profile_schema
from workload.run.options import BY_NAME, build_run_parser, raw_values
from workload.run.spec import RunSpec, read_spec, resolve_spec
from workload.stopping import (
    StoppedBeforeRun,
    before_run,
    exit_code_for_signal,
    stopped_before_run_line,
    tolerate_closed_stdout,
)

__all__ = ["main", "resolve_run"]

# With --spec only these options may be given (the spec holds everything else).
SPEC_COMPANIONS = ("spec_file", "out", "overwrite")
# Commands whose stop signals take the one stop path (workload.stopping).
STOPPABLE = ("run", "canary", "capacity")


def resolve_run(argv: list[str]) -> RunSpec:
    """`agentload run ARGV` -> its RunSpec (the profile loaded once). Raises UsageError."""
    args = build_run_parser().parse_args(argv)
    values = raw_values(args)
    if values.get("spec_file"):
        return _from_spec_file(values, list(args.locust_args))
    values["locust_args"] = list(args.locust_args)
    values["argv"] = " ".join(["agentload", "run", *argv])
    return resolve_spec(values)


def _from_spec_file(values: dict[str, object], locust_args: list[str]) -> RunSpec:
    """`agentload run --spec FILE [--out DIR] [--overwrite]`: exactly that resolved run."""
    given = [
        BY_NAME[name].flags[0]
        for name, value in values.items()
        if name not in SPEC_COMPANIONS and value not in (None, "", [], False)
        and value != BY_NAME[name].default and BY_NAME[name].flags
    ]  # fmt: skip
    if given or locust_args:
        raise UsageError(
            f"--spec FILE runs the resolved run it holds: drop {', '.join(given) or '-- ...'} "
            "(only --out and --overwrite go with it)"
        )
    source = str(values["spec_file"])
    spec = read_spec(source)
    # A spec on stdin names its run directory (the canary's blocks); a spec file is usually
    # an earlier run's spec.json, replayed into a new directory unless --out says where.
    out = values.get("out") or (spec.out if source == "-" else "")
    return spec.replace(out=str(out), run_id="", overwrite=bool(values.get("overwrite")))


def cmd_run(argv: list[str]) -> int:
    """`agentload run`: one run, as a Locust child (workload.orchestrate.locust_child)."""
    from workload.orchestrate.locust_child import run_locust  # start-up: ~10 ms, `run` only

    return run_locust(resolve_run(argv))


def cmd_profiles(argv: list[str]) -> int:
    """`agentload profiles list | show NAME | validate FILE | schema`."""
    p = ArgParser(
        prog="agentload profiles", description="List, show, validate profiles; print the schema."
    )
    sub = p.add_subparsers(dest="what", required=True, parser_class=ArgParser)
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
        for line in e.problems:  # every problem of the file, each on its own line
            print_error(line)
        return EXIT_BAD_INPUT
    if args.what == "show":
        print(yaml.safe_dump(prof.model_dump(mode="json", exclude_none=True), sort_keys=False))
    else:
        print(f"{args.file}: ok ({len(prof.classes)} traffic classes: {', '.join(prof.classes)})")
    return 0


# The other commands import their module when they run: `agentload --help` and `agentload
# run` must not pay for the verdict's scipy or the simulator (`python -X importtime`, on top
# of what --help imports: compare ~0.8 s, canary ~0.8 s, report ~0.1 s, capacity ~0.07 s,
# sim ~0.05 s).
def cmd_sim(argv: list[str]) -> int:
    """`agentload sim`: the embedded simulator."""
    from workload.sim.__main__ import main as sim_main  # start-up: ~0.05 s, see above

    return int(sim_main(argv) or 0)


def cmd_compare(argv: list[str]) -> int:
    """`agentload compare RUN_A RUN_B`."""
    from workload.cli.compare import main_compare  # start-up: ~0.8 s (scipy), see above

    return main_compare(argv)


def cmd_canary(argv: list[str]) -> int:
    """`agentload canary`."""
    from workload.orchestrate.canary.command import main_canary  # start-up: ~0.8 s, see above

    return main_canary(argv)


def cmd_report(argv: list[str]) -> int:
    """`agentload report RUN`."""
    from workload.cli.report import main_report  # start-up: ~0.1 s, see above

    return main_report(argv)


def cmd_capacity(argv: list[str]) -> int:
    """`agentload capacity`."""
    from workload.orchestrate.capacity.command import main_capacity  # start-up: see above

    return main_capacity(argv)


def cmd_record(argv: list[str]) -> int:
    """`agentload record`."""
    from workload.cli.record import main_record  # start-up: ~0.2 s (asyncio, ssl, ...)

    return main_record(argv)


def cmd_trace(argv: list[str]) -> int:
    """`agentload trace import | fit | export`."""
    return main_trace(argv)


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "run": (cmd_run, "run agent traffic against a server or the embedded simulator"),
    "canary": (cmd_canary, "run the same traffic against a baseline and a candidate, then compare"),
    "capacity": (cmd_capacity, "find the largest load at which every class meets its SLOs"),
    "compare": (cmd_compare, "compare two run directories and give a verdict"),
    "report": (cmd_report, "write the HTML report of a run directory"),
    "profiles": (cmd_profiles, "list | show NAME | validate FILE | schema"),
    "sim": (cmd_sim, "serve the embedded vLLM simulator"),
    "trace": (cmd_trace, "import | fit | export real request traces (Mooncake, Azure)"),
    "record": (cmd_record, "a recording proxy: your agents' traffic as an agent-session trace"),
}


def usage() -> str:
    """`agentload --help`."""
    lines = [
        f"agentload {__version__}: agent-shaped load for OpenAI-compatible servers",
        "",
        "usage: agentload COMMAND [options]   (agentload COMMAND --help for details)",
        "",
    ]
    lines += [f"  {name:10s} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The `agentload` command: dispatch, with the one error edge around every command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print_error(f"unknown command {name!r}; one of: {', '.join(COMMANDS)}")
        return EXIT_BAD_INPUT
    command = COMMANDS[name][0]
    tolerate_closed_stdout()  # a closed pipe on stdout never stops a command half-way
    try:
        # `run`: a SIGTERM / SIGHUP while the profile loads, the target is probed or the
        # simulator starts is one line and 143 / 129, like Ctrl-C (run_child routes them
        # once the Locust child starts). `canary` and `capacity`: the same, and once their
        # children run they catch the stop themselves (stopping.forward_stop) and end with
        # their own line, so what already ran is kept and said.
        with before_run() if name in STOPPABLE else contextlib.nullcontext():
            return run_edge(lambda: command(rest))
    except StoppedBeforeRun as e:
        print(stopped_before_run_line(e.signum), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        # Ctrl-C before the run started (loading, probing, starting the simulator).
        print(stopped_before_run_line(signal.SIGINT), file=sys.stderr)
        return exit_code_for_signal(signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main())
