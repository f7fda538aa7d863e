"""The embedded simulator as the target when no --host is given (run and capacity)."""

from __future__ import annotations

from typing import Any

from workload.errors import SimStartError, UsageError
from workload.sim.launcher import SimProcess


def start_embedded_sim(spec: Any, note: str = "") -> tuple[Any, Any]:
    """Start the simulator the spec asks for; returns (the running SimProcess, the spec
    pointed at it). The caller stops it (``sim.stop()``). Raises UsageError (one line)."""
    sim = SimProcess(preset=spec.sim_preset, faults=list(spec.sim_faults), sets=list(spec.sim_sets))
    try:
        sim.start()
    except SimStartError as e:
        raise UsageError(f"the embedded simulator did not start: {e}") from None
    spec = spec.replace(host=sim.url)
    print(
        f"agentload: no --host given; started the embedded simulator at {spec.host} "
        f"(preset {spec.sim_preset}){note}",
        flush=True,
    )
    return sim, spec
