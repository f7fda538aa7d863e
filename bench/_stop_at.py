"""`--stop-at HH:MM` for the campaign scripts: the next time the UTC clock reads HH:MM.

A campaign started at 22:50 with `--stop-at 01:15` means the 01:15 after midnight, not the
one 21 hours ago (which started no trial and exited 0).
"""

from __future__ import annotations

import datetime as dt


def next_utc(hhmm: str, now: dt.datetime | None = None) -> dt.datetime:
    """The first moment at or after `now` whose UTC clock reads `hhmm` ("HH:MM")."""
    try:
        h, m = map(int, hhmm.split(":"))
        now = now or dt.datetime.now(dt.UTC)
        at = now.replace(hour=h, minute=m, second=0, microsecond=0)
    except ValueError:
        raise SystemExit(
            f"--stop-at {hhmm!r}: expected HH:MM in UTC, e.g. --stop-at 01:15"
        ) from None
    return at if at > now else at + dt.timedelta(days=1)
