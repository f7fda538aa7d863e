"""The locustfile `agentload run` uses: agent sessions from a profile."""

from locust import events

from workload.locust import AgentUser as AgentUser  # noqa: F401 - Locust collects it
from workload.locust import register

register(events)
