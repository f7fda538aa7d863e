"""The one error edge: every exit code, every user-facing error class, the one error line.

Bottom layer (standard library only). A product error is an ``AgentloadError``
raised where the input is checked, with its exit code and, where it helps, a hint;
it travels up untouched and becomes one line at the edge: ``print_error`` is the
only function that writes ``agentload: error: ...``, and ``run_edge`` the only
place that turns an error into an exit code. Every command (``workload.cli.main``,
``agentload sim`` run on its own) and the Locust child's set-up go through them.

Errors on the hot path are data (records), never exceptions. Exceptions that
never reach a user (control flow inside one module) stay private to that module.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import NoReturn

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

PREFIX = "agentload: error: "


class AgentloadError(Exception):
    """Base of every error agentload reports to a user as one line (`line()`)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def line(self) -> str:
        """The one line shown to the user (without the `agentload: error:` prefix)."""
        text = " ".join(str(self).split("\n"))
        return f"{text}; {self.hint}" if self.hint else text


class UsageError(AgentloadError):
    """Bad input from the command line (one line, exit 2)."""


class SetupError(AgentloadError):
    """Bad input or an unusable target found while preparing a run (one line)."""


class ProfileError(AgentloadError):
    """A profile cannot be used; ``problems`` holds one human-readable line per problem."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class ProfileTextError(AgentloadError, ValueError):
    """A YAML text this reader refuses (too large, too deep, too many aliases), with its line.
    (A ValueError too: the loader reports it as a ProfileError problem with file:line.)"""


class ArrivalError(UsageError, ValueError):
    """An arrival rate or process that cannot be used. (A ValueError too, because the
    profile's pydantic validators call the same checks and pydantic reports ValueErrors.)"""


class StageError(UsageError, ValueError):
    """Load stages that cannot be played (a ValueError too: pydantic validators raise it)."""


class TraceError(UsageError):
    """A trace file cannot be read (one line: file:line: reason)."""


class TokenizerUnavailable(SetupError):
    """The requested tokenizer cannot be loaded here (one-line reason)."""


class SimConfigError(UsageError):
    """A simulator preset, `--set` or `--fault` value that cannot be used."""


class SimStartError(SetupError):
    """The simulator did not come up (one-line reason, with its last stderr line)."""


class CompareError(AgentloadError):
    """Bad input to a comparison (missing or unreadable run directory)."""


class CanaryError(CompareError):
    """A canary cannot start or a side failed to produce a run (one line, exit 2)."""


class ServerConfigError(UsageError):
    """A server command or --servers file that cannot be used (one line, exit 2)."""


class CapacityError(UsageError):
    """Bad capacity-search settings (one line, exit 2)."""


class ArgParser(argparse.ArgumentParser):
    """An argparse parser whose errors are UsageError (one line, exit 2), not usage + exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def print_error(message: str) -> None:
    """Write the one error line (the only writer of `agentload: error:`)."""
    print(PREFIX + " ".join(message.split("\n")), file=sys.stderr, flush=True)


def print_warning(message: str) -> None:
    """Write one warning line, `agentload: warning: ...`, on stderr (where a CI log shows it);
    the run goes on."""
    print("agentload: warning: " + " ".join(message.split("\n")), file=sys.stderr, flush=True)


def report(e: AgentloadError) -> int:
    """Print the error's line; its exit code."""
    print_error(e.line())
    return e.exit_code


def run_edge(body: Callable[[], int]) -> int:
    """Run a command's body; an AgentloadError or an unreadable file becomes one line and
    its exit code, `--help` its status. The only place an error becomes an exit code."""
    try:
        return int(body())
    except AgentloadError as e:
        return report(e)
    except OSError as e:  # a file named on the command line that cannot be read or written
        where = f"{e.filename}: " if e.filename else ""
        print_error(f"{where}{e.strerror or e}")
        return EXIT_BAD_INPUT
    except SystemExit as e:  # argparse --help (errors raise UsageError instead)
        return e.code if isinstance(e.code, int) else 0
