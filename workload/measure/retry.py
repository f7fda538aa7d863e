"""When to re-send a failed request: a pure policy over the record of the failed attempt.

Each attempt is its own record (``attempt`` 0, 1, ...). The session planner decides *whether*
to retry (the class's ``retries`` budget); this module decides *how long to wait* first:

* the server said ``Retry-After`` (recorded as ``retry_after_s`` on a 429 / 503): wait that
  long, capped at ``max_delay_s`` so a hostile header cannot park a user for an hour;
* a 429 or 503 without the header: exponential backoff ``base_s * 2**attempt`` (capped);
* anything else (connect error, reset, bad response): ``other_s`` (0 keeps the old
  immediate re-send).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BACKOFF_STATUSES = (429, 503)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Waits before a re-send, in seconds."""

    base_s: float = 1.0
    max_delay_s: float = 60.0
    other_s: float = 0.0


DEFAULT_POLICY = RetryPolicy()


def next_delay_s(record: object, attempt: int, policy: RetryPolicy = DEFAULT_POLICY) -> float:
    """Seconds to wait before re-sending after ``record`` (the failed attempt ``attempt``)."""
    ra = getattr(record, "retry_after_s", None)
    if isinstance(ra, (int, float)) and not isinstance(ra, bool) and math.isfinite(ra):
        return float(min(max(0.0, ra), policy.max_delay_s))
    if getattr(record, "http_status", None) in BACKOFF_STATUSES:
        n = max(0, min(int(attempt), 30))
        return float(min(policy.base_s * (2**n), policy.max_delay_s))
    return float(min(policy.other_s, policy.max_delay_s))
