"""The `agentload` command (thin subcommands over run/, analyze/, report/)."""

from workload.cli.main import main

__all__ = ["main"]
