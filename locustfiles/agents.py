"""Agent sessions from an agentload profile, for plain `locust`:

    locust -f locustfiles/agents.py --host http://127.0.0.1:8000 --agent-profile coding-agent \
        --users 20 --spawn-rate 5 --run-time 2m --headless --seed 7
"""

from workload.locust.locustfile import *  # noqa: F403 - AgentUser and the event wiring
