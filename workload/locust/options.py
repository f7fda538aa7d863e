"""agentload's options on Locust's command line (and in the web UI start form).

The options are the run table (`workload.run.options.OPTIONS`); this module only
registers them on Locust's parser and reads a RunSpec back from Locust's parsed
options: from the spec file `agentload run` wrote (`--agent-spec-file`), from the
spec Locust's master sent a worker in its spawn message, or resolved from the
options themselves under plain `locust -f`. Plain `locust -f locustfiles/agents.py` accepts the same
options as `agentload run`. Locust already owns `--profile` (a run-grouping
label), `--users`, `--spawn-rate`, `--run-time` and `--host`, so ours is
`--agent-profile` and the rest come from Locust's own values.
"""

from __future__ import annotations

import sys
from typing import Any

from workload.run.options import BY_NAME, OPTIONS, add_options, raw_values
from workload.run.spec import RunSpec, read_spec, resolve_spec

# The attribute of Locust's parsed options that carries the master's spec to its workers
# (Locust sends every custom option with each spawn message; it is on no command line).
WORKER_SPEC = "agent_spec"

# Options of the start form that re-resolve the run when changed there (out only names a directory).
FORM_OPTIONS = tuple(o.name for o in OPTIONS if o.web and o.locust_flags and o.name != "out")


def add_arguments(parser: Any) -> None:
    """Register agentload options on Locust's (configargparse) parser."""
    # Locust's own parser (not an argument group) knows include_in_web_ui.
    add_options(parser, OPTIONS, locust=True)


def locust_values(opts: Any, host: str, workers: int) -> dict[str, Any]:
    """Raw run values from Locust's parsed options: ours, plus the ones Locust owns."""
    values = raw_values(opts)
    values.pop("spec_file", None)
    # agentload_run_time: Locust's --run-time, taken over (workload.locust.run_clock)
    run_time = getattr(opts, "agentload_run_time", None) or getattr(opts, "run_time", None)
    users = getattr(opts, "num_users", None)
    spawn = getattr(opts, "spawn_rate", None)
    values.update(
        host=host or "",
        users=str(users) if users else "",
        spawn_rate=str(spawn) if spawn else "",
        duration_s=f"{run_time}s" if run_time else "",
        workers=str(max(1, workers)),
        argv=values.get("argv") or " ".join(sys.argv),
    )
    return values


def spec_from_options(opts: Any, host: str, workers: int) -> RunSpec:
    """The run described by Locust's options: the master's (a worker), the spec file
    `agentload run` wrote, else one resolved from the options themselves. Raises UsageError."""
    text = getattr(opts, WORKER_SPEC, "") or ""
    path = getattr(opts, "agent_spec_file", "") or ""
    if text:
        spec = RunSpec.from_json(text)
    elif path:
        spec = read_spec(path)
    else:
        return resolve_spec(locust_values(opts, host, workers))
    # Locust-only options given after `agentload run ... --` still apply.
    changes = {
        o.name: o.parse(getattr(opts, o.key))
        for o in OPTIONS
        if not o.flags and o.locust_flags and o.name != "spec_file"
        and getattr(opts, o.key, o.default) not in (o.default, None)
    }  # fmt: skip
    return spec.replace(**changes) if changes else spec


def form_changed(opts: Any, spec: RunSpec) -> bool:
    """Did the start form change an option the spec was resolved from?"""
    for name in FORM_OPTIONS:
        o = BY_NAME[name]
        now = getattr(opts, o.key, o.default)
        before = spec.options.get(name, o.default)
        if str(now if now is not None else "") != str(before if before is not None else ""):
            return True
    return False


def reresolve(opts: Any, spec: RunSpec) -> RunSpec:
    """The spec again, with the start form's values (a new profile or seed): loads once more."""
    values = dict(spec.options)
    for name in FORM_OPTIONS:
        o = BY_NAME[name]
        values[name] = getattr(opts, o.key, o.default)
    values.update(run_id=spec.run_id, argv=spec.argv, out=spec.out, host=spec.host)
    values.setdefault("workers", str(spec.workers))
    return resolve_spec(values)
