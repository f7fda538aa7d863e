"""`python -m workload.sim` / `agentload sim`: run the simulator until SIGINT or SIGTERM.

Prints exactly one line on stdout when ready:
``agentload-sim listening on http://HOST:PORT`` (port 0 picks a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from workload import memtrace
from workload.errors import ArgParser, SetupError, UsageError, run_edge
from workload.sim.config import PRESETS, SCENARIOS, build_config
from workload.sim.server import SimServer


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (shared with `agentload sim`)."""
    p = ArgParser(
        prog="agentload sim",
        description="Embedded vLLM simulator (OpenAI-compatible HTTP on 127.0.0.1).",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one")
    p.add_argument("--preset", default="default", help=f"one of: {', '.join(PRESETS)}")
    p.add_argument(
        "--preset-file",
        default=None,
        metavar="FILE",
        help="a preset written by `agentload sim calibrate`, applied on top of --preset",
    )
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="a named change on top of the preset, e.g. larger-batch-budget (repeatable)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for outputs, acceptance and faults")
    p.add_argument(
        "--no-instance-noise",
        action="store_true",
        help="a deterministic server: no instance noise (on by default, so two simulators of "
        "one preset differ as two real instances do; docs/simulator.md)",
    )
    p.add_argument(
        "--instance-seed",
        type=int,
        default=None,
        metavar="N",
        help="which instance this is (its speed, drift, jitter and stalls); default: a fresh one",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help="inject faults: 429, 500, 503, reset, malformed, stall, slow (repeatable)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a preset parameter, e.g. --set num_gpu_blocks=4096 (repeatable)",
    )
    p.add_argument("--ttft-scale", type=float, default=None, help="multiply prefill-step cost")
    p.add_argument("--itl-scale", type=float, default=None, help="multiply decode cost")
    p.add_argument("--model", default=None, help="served model name")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--list-presets", action="store_true", help="print presets and exit")
    return p


def _log_startup(cfg) -> None:
    """vLLM-like start-up lines on stderr, so server-log parsing has something real to read."""

    def log(level: str, msg: str) -> None:
        print(f"{level} agentload-sim: {msg}", file=sys.stderr, flush=True)

    log("INFO", f"vLLM API server version {cfg.version} (agentload-sim preset {cfg.preset})")
    log("INFO", f"# GPU blocks: {cfg.num_gpu_blocks}, # CPU blocks: 0")
    log(
        "INFO",
        f"Maximum concurrency for {cfg.max_model_len} tokens per request: "
        f"{cfg.num_gpu_blocks * cfg.block_size / cfg.max_model_len:.2f}x",
    )
    if cfg.model_runner == "v2":
        log("INFO", "Using V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1)")
    if cfg.spec_fallback_structured and cfg.spec_k:
        log(
            "WARNING",
            "scenario spec-off-for-structured (a hypothesis, not a documented vLLM "
            "behaviour): structured-output requests decode without speculative drafts",
        )
    for kind, rate in sorted(cfg.faults.items()):
        log("WARNING", f"fault injection: {kind} at rate {rate}")
    if cfg.instance_noise:
        log(
            "INFO",
            f"instance noise on (instance seed {cfg.instance_seed}; --no-instance-noise: a "
            "deterministic server)",
        )


async def _serve(cfg, host: str, port: int, seed: int) -> int:
    server = SimServer(cfg, seed)
    try:
        bound = await server.start(host, port)
    except OSError as e:
        raise SetupError(
            f"cannot listen on {host}:{port}: {e.strerror}; choose another --port (0: any free one)"
        ) from None
    _log_startup(cfg)
    # the handlers before the ready line: a supervisor that stops the simulator as soon as it
    # is ready gets a clean stop (exit 0), not a death by the signal's default action
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    shown = f"[{host}]" if ":" in host else host
    print(f"agentload-sim listening on http://{shown}:{bound}", flush=True)
    await stop.wait()
    await server.close()
    return 0


def _instance(cfg, args: argparse.Namespace) -> None:
    """Instance noise on unless --no-instance-noise (an explicit --set instance_noise=... wins);
    the instance seed from --instance-seed, an explicit --set, else fresh from the OS."""
    given = {k.partition("=")[0].strip() for k in args.set}
    if "instance_noise" not in given:
        cfg.instance_noise = not args.no_instance_noise
    if args.instance_seed is not None:
        if args.instance_seed < 0:
            raise UsageError(f"--instance-seed must be >= 0, got {args.instance_seed}")
        cfg.instance_seed = args.instance_seed
    elif "instance_seed" not in given:
        cfg.instance_seed = secrets.randbelow(2**31)


def main(argv: list[str] | None = None) -> int:
    """Parse args, build the config, serve; bad arguments -> one line on stderr, exit 2."""
    return run_edge(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate"]:
        from workload.sim.calibrate import (
            main_calibrate,
        )  # start-up: numpy (~0.1 s) only for calibration

        return main_calibrate(argv[1:])
    args = build_parser().parse_args(argv)
    if args.list_presets:
        for name, (desc, _) in PRESETS.items():
            print(f"{name:14} {desc}")
        for name, (desc, _) in SCENARIOS.items():
            print(f"scenario {name:24} {desc}")
        return 0
    file_settings = None
    if args.preset_file:
        from workload.sim.calibrate import (
            load_preset_file,
        )  # start-up: numpy (~0.1 s) only for calibration

        file_settings = load_preset_file(args.preset_file)
    cfg = build_config(
        args.preset,
        args.set,
        args.fault,
        file_settings=file_settings,
        scenarios=args.scenario,
        ttft_scale=args.ttft_scale,
        itl_scale=args.itl_scale,
        model=args.model,
        max_model_len=args.max_model_len,
    )
    if args.model:
        cfg.model_root = args.model
    _instance(cfg, args)
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")

    memtrace.start_from_env("sim")  # AGENTLOAD_TRACEMALLOC=path (soak diagnostics; off: no-op)
    try:
        runner = _runner(os.environ.get(LOOP_ENV, "").strip().lower() or "asyncio")
    except ImportError:
        raise SetupError(f"{LOOP_ENV}=uvloop, but uvloop is not installed",
                         hint="pip install uvloop, or unset it (asyncio's loop)") from None  # fmt: skip
    try:
        return runner(_serve(cfg, args.host, args.port, args.seed))
    except KeyboardInterrupt:
        return 0


# The simulator's loop: asyncio's unless AGENTLOAD_SIM_LOOP=uvloop. Every timing figure and
# calibration of the simulator was measured on asyncio's (uvloop is installed with agentload
# for `record`); a twin on each, 2026-12-04, agreed within 1 % but for cells that differ as
# much between two asyncio runs (docs/simulator.md, fidelity).
LOOP_ENV = "AGENTLOAD_SIM_LOOP"


def _runner(name: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    """asyncio.run, or uvloop.run for "uvloop" (ImportError where it is not installed)."""
    if name == "asyncio":
        return asyncio.run
    if name != "uvloop":
        raise UsageError(f"{LOOP_ENV}={name} is not an event loop", hint="give asyncio or uvloop")
    import uvloop  # deferred: optional, and only when asked for

    run: Callable[[Coroutine[Any, Any, int]], int] = uvloop.run
    return run


if __name__ == "__main__":
    sys.exit(main())
