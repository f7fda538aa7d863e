"""`python -m workload.locust.launch ARGS`: Locust's command line, quiet on an early Ctrl-C.

`agentload run` starts Locust as a child in the same process group, so a Ctrl-C reaches
both. Once Locust runs it stops cleanly on SIGINT; before that (importing locust and
gevent, loading the locustfile: about a second) the signal would end the child with
a KeyboardInterrupt traceback under the parent's one-line "interrupted" message. Here
it ends with the SIGINT exit status and nothing printed: the parent says what happened.
"""

from __future__ import annotations

import contextlib
import os
import sys
from importlib import metadata

from workload.errors import EXIT_SIGINT
from workload.stopping import READY_FD_ENV, tolerate_closed_stdout


def main() -> int:
    tolerate_closed_stdout()  # `agentload run … | head -1`: the run goes on, silently
    try:
        # Tell `agentload run` this process runs Python code now: from here a Ctrl-C is a
        # KeyboardInterrupt caught below (before this, the parent kills it instead).
        fd = os.environ.pop(READY_FD_ENV, None)
        if fd is not None:
            with contextlib.suppress(OSError, ValueError):
                os.write(int(fd), b"1")
                os.close(int(fd))
        with _entry_points_read_once():
            # deferred: `import locust` is what the ready signal and the entry-point cache wrap
            from locust.main import main as locust_main
        locust_main()  # exits through sys.exit with Locust's own status
    except KeyboardInterrupt:
        return EXIT_SIGINT
    return 0


@contextlib.contextmanager
def _entry_points_read_once():  # type: ignore[no-untyped-def]
    """`import locust` runs gevent's monkey-patching, which looks up plugin entry points
    for each of its 25 events, each lookup reading every installed package's metadata:
    about 0.1 CPU-s per Locust process. While Locust is imported the metadata is read once."""
    real = metadata.entry_points
    everything = real()

    def once(**params):  # type: ignore[no-untyped-def]
        return everything.select(**params) if params else everything

    metadata.entry_points = once  # type: ignore[assignment]
    try:
        yield
    finally:
        metadata.entry_points = real


if __name__ == "__main__":
    sys.exit(main())
