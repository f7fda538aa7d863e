"""`--metrics-port`: a scrape mid-run finds every family; the last one matches stats.json."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cli import CHAT_PROFILE
from workload.measure.live_metrics import metric_names

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str, timeout: float = 10.0) -> dict[str, list[Any]] | None:
    """{sample name: [(labels, value)]} of one scrape; None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return None
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(f"family:{family.name}", [])
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(samples: dict[str, list[Any]], name: str, **match: str) -> float:
    return sum(
        v
        for labels, v in samples.get(name, [])
        if all(labels.get(k) == x for k, x in match.items())
    )


def run_and_scrape(
    out: Path, *extra: str, duration: str = "6s"
) -> tuple[dict, dict, subprocess.CompletedProcess]:
    """Start a run serving /metrics; scrape it while it runs and once its files are written.

    Waits on conditions, each bounded by one deadline, not on fixed sleeps: `mid` is the first
    scrape with requests taken before stats.json exists; `final` is the first scrape that
    answers once run.json (written after stats.json) exists. The process that serves is busy
    writing the report right then (a loaded machine takes seconds), so a scrape that gets no
    answer is tried again, not taken as the end. The linger (5 s) only has to outlast that
    retry: the process lingers after its files are written, so a scrape sent once run.json
    exists is answered by the linger at the latest (30 s cost each test 25 s of idle wait).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = [sys.executable, "-m", "workload.cli", "run", "--profile", CHAT_PROFILE,
           "--users", "3", "--duration", duration, "--sim-preset", "fast", "--out", str(out),
           "--metrics-port", str(port), "--metrics-linger", "5", *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        mid = final = None
        deadline = time.monotonic() + 180
        while final is None and time.monotonic() < deadline and proc.poll() is None:
            ended = (out / "run.json").exists()  # stats.json and run.json are written
            if mid is None and not (out / "stats.json").exists():
                now = scrape(url)
                if now and total(now, "agentload_requests_total") > 0 and not (
                    out / "stats.json").exists():  # fmt: skip
                    mid = now
            elif ended:
                final = scrape(url)
            time.sleep(0.3)
        stdout, stderr = proc.communicate(timeout=90)  # the rest of the linger
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    assert done.returncode == 0, stdout + stderr
    assert mid is not None and final is not None, stdout + stderr
    return mid, final, done


def check_final_matches_stats(final: dict, out: Path) -> None:
    stats = json.loads((out / "stats.json").read_text())
    for cls, by_step in stats["steps"].items():
        for step, view in by_step.items():
            c = view["counters"]
            for status, key in (("ok", "ok"), ("error", "errors"), ("cancelled", "cancelled")):
                got = total(
                    final, "agentload_requests_total", step=step, status=status, **{"class": cls}
                )
                assert got == c[key], (cls, step, status)
            for kind, n in view["errors_by_kind"].items():
                assert total(final, "agentload_request_errors_total", step=step, kind=kind) == n
    for cls, view in stats["classes"].items():
        by = {"class": cls}
        c = view["counters"]
        assert total(final, "agentload_tokens_total", type="input", **by) == c["prompt_tokens"]
        assert total(final, "agentload_tokens_total", type="output", **by) == c["completion_tokens"]
        for outcome in ("completed", "failed", "tool_loop_failure", "cancelled"):
            got = total(final, "agentload_sessions_total", outcome=outcome, **by)
            assert got == view["sessions"].get(outcome, 0), (cls, outcome)
        for metric, name in (("ttft", "agentload_ttft_seconds"), ("e2e", "agentload_e2e_seconds"),
                             ("tpot", "agentload_tpot_seconds"), ("itl", "agentload_itl_seconds")):  # fmt: skip
            # stats.json has no histogram a run recorded nothing in: ITL gaps need two
            # content chunks read apart, and a loaded machine may read a short answer's
            # chunks in one read (so no gap at all); then the family must count none either
            h = view["hists"].get(metric, {"count": 0, "sum_us": 0})
            assert total(final, f"{name}_count", **by) == h["count"]
            assert total(final, f"{name}_sum", **by) == pytest.approx(h["sum_us"] / 1e6)
            assert total(final, f"{name}_bucket", le="+Inf", **by) == h["count"]
        genai = total(final, "gen_ai_server_time_to_first_token_seconds_count", agentload_class=cls)
        assert genai == view["hists"]["ttft"]["count"]
        acc = total(final, "agentload_spec_decode_accepted_tokens_total", **by)
        assert acc == view["spec"]["accepted_tokens"]
    overall = stats["overall"]["counters"]
    assert total(final, "agentload_requests_total") == overall["requests"] > 0


def never_backwards(mid: dict, final: dict) -> None:
    """No counter or histogram series of the run counts less at the end than mid-run (to
    Prometheus that is a counter reset: the ITL histogram once dropped to 0 at the end)."""
    went_back = []
    for name, samples in mid.items():
        if name.startswith(("agentload_", "gen_ai_")) and name.endswith(
            ("_total", "_count", "_sum", "_bucket")
        ):
            for labels, v in samples:
                after = total(final, name, **labels)
                if after < v:
                    went_back.append((name, labels, v, after))
    assert not went_back, went_back[:5]


def test_a_single_process_run_serves_every_family_and_ends_on_its_stats(tmp_path: Path) -> None:
    out = tmp_path / "one"
    mid, final, _ = run_and_scrape(
        out, "--label", "container.tag=vllm:0.29", "--sim-fault", "500=0.1",
        "--max-error-ratio", "1",
    )  # fmt: skip
    # Every family is there while the run goes (the parser names counters without _total).
    families = {name.removeprefix("family:") for name in mid if name.startswith("family:")}
    expected = {n.removesuffix("_total") for n in metric_names()}
    assert expected <= families, sorted(expected - families)
    assert total(final, "agentload_request_errors_total") > 0  # the injected 500s, by kind
    assert total(mid, "agentload_requests_total") <= total(final, "agentload_requests_total")
    check_final_matches_stats(final, out)
    never_backwards(mid, final)
    info = final["agentload_run_info"][0][0]
    assert info["label_container_tag"] == "vllm:0.29"
    assert info["run_id"] == json.loads((out / "run.json").read_text())["run_id"]
    # Every session and request that started has ended and was counted.
    assert total(final, "agentload_requests_in_flight") == 0
    assert total(final, "agentload_sessions_in_flight") == 0
    sessions = json.loads((out / "stats.json").read_text())["overall"]["sessions"]
    assert total(final, "agentload_sessions_started_total") == sum(
        sessions.values()
    ) - sessions.get("good", 0)


def test_the_master_serves_the_workers_merged_numbers(tmp_path: Path) -> None:
    out = tmp_path / "two"
    # 12 s, not 6: the master's numbers move with the workers' stats reports (every 3 s), and
    # a loaded machine's workers may send their first requests late; mid needs one report
    # with requests in it before the run's end
    mid, final, _ = run_and_scrape(out, "--workers", "2", duration="12s")
    assert final["agentload_run_info"][0][0]["role"] == "master"
    assert total(mid, "agentload_requests_total") > 0
    check_final_matches_stats(final, out)
    never_backwards(mid, final)
    # Both workers wrote requests, and the master's counts hold both.
    rows = sum(len(p.read_text().splitlines()) for p in out.glob("requests-*.jsonl"))
    assert total(final, "agentload_requests_total") == rows
    assert total(final, "agentload_sessions_started_total") > 0
