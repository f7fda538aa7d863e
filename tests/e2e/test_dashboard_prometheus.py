"""The Grafana dashboard against reality: every panel's query returns data from a real run.

A real Prometheus (Debian's /usr/bin/prometheus) scrapes a real `agentload run
--metrics-port` and the simulator it runs against (job `vllm`: vLLM's `vllm:` names) every
second; each target of each panel, with Grafana's variables substituted as Grafana would, is
evaluated with /api/v1/query_range. tests/test_deploy.py checks the names statically; this
checks that the queries, labels and variables fit what a run really exports.
Skipped without Prometheus unless AGENTLOAD_REQUIRE_PROMETHEUS=1 (CI sets it).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

STEP_S = 1
BENCH = Path(__file__).resolve().parent.parent.parent / "bench"


@pytest.fixture
def promstack(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import _promstack

    if not _promstack.PROMETHEUS.exists():
        missing = f"{_promstack.PROMETHEUS} is missing (apt-get install prometheus)"
        if os.environ.get("AGENTLOAD_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"AGENTLOAD_REQUIRE_PROMETHEUS=1 but {missing}")
        pytest.skip(missing)
    return _promstack


def test_every_dashboard_query_returns_data_from_a_real_run(tmp_path, promstack) -> None:
    dash = json.loads(promstack.DASHBOARD.read_text())
    with promstack.PromStack(tmp_path, duration_s=10) as stack:
        code = stack.wait_for_run(timeout_s=120)
        assert code in (0, 1), stack.log("run")  # 1: the injected 500s may pass the ratio
        time.sleep(2 * promstack.SCRAPE_S)  # the last scrape of the linger is in
        end = time.time()
        up = stack.prom.targets_up()
        assert set(up) == {"agentload", "vllm"}, up
        variables = promstack.variable_values(dash, stack.prom, stack.started, end)
        empty, checked = [], 0
        for panel, target in promstack.dashboard_queries(dash):
            expr = promstack.substitute(target["expr"], variables, STEP_S, end - stack.started)
            assert "$" not in expr, (panel["title"], expr)
            result = stack.prom.query_range(expr, stack.started, end, STEP_S)
            checked += 1
            if not promstack.has_data(result):
                legend = target.get("legendFormat", target.get("refId"))
                empty.append(f"panel {panel['title']!r}, {legend!r}: {expr}")
    assert checked >= 30, checked
    tail = "\n".join(stack.log("run").splitlines()[-12:])
    assert not empty, "no data from a real run:\n" + "\n".join(empty) + "\nthe run:\n" + tail
