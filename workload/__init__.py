"""agentload: agent-shaped load for OpenAI-compatible inference servers."""

__version__ = "0.1.0"
