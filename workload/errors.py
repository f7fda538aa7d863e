"""The one error hierarchy and the exit codes (bottom layer: imports nothing of ours).

Errors are raised where input is checked and turned into one line
("agentload: error: ...") plus an exit code at the CLI edge only
(`workload.cli.main.main`).
"""

from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_ERRORS = 1  # errors above the allowed ratio
EXIT_BAD_INPUT = 2  # bad input or an unusable target
EXIT_SLO = 3  # an SLO violated (run)
EXIT_REGRESSION = 3  # the candidate is worse (compare, canary)
EXIT_INCONCLUSIVE = 4  # could not have seen a threshold-sized regression (compare, canary)
EXIT_PARTIAL = 1  # the run is incomplete: a worker was lost mid-run (run.json "partial")
EXIT_SIGHUP = 129  # 128 + SIGHUP: the terminal went away
EXIT_SIGINT = 130  # 128 + SIGINT: Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM: a script or CI cancelled the run

# The stop protocol between `agentload run` and its Locust child (workload.locust.launch, which
# imports only this module before gevent patches): the env var naming the fd on which the child
# writes one byte once its Python runs; until then a stop signal kills it instead.
READY_FD_ENV = "AGENTLOAD_READY_FD"
# Stop signals this close together are one stop, on both sides: a terminal's Ctrl-C to the
# group plus a supervisor passing it on, or `pkill -INT -f` reaching parent and child at once.
SAME_STOP_S = 0.25


def exit_code_for_signal(signum: int) -> int:
    """The conventional shell exit status of a run ended by signal `signum` (128 + signum)."""
    return 128 + int(signum)


def stopped_before_run_line(signum: int) -> str:
    """The last line of `agentload run` stopped by `signum` before its run began."""
    return (
        f"agentload: exit {exit_code_for_signal(signum)}: interrupted "
        f"({signal.Signals(signum).name}) before the run started; nothing was measured"
    )


class AgentloadError(Exception):
    """Base of every error agentload reports to a user as one line."""

    exit_code = EXIT_BAD_INPUT


class UsageError(AgentloadError):
    """Bad input from the command line (one line, exit 2)."""


class SetupError(AgentloadError):
    """Bad input or an unusable target found while preparing a run (one line)."""


class ProfileError(AgentloadError):
    """A profile cannot be used; ``problems`` holds one human-readable line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))
