"""Orchestration: the commands that drive runs (a run's child process, canary, capacity)."""
