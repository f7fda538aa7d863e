"""A synthetic agent run for report tests: tool steps, tool-loop failures, a failed SLO, exit 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.builders import ClassSpec, write_run

FINGERPRINT: dict[str, Any] = {
    "server_version": {"value": "0.11.0", "source": "/version"},
    "kv_num_gpu_blocks": {"value": 4096, "source": "/metrics cache_config_info"},
    "model_runner": {"value": "unknown", "source": None},
    "tensor_parallel_size": {"value": 1, "source": "/server_info"},
    "mamba_cache_mode": {"value": "unknown", "source": None},
    "label.team": {"value": "infra", "source": "operator label"},
}


PAUSES_S = (0.5, 4.0, 12.0, 25.0, 50.0, 100.0)


def agent_run(path: Path, scale: int = 1, **overrides: Any) -> Path:
    """Write a run whose even steps are planned tool calls, 25 % of sessions end in a malformed
    tool call and 5 % fail; run.json says exit 1 (error ratio above 5 %) and one SLO failed."""
    classes = {
        "coding-agent": ClassSpec(sessions=60 * scale, steps=6),
        "background": ClassSpec(sessions=20 * scale, steps=2, ttft_ms=800.0),
    }
    kw: dict[str, Any] = dict(classes=classes, tool_loop_failures=0.25, failed_sessions=0.05,
                              duration_s=120.0 * scale, fingerprint=FINGERPRINT, labels={"team": "infra"})  # fmt: skip
    kw.update(overrides)
    run = write_run(path, **kw)
    rows = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    # Idle gaps of 0.5 s to 90 s before later steps (the builder leaves 1 s): tool pauses vary.
    shift: dict[str, float] = {}
    for r in sorted(rows, key=lambda d: (d["session_id"], d["step"])):
        if r["step"] > 1:
            shift[r["session_id"]] = shift.get(r["session_id"], 0.0) + PAUSES_S[(r["step"] - 2) % 6]
        r["t_start"] += shift.get(r["session_id"], 0.0)
    for r in rows:
        if r["step"] % 2 == 0 or r.get("error_kind") == "tool_loop":
            r["planned_tool"] = "read_file"
        if r.get("error_kind") == "tool_loop":
            r["tool_loop_failure"] = "malformed tool call"
            r["error_detail"] = 'arguments are not valid JSON: \'{"path": "src/ma\''
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    meta = json.loads((run / "run.json").read_text())
    meta["exit_code"] = 1
    meta["profile"]["max_error_ratio"] = 0.05
    meta["profile"]["history"] = "actual"  # tool-loop failures: the server was asked for calls
    meta["slo_results"] = [
        {"class_name": "coding-agent", "metric": "ttft_p95_ms", "threshold": 800, "observed": 412.3,
         "passed": True, "unit": "ms", "bound": "<=", "skipped": False, "message": ""},
        {"class_name": "*", "metric": "tool_loop_failure_ratio", "threshold": 0.05,
         "observed": 0.15384615384615385, "passed": False, "unit": "ratio", "bound": "<=",
         "skipped": False, "message": ""},
    ]  # fmt: skip
    (run / "run.json").write_text(json.dumps(meta))
    return run
