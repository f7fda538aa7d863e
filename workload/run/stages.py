"""Load stages (moved to ``workload.plan.stages``: the profile schema needs them, and the
plan layer sits below run). Kept here so ``workload.run.stages`` imports keep working."""

from workload.plan.stages import (
    MAX_STAGES,
    MAX_TOTAL_S,
    MAX_USERS,
    Dimension,
    LoadStages,
    Stage,
    StageError,
    StageList,
    Target,
    check_stages,
)

__all__ = [
    "MAX_STAGES",
    "MAX_TOTAL_S",
    "MAX_USERS",
    "Dimension",
    "LoadStages",
    "Stage",
    "StageError",
    "StageList",
    "Target",
    "check_stages",
]
