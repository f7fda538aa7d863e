"""`agentload capacity`: the largest load at which every traffic class meets its SLOs.

Flags: the `agentload run` option table (`--host`, `--profile`, `--slo`, `--seed`, `--out`,
`--sim-*` ...; not `--users`/`--duration`/`--web`, which the search sets per step) plus the
search's own. Without --host the embedded simulator starts once and stays warm for every
step. Each step is an `agentload run` at one load (Locust, the same RunSpec), written to
`<out>/steps/NN`; `workload.orchestrate.capacity.driver` judges its measurement window.

Exit codes: 0 a capacity was found, 3 even --min fails its SLOs, 4 --min was inconclusive
(an SLO without samples), 2 bad input, 128 + the signal when stopped (130 Ctrl-C, 143 SIGTERM:
the running step finishes its run, capacity.json / capacity.html hold the steps so far).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from workload.errors import (
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_SLO,
    ArgParser,
    SetupError,
    UsageError,
)
from workload.measure import artifacts
from workload.measure.slo import validate_slos
from workload.orchestrate.capacity.driver import CapacityDriver, write_outputs
from workload.orchestrate.capacity.search import (
    SearchSpec,
    samples_to_settle,
    search_spec,
    slo_quantile,
)
from workload.orchestrate.locust_child import locust_argv
from workload.orchestrate.preflight import preflight
from workload.orchestrate.simhost import start_embedded_sim
from workload.plan.arrivals import ArrivalSpec, arrival_spec
from workload.run.options import OPTIONS, add_options, parse_duration, raw_values
from workload.run.spec import RunSpec, apply_arrival, resolve_spec, with_arrival, write_spec
from workload.stopping import die_with_parent, exit_code_for_signal, stopped_line

# Set per step by the search, or meaningless for it.
_NOT_HERE = ("users", "duration_s", "web", "web_port", "spawn_rate", "sessions_per_user")
# A step's run-time bound beyond warm-up + window: Locust's setup before the first request.
# The driver ends each step when its window is over, so this only bounds a stuck step.
STEP_SLACK_S = 60.0
NO_SLO = "capacity needs at least one SLO: pass --slo or set slo in the profile"


def build_parser() -> ArgParser:
    """The capacity parser: run options from the one table, then the search flags."""
    p = ArgParser(
        prog="agentload capacity",
        description="Find the largest load at which every traffic class meets its SLOs.",
    )
    add_options(p, tuple(o for o in OPTIONS if o.name not in _NOT_HERE))
    g = p.add_argument_group("search")
    g.add_argument(
        "--dimension",
        default="users",
        choices=("users", "arrival_rate"),
        help="what to step up: concurrent users (closed loop) or session arrival "
        "rate in sessions/s (open loop)",
    )
    g.add_argument(
        "--min", dest="min_load", type=float, default=1.0, help="lowest load tried (default 1)"
    )
    g.add_argument(
        "--max", dest="max_load", type=float, default=64.0, help="highest load tried (default 64)"
    )
    g.add_argument(
        "--factor",
        type=float,
        default=2.0,
        help="step-up factor between loads until a step fails (default 2)",
    )
    g.add_argument(
        "--precision",
        type=float,
        default=None,
        help="stop bisecting when pass and fail loads are this close "
        "(default: 1 user, or 5%% of a rate)",
    )
    g.add_argument(
        "--step-duration",
        default="30s",
        help="measurement window per step, after the warm-up (default 30s)",
    )
    g.add_argument("--warmup", default="10s", help="warm-up per step, not judged (default 10s)")
    g.add_argument("--max-steps", type=int, default=30, help="most steps run (default 30)")
    return p  # fmt: skip


def _seconds(text: str, flag: str) -> float:
    try:
        return parse_duration(text)
    except UsageError:
        raise UsageError(f"bad {flag} {text!r}: use e.g. 10s, 1m") from None


def main_capacity(argv: list[str]) -> int:
    """Parse, check, search, write capacity.json / capacity.html; the exit code."""
    args = build_parser().parse_args(argv)
    values = raw_values(args)
    values["argv"] = " ".join(["agentload", "capacity", *argv])
    spec = resolve_spec(values)
    window = _seconds(args.step_duration, "--step-duration")
    warmup = 0.0 if str(args.warmup).strip() in ("0", "0s") else _seconds(args.warmup, "--warmup")
    slos = spec.slos()
    if not any(slos.values()):
        raise UsageError(NO_SLO)
    problems = validate_slos(slos)
    if problems:
        raise UsageError(problems[0])
    search = search_spec(
        args.dimension, args.min_load, args.max_load, factor=args.factor,
        precision=args.precision, quantile=None, max_steps=args.max_steps,
    )  # fmt: skip
    if args.dimension == "arrival_rate":  # every step's profile is this one at another rate
        apply_arrival(spec.profile, {"arrival_rate": search.min_load, "arrival": spec.arrival})
    # the fewest samples that can settle a pass of the strictest quantile SLO (p95: 59)
    quantiles = [q for s in slos.values() for k in s if (q := slo_quantile(k)) is not None]
    need = max((samples_to_settle(q) for q in quantiles), default=0)
    run_id = artifacts.new_run_id()
    out = Path(spec.out) if spec.out else artifacts.default_out_dir(f"capacity-{run_id}")
    if (out / "capacity.json").exists():
        raise UsageError(f"--out {out} already holds a capacity search; choose another directory")
    out.mkdir(parents=True, exist_ok=True)
    spec = spec.replace(out=str(out), run_id=run_id)
    return _search(spec, search, slos, warmup, window, need)


def _search(
    spec: RunSpec,
    search: SearchSpec,
    slos: dict[str, dict[str, float]],
    warmup: float,
    window: float,
    need: int,
) -> int:
    sim = None
    try:
        if not spec.host:
            sim, spec = start_embedded_sim(spec, note="; it stays up for every step")
        preflight(spec)
        driver = CapacityDriver(
            slos=slos,
            out=Path(spec.out),
            warmup_s=warmup,
            window_s=window,
            max_error_ratio=spec.max_error_ratio,
            start_step=lambda load, step_out: _start_step(
                spec, load, step_out, warmup + window + STEP_SLACK_S, search.dimension
            ),
        )
        try:
            result = driver.search(search)
        except RuntimeError as e:
            raise SetupError(str(e)) from None
        result["quantile_samples_needed"] = need
        for s in result["steps"]:  # (few): a quantile SLO's verdict the samples do not settle
            s["too_few_samples"] = bool(s.get("unsettled"))
        print(write_outputs(Path(spec.out), result), flush=True)
        print(f"agentload: capacity.json and capacity.html in {spec.out}", flush=True)
        if driver.stopped is not None:
            print(stopped_line(driver.stopped, f"capacity search stopped after "
                               f"{len(result['steps'])} step(s); every step's run and "
                               f"capacity.json / capacity.html in {spec.out} are complete"),
                  flush=True)  # fmt: skip
            return exit_code_for_signal(driver.stopped)
        if result["capacity"] is None:
            first = result["steps"][0] if result["steps"] else {}
            return EXIT_INCONCLUSIVE if first.get("verdict") == "inconclusive" else EXIT_SLO
        return EXIT_OK
    finally:
        if sim is not None:
            sim.stop()


def _start_step(
    spec: RunSpec, load: float, out: Path, duration_s: float, dimension: str = "users"
) -> subprocess.Popen[bytes]:
    """One bounded `agentload run` at this load, as a Locust child (like `agentload run`'s):
    `load` closed-loop users, or (dimension arrival_rate) sessions per second started open
    loop. The step's spec is the search's with the load set; the profile is not re-read."""
    if dimension == "arrival_rate":
        base = spec.profile.run.arrival or next(
            (c.arrival for c in spec.profile.classes.values() if c.arrival is not None), None
        )
        arrival = arrival_spec(
            float(load), spec.arrival or _process(base),
            max_in_flight=spec.max_in_flight if spec.max_in_flight is not None
            else (base.max_in_flight if base else None),
            at_cap=spec.at_cap or (base.at_cap if base else "queue"),
        )  # fmt: skip
        spec = spec.replace(profile=with_arrival(spec.profile, arrival), arrival_rate=float(load))
        users = spec.users
    else:
        users = int(load)
    step = spec.replace(
        users=users,
        spawn_rate=float(max(users, 1)),
        duration_s=duration_s,
        out=str(out),
        run_id=f"{spec.run_id}-{out.name}",
        progress_interval=0.0,
        web=False,
    )
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    out.mkdir(parents=True, exist_ok=True)
    spec_file = write_spec(step, out)
    with open(out / "locust.log", "wb") as log:  # the child keeps its own handle
        return subprocess.Popen(  # noqa: PLW1509
            locust_argv(step, spec_file),
            env=env,
            preexec_fn=die_with_parent(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a stop reaches it once, from here (stopping.forward_stop)
        )


def _process(base: ArrivalSpec | None) -> str:
    if base is None:
        return "poisson"
    return f"gamma:{base.cv:g}" if base.process == "gamma" else str(base.process)
