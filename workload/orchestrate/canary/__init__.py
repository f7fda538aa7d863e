"""`agentload canary`: two deployments, the same seeded traffic in paired blocks, a verdict."""
