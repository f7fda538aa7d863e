"""`agentload`: the composition root. Every user-facing error is one line and exit 2."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from workload import __version__
from workload.measure import artifacts

EXIT_BAD_INPUT = 2

LOCUSTFILE = Path(__file__).parent.parent / "locust" / "locustfile.py"


class UsageError(Exception):
    """Bad input from the command line (one line, exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """'90', '90s', '2m', '1h30m', '1m30s' -> seconds (> 0)."""
    t = text.strip().lower()
    m = _DURATION.match(t)
    if not t or not m or not any(m.groups()):
        raise UsageError(f"bad --duration {text!r}: use e.g. 30s, 5m, 1h30m")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + s
    if total <= 0:
        raise UsageError(f"bad --duration {text!r}: it must be longer than 0s")
    return total


def check_host(url: str) -> str:
    p = urlparse(url)
    if p.scheme not in ("http", "https") or not p.hostname:
        raise UsageError(f"bad --host {url!r}: use a base URL such as http://127.0.0.1:8000")
    return url.rstrip("/")


def _positive_int(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"bad {name} {value!r}: it must be a whole number") from None
    if n <= 0:
        raise UsageError(f"bad {name} {value}: it must be at least 1")
    return n


def _positive_float(name: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise UsageError(f"bad {name} {value!r}: it must be a number") from None
    if x <= 0:
        raise UsageError(f"bad {name} {value}: it must be greater than 0")
    return x


# ---------------------------------------------------------------------------------------------
# agentload run


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by `run` and `canary` (what traffic to send)."""
    p.add_argument(
        "--profile",
        "--agent-profile",
        dest="profile",
        default="quickstart",
        help="built-in profile name or YAML file (default: quickstart)",
    )
    p.add_argument("--users", default="", help="concurrent users (default: the profile's users)")
    p.add_argument(
        "--spawn-rate", default="", help="users started per second (default: users per second)"
    )
    p.add_argument(
        "--duration", default="", help="run length, e.g. 30s, 5m (default: the profile's duration)"
    )
    p.add_argument("--seed", default="", help="traffic seed (integer; default: the profile's seed)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a profile field (repeatable)",
    )
    p.add_argument(
        "--label",
        dest="labels",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="operator label recorded in run.json, e.g. container=vllm:0.29 (repeatable)",
    )
    p.add_argument(
        "--slo",
        dest="slos",
        action="append",
        default=[],
        metavar="[CLASS.]METRIC=VALUE",
        help="SLO override, e.g. ttft_p95_ms=800 or interactive.e2e_p95_ms=20000",
    )
    p.add_argument("--model", default="", help="model name (default: discovered from /v1/models)")
    p.add_argument(
        "--tokenizer",
        default="tiktoken",
        choices=["tiktoken", "server"],
        help="prompt-size tokenizer: offline tiktoken, or the target's /tokenize",
    )
    p.add_argument(
        "--sessions-per-user",
        default="0",
        help="end each user after N sessions (0: run time decides)",
    )
    p.add_argument(
        "--scrape-interval", default="2", help="seconds between /metrics scrapes (0: off)"
    )
    p.add_argument(
        "--max-error-ratio",
        default="",
        help="exit 1 above this error ratio (default: the profile's)",
    )
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable that holds the API key (default OPENAI_API_KEY)",
    )
    p.add_argument(
        "--workers", default="1", help="worker processes on this machine (Locust --processes)"
    )
    p.add_argument(
        "--sim-preset", default="default", help="simulator preset when no --host is given"
    )
    p.add_argument(
        "--sim-fault",
        dest="sim_faults",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help="simulator fault injection, e.g. 500=0.05 or reset=0.01 (no --host only)",
    )
    p.add_argument(
        "--sim-set",
        dest="sim_sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="simulator engine setting (no --host only), e.g. ttft_scale=1.1",
    )


def build_run_parser(prog: str = "agentload run") -> argparse.ArgumentParser:
    p = _Parser(
        prog=prog, description="Run agent traffic against a server (or the embedded simulator)."
    )
    p.add_argument(
        "--host", default="", help="server base URL; none = start the embedded simulator"
    )
    add_run_arguments(p)
    p.add_argument("--out", default="", help="run directory (default runs/<run id>)")
    p.add_argument("--server-log", default="", help="vLLM server log file to fingerprint")
    p.add_argument(
        "--web", action="store_true", help="open Locust's web UI instead of running headless"
    )
    p.add_argument("--web-port", default="8089", help="web UI port (with --web)")
    p.add_argument(
        "locust_args",
        nargs=argparse.REMAINDER,
        help="after --: extra arguments passed to Locust unchanged",
    )
    return p


def resolve_run(args: argparse.Namespace) -> dict:
    """Validate run options against the profile; returns the values Locust needs."""
    from workload.plan.loading import ProfileError, load_profile

    host = check_host(args.host) if args.host else ""
    seed = args.seed.strip()
    if seed:
        try:
            int(seed)
        except ValueError:
            raise UsageError(f"bad --seed {seed!r}: it must be an integer") from None
    try:
        profile = load_profile(args.profile, list(args.sets))
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None
    run_defaults = profile.run
    users = _positive_int("--users", args.users) if args.users else int(run_defaults.users)
    spawn = (
        _positive_float("--spawn-rate", args.spawn_rate)
        if args.spawn_rate
        else float(run_defaults.spawn_rate or users)
    )
    duration = parse_duration(args.duration) if args.duration else float(run_defaults.duration_s)
    workers = _positive_int("--workers", args.workers)
    try:
        spu = int(args.sessions_per_user)
        scrape = float(args.scrape_interval)
        max_err = float(args.max_error_ratio) if args.max_error_ratio else -1.0
    except ValueError as e:
        raise UsageError(f"bad number: {e}") from None
    if spu < 0 or scrape < 0:
        raise UsageError("--sessions-per-user and --scrape-interval must be >= 0")
    from workload.observe.target import SetupError, parse_kv, parse_slo_overrides

    try:
        parse_kv(args.labels, "--label")
        parse_slo_overrides(args.slos)
    except SetupError as e:
        raise UsageError(str(e)) from None
    return {
        "host": host,
        "users": users,
        "spawn": spawn,
        "duration": duration,
        "workers": workers,
        "seed": seed,
        "spu": spu,
        "scrape": scrape,
        "max_err": max_err,
        "profile": profile,
    }


def locust_command(
    args: argparse.Namespace, r: dict, host: str, out: Path, run_id: str, argv: list[str]
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--host",
        host,
        "--users",
        str(r["users"]),
        "--spawn-rate",
        str(r["spawn"]),
        "--agent-profile",
        args.profile,
        "--out",
        str(out),
        "--run-id",
        run_id,
        "--tokenizer",
        args.tokenizer,
        "--sessions-per-user",
        str(r["spu"]),
        "--scrape-interval",
        str(r["scrape"]),
        "--max-error-ratio",
        str(r["max_err"]),
        "--api-key-env",
        args.api_key_env,
        "--agent-argv",
        " ".join(["agentload", *argv]),
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    if r["seed"]:
        cmd += ["--seed", r["seed"]]
    if args.model:
        cmd += ["--model", args.model]
    if getattr(args, "server_log", ""):
        cmd += ["--server-log", args.server_log]
    for s in args.sets:
        cmd += ["--set", s]
    for lb in args.labels:
        cmd += ["--label", lb]
    for s in args.slos:
        cmd += ["--slo", s]
    if getattr(args, "web", False):
        cmd += ["--web-host", "127.0.0.1", "--web-port", str(args.web_port)]
    else:
        cmd += ["--headless", "--run-time", f"{int(round(r['duration']))}s"]
    if r["workers"] > 1:
        # A free master port: two distributed runs at once (e.g. both sides of a canary)
        # must not share Locust's default 5557 and swap workers.
        port = _free_port()
        cmd += [
            "--processes",
            str(r["workers"]),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--master-host",
            "127.0.0.1",
            "--master-port",
            str(port),
        ]
    extra = [a for a in getattr(args, "locust_args", []) if a != "--"]
    return cmd + extra


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cmd_run(argv: list[str]) -> int:
    args = build_run_parser().parse_args(argv)
    r = resolve_run(args)
    run_id = artifacts.new_run_id()
    out = Path(args.out) if args.out else artifacts.default_out_dir(run_id)
    if (out / "run.json").exists():
        raise UsageError(f"--out {out} already holds a run; choose another directory")
    sim = None
    host = r["host"]
    try:
        if not host:
            from workload.sim.launcher import SimProcess, SimStartError

            sim = SimProcess(preset=args.sim_preset, faults=args.sim_faults, sets=args.sim_sets)
            try:
                sim.start()
            except SimStartError as e:
                raise UsageError(f"the embedded simulator did not start: {e}") from None
            host = sim.url
            print(
                f"agentload: no --host given; started the embedded simulator at {host} "
                f"(preset {args.sim_preset})",
                flush=True,
            )
        preflight(args, r, host)
        cmd = locust_command(args, r, host, out, run_id, ["run", *argv])
        return _run_child(cmd)
    finally:
        if sim is not None:
            sim.stop()


def preflight(args: argparse.Namespace, r: dict, host: str) -> None:
    """Fail fast, with one line, before Locust starts: the target and the profile's fit."""
    from workload.observe.target import SetupError, probe_target
    from workload.plan.loading import ProfileError
    from workload.plan.sessions import SessionPlanner
    from workload.plan.tokens import TokenizerUnavailable, get_tokenizer

    try:
        facts = probe_target(host, os.environ.get(args.api_key_env) or None, args.model or None)
    except SetupError as e:
        raise UsageError(str(e)) from None
    if args.tokenizer != "tiktoken":
        return  # the server tokenizer is checked where it is built (inside the run)
    try:
        SessionPlanner(
            r["profile"],
            get_tokenizer("tiktoken:cl100k_base"),
            model=facts["model"],
            max_model_len=facts.get("max_model_len"),
        )
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None
    except TokenizerUnavailable as e:
        raise UsageError(str(e)) from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt()


def _run_child(cmd: list[str]) -> int:
    # SIGTERM (CI cancelling a job) ends the run like Ctrl-C: Locust writes its artifacts
    # and the embedded simulator is stopped by the caller's finally.
    signal.signal(signal.SIGTERM, _interrupt)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(cmd, env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return 1


# ---------------------------------------------------------------------------------------------
# agentload profiles


def cmd_profiles(argv: list[str]) -> int:
    import json

    from workload.plan.loading import ProfileError, list_profiles, load_profile, profile_schema

    p = _Parser(
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


def cmd_trace(argv: list[str]) -> int:
    from workload.cli.trace import main_trace

    return int(main_trace(argv))


COMMANDS = {
    "run": (cmd_run, "run agent traffic against a server or the embedded simulator"),
    "canary": (cmd_canary, "run the same traffic against a baseline and a candidate, then compare"),
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
    except UsageError as e:
        print(f"agentload: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("agentload: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
