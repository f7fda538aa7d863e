"""Locust integration: the only package (with locustfiles/) that imports locust.

Write your own locustfile around agentload's sessions::

    import workload.locust as agentload
    from locust import events

    agentload.register(events)

    class MyAgents(agentload.AgentUser):
        ...   # e.g. a different wait_time or an extra @task

Import the module, not the class name, so Locust does not also pick up
`AgentUser` itself from your module's globals.
"""

from workload.locust.plugin import register
from workload.locust.users import AgentUser, assign_class, play

__all__ = ["AgentUser", "assign_class", "play", "register"]
