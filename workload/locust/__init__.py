"""Locust integration: the only package (with locustfiles/) that imports locust.

Write your own locustfile around agentload's sessions::

    import workload.locust as agentload
    from locust import events

    agentload.register(events)

    class MyAgents(agentload.AgentUser):
        ...   # e.g. a different wait_time or an extra @task

Import the module, not the class name, so Locust does not also pick up
`AgentUser` itself from your module's globals.

The names below load on first use, so the package's Locust-free modules import
without importing locust: `python -m workload.locust.launch` imports it only inside its
entry-point cache, and in-process tests (`open_loop`, `health`, `options`) stay unpatched.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AgentUser", "assign_class", "play", "register"]


def __getattr__(name: str) -> Any:
    if name == "register":
        from workload.locust.plugin import register  # deferred: imports locust, see above

        return register
    if name in ("AgentUser", "assign_class", "play"):
        from workload.locust import users  # deferred: imports locust, see above

        return getattr(users, name)
    raise AttributeError(f"module 'workload.locust' has no attribute {name!r}")
