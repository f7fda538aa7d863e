"""Open-loop session arrivals: when sessions start, independent of how fast they finish.

An arrival process gives the start times of sessions. Processes (``PROCESSES``):

- ``poisson``: exponential gaps, mean 1/rate (CV of the gaps = 1);
- ``gamma``: gamma gaps with mean 1/rate and coefficient of variation ``cv`` (burstiness:
  cv > 1 clumps sessions, cv < 1 spaces them; cv = 1 is Poisson);
- ``constant``: every gap exactly 1/rate.

Rates are written as a number (per second) or with a unit: ``"2"``/``"2ps"``/``"2/s"``
= 2 per second, ``"30pm"``/``"30/min"`` = 30 per minute. A profile class (or ``run``) may
carry an ``arrival:`` block, validated by ``ArrivalSpec``::

    arrival: {process: gamma, rate_per_s: 30pm, cv: 2.0, max_in_flight: 64, at_cap: drop}

Schedules are global and deterministic: ``ArrivalSchedule(spec, seed, stream)`` gives
the same times for the same (seed, stream), whatever the horizon (a shorter horizon
yields a prefix) and however many workers play it. Session k of the global schedule
belongs to worker ``k % n_workers``, so the union over workers is the 1-worker schedule.
The first session starts at t = 0 (a run never opens with an idle gap); later ones follow
at the process's gaps. Times are seconds from the start of the arrival phase.

Varying rates (load stages) use a time change: the process runs at unit rate in
"operational time" and ``warp`` maps it through the inverse cumulative rate of a
piecewise-linear rate curve (segments ``(t0, t1, rate_at_t0, rate_at_t1)``), which keeps
the process's shape (CV) at every rate.

``iter_worker`` yields one worker's (k, start time) pairs lazily, for long runs.
``InFlightGate`` keeps the ``max_in_flight`` / ``at_cap`` bookkeeping (queue or drop);
``lateness_summary`` reports how late sessions actually started against their schedule.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workload.errors import ArrivalError
from workload.plan.prompts import stable_key

PROCESSES = ("poisson", "gamma", "constant")
MAX_RATE_PER_S = 10_000.0  # beyond this a load generator cannot start sessions on time
MIN_RATE_PER_S = 1.0 / 86_400  # one per day: anything slower is a typo
MAX_CV = 20.0  # gamma shape 1/400: already almost all gaps ~0 with rare huge ones
MAX_IN_FLIGHT = 1_000_000
CHUNK = 4096  # draws per batch: fixed so the stream never depends on the horizon
MAX_SESSIONS = 20_000_000  # a schedule longer than this is a mistake, not a test


# ---------------------------------------------------------------- parsing


_UNITS = {"": 1.0, "ps": 1.0, "/s": 1.0, "pm": 1.0 / 60.0, "/min": 1.0 / 60.0, "/m": 1.0 / 60.0}


def check_rate(rate_per_s: float, what: str = "arrival rate") -> float:
    """The rate if finite and within [MIN_RATE_PER_S, MAX_RATE_PER_S]; else ArrivalError."""
    r = float(rate_per_s)
    if not math.isfinite(r) or r <= 0:
        raise ArrivalError(f"{what} must be a finite number > 0, got {rate_per_s!r}")
    if r > MAX_RATE_PER_S:
        raise ArrivalError(
            f"{what} {r:g}/s is above the limit of {MAX_RATE_PER_S:g}/s"
            " (one load generator cannot start sessions that fast)"
        )
    if r < MIN_RATE_PER_S:
        raise ArrivalError(f"{what} {r:g}/s is below the limit of one per day")
    return r


def parse_rate(text: str | float | int, what: str = "arrival rate") -> float:
    """Sessions per second from ``R``, ``Rps``, ``R/s``, ``Xpm`` or ``X/min`` (or a number)."""
    if isinstance(text, bool):
        raise ArrivalError(f"{what} must be a number or e.g. '2', '2ps', '30pm', got {text!r}")
    if isinstance(text, (int, float)):
        return check_rate(float(text), what)
    s = str(text).strip().lower().replace(" ", "")
    for unit in sorted(_UNITS, key=len, reverse=True):  # "" (per second) comes last
        if not s.endswith(unit):
            continue
        try:
            value = float(s[: len(s) - len(unit)])
        except ValueError:
            continue
        return check_rate(value * _UNITS[unit], what)
    raise ArrivalError(
        f"{what} {text!r} is not a rate: write R (per second), Rps, or Xpm (per minute),"
        " e.g. 2, 0.5ps, 30pm"
    )


def parse_arrival_rate(text: str) -> float:
    """The ``--arrival-rate R|Xpm`` value, in sessions per second."""
    return parse_rate(text, "--arrival-rate")


def check_cv(cv: float) -> float:
    """The gamma CV if finite and in (0, MAX_CV]; else ArrivalError."""
    c = float(cv)
    if not math.isfinite(c) or c <= 0 or c > MAX_CV:
        raise ArrivalError(f"gamma cv must be a finite number in (0, {MAX_CV:g}], got {cv!r}")
    return c


def parse_arrival_process(text: str) -> tuple[str, float | None]:
    """The ``--arrival poisson|constant|gamma:CV`` value as (process, cv or None)."""
    s = str(text).strip().lower()
    name, sep, arg = s.partition(":")
    if name not in PROCESSES:
        raise ArrivalError(
            f"--arrival {text!r} is not a process: use poisson, constant or gamma:CV (e.g. gamma:2)"
        )
    if name != "gamma":
        if sep:
            raise ArrivalError(f"--arrival {name} takes no parameter (only gamma:CV does)")
        return name, None
    if not arg:
        raise ArrivalError("--arrival gamma needs its CV, e.g. gamma:2 (CV 1 is Poisson)")
    try:
        cv = float(arg)
    except ValueError:
        raise ArrivalError(f"--arrival gamma:{arg} has no number after 'gamma:'") from None
    return "gamma", check_cv(cv)


# ---------------------------------------------------------------- the profile block


class ArrivalSpec(BaseModel):
    """How sessions arrive: process, mean rate, burstiness and an in-flight cap."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    process: Literal["poisson", "gamma", "constant"] = Field(
        "poisson", description="Gap distribution between session starts."
    )
    rate_per_s: float = Field(
        description="Mean session starts per second; a string may say '30pm' (per minute)."
    )
    cv: float | None = Field(
        None,
        description="gamma only: coefficient of variation of the gaps (1 = Poisson, >1 bursty).",
    )
    max_in_flight: int | None = Field(
        None,
        ge=1,
        le=MAX_IN_FLIGHT,
        description="Most sessions running at once (unbounded when unset).",
    )
    at_cap: Literal["queue", "drop"] = Field(
        "queue",
        description="A session due while max_in_flight run: 'queue' starts it late, 'drop' skips it.",
    )

    @field_validator("rate_per_s", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> float:
        return parse_rate(v, "rate_per_s")

    @model_validator(mode="after")
    def _cv(self) -> ArrivalSpec:
        if self.process == "gamma":
            if self.cv is None:
                raise ValueError("process gamma needs cv (1 is Poisson, >1 bursty)")
            check_cv(self.cv)
        elif self.cv is not None:
            raise ValueError(f"cv applies to process gamma only, not {self.process}")
        return self

    @property
    def gap_cv(self) -> float:
        """The coefficient of variation of the gaps this spec gives."""
        return {"poisson": 1.0, "constant": 0.0}.get(self.process, self.cv or 1.0)


def arrival_spec(rate: str | float, process: str = "poisson", **extra: Any) -> ArrivalSpec:
    """An ArrivalSpec from CLI-style values (``--arrival-rate``, ``--arrival``)."""
    name, cv = parse_arrival_process(process)
    try:
        return ArrivalSpec(process=name, rate_per_s=parse_arrival_rate(str(rate)), cv=cv, **extra)  # type: ignore[arg-type]
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        raise ArrivalError(one_line_error(e)) from None


def one_line_error(e: Exception) -> str:
    """The first problem of an exception (a pydantic ValidationError or any) as one line."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", e)).removeprefix("Value error, ")
        return f"{loc}: {msg}" if loc else msg
    return str(e).splitlines()[0]


# ---------------------------------------------------------------- schedules


def stream_rng(seed: int, stream: str) -> np.random.Generator:
    """The Generator for one arrival stream: derived from (run seed, stream name)."""
    return np.random.default_rng(
        [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, stable_key("arrival", stream) & 0xFFFFFFFF]
    )


def unit_gaps(process: str, cv: float | None, rng: np.random.Generator, n: int) -> np.ndarray:
    """n gaps with mean 1 (unit rate) for the process; divide by a rate to get seconds."""
    if process == "constant":
        return np.ones(n)
    if process == "poisson":
        return rng.standard_exponential(n)
    if process == "gamma":
        shape = 1.0 / (check_cv(cv if cv is not None else 1.0) ** 2)
        return rng.standard_gamma(shape, n) / shape
    raise ArrivalError(f"unknown arrival process {process!r}; known: {', '.join(PROCESSES)}")


class ArrivalSchedule:
    """One global, seeded stream of session start times (seconds from the arrival start).

    ``times(until_s)`` is deterministic per (spec, seed, stream) and prefix-stable: a longer
    horizon only appends. ``for_worker(times, w, n)`` keeps worker w's share (k % n == w).
    """

    def __init__(self, spec: ArrivalSpec, seed: int, stream: str = "run") -> None:
        self.spec = spec
        self.seed = seed
        self.stream = stream

    def unit_chunks(self) -> Iterator[np.ndarray]:
        """The unit-rate arrival times, CHUNK at a time, without end (first one at 0)."""
        rng = stream_rng(self.seed, self.stream)
        t = 0.0
        while True:
            gaps = unit_gaps(self.spec.process, self.spec.cv, rng, CHUNK)
            starts = t + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
            t = float(starts[-1] + gaps[-1])
            yield starts

    def unit_times(self, until: float) -> np.ndarray:
        """Arrival times of the unit-rate process in [0, until) (first one at 0)."""
        _check_horizon(until)
        parts: list[np.ndarray] = []
        for starts in self.unit_chunks():
            if starts[0] >= until:
                break
            parts.append(starts)
            if len(parts) * CHUNK > MAX_SESSIONS:
                raise ArrivalError(_TOO_MANY)
        if not parts:
            return np.empty(0)
        out = np.concatenate(parts)
        return out[out < until]

    def times(self, until_s: float) -> np.ndarray:
        """Start times in [0, until_s) at the spec's constant rate."""
        r = self.spec.rate_per_s
        return self.unit_times(until_s * r) / r

    def times_warped(self, segments: Sequence[tuple[float, float, float, float]]) -> np.ndarray:
        """Start times under a piecewise-linear rate curve (``segments``, see ``warp``)."""
        return warp(self.unit_times(cumulative_rate(segments)), segments)

    def iter_worker(
        self,
        worker: int,
        n_workers: int,
        until_s: float | None = None,
        segments: Sequence[tuple[float, float, float, float]] | None = None,
    ) -> Iterator[tuple[int, float]]:
        """Worker ``worker``'s sessions as (global index k, start time), lazily, k % n == worker.

        At the spec's rate until ``until_s`` (None: without end), or under the rate curve
        ``segments`` until its end. Memory stays at one chunk, whatever the run length.
        """
        _check_worker(worker, n_workers)
        if segments is not None:
            until_u = cumulative_rate(segments)
        elif until_s is not None:
            _check_horizon(until_s)
            until_u = until_s * self.spec.rate_per_s
        else:
            until_u = math.inf
        k0 = 0
        for starts in self.unit_chunks():
            if starts[0] >= until_u:
                return
            first = (worker - k0) % n_workers
            u = starts[first::n_workers]
            u = u[u < until_u]
            t = warp(u, segments) if segments is not None else u / self.spec.rate_per_s
            for j, tj in enumerate(t.tolist()):
                yield k0 + first + j * n_workers, tj
            k0 += CHUNK


_TOO_MANY = f"schedule exceeds {MAX_SESSIONS} sessions; shorten the run or lower the rate"


def _check_horizon(until: float) -> None:
    if not math.isfinite(until) or until < 0:
        raise ArrivalError(f"schedule horizon must be finite and >= 0, got {until!r}")
    if until > MAX_SESSIONS:  # unit time: the expected number of sessions
        raise ArrivalError(_TOO_MANY)


def _check_worker(worker: int, n_workers: int) -> None:
    if n_workers < 1 or not 0 <= worker < n_workers:
        raise ArrivalError(f"worker index {worker} is not in 0..{n_workers - 1}")


def for_worker(times: np.ndarray, worker: int, n_workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker ``worker`` of ``n_workers``: (global session indices, their start times)."""
    _check_worker(worker, n_workers)
    idx = np.arange(worker, len(times), n_workers)
    return idx, times[idx]


def cumulative_rate(segments: Sequence[tuple[float, float, float, float]]) -> float:
    """Expected arrivals over all segments: the integral of the rate curve."""
    return sum((t1 - t0) * (r0 + r1) / 2.0 for t0, t1, r0, r1 in segments)


def warp(
    unit_times: np.ndarray, segments: Sequence[tuple[float, float, float, float]]
) -> np.ndarray:
    """Map unit-rate arrival times to wall times through a piecewise-linear rate curve.

    ``segments`` are consecutive ``(t0, t1, rate_at_t0, rate_at_t1)`` with rates >= 0 (linear
    in between). A unit time u lands at the wall time t where the integral of the rate from
    the first t0 to t equals u. Times beyond the curve's total are dropped.
    """
    out = np.full(len(unit_times), np.nan)
    base = 0.0
    for t0, t1, r0, r1 in segments:
        dur = t1 - t0
        mass = dur * (r0 + r1) / 2.0
        sel = (unit_times >= base) & (unit_times < base + mass)
        if mass > 0 and sel.any():
            u = unit_times[sel] - base
            slope = (r1 - r0) / dur if dur > 0 else 0.0
            if abs(slope) < 1e-12:
                dt = u / r0
            else:
                # solve r0*dt + slope*dt^2/2 = u for the root within [0, dur]
                # (this form stays exact as slope -> 0; u = 0 on a ramp from 0 is dt = 0)
                den = r0 + np.sqrt(np.maximum(r0 * r0 + 2.0 * slope * u, 0.0))
                dt = np.divide(2.0 * u, den, out=np.zeros_like(u), where=den > 0)
            out[sel] = t0 + np.clip(dt, 0.0, dur)
        base += mass
    return out[~np.isnan(out)]


def pick_classes(seed: int, count: int, weights: dict[str, float]) -> list[str]:
    """The traffic class of each global session 0..count-1 of a run-level stream, by weight."""
    if not weights or any(not (w > 0 and math.isfinite(w)) for w in weights.values()):
        raise ArrivalError("class weights must be finite and > 0")
    names = sorted(weights)
    p = np.array([weights[n] for n in names], dtype=float)
    rng = stream_rng(seed, "run:classes")
    picks = rng.choice(len(names), size=count, p=p / p.sum())
    return [names[i] for i in picks]


# ---------------------------------------------------------------- the in-flight cap


class InFlightGate:
    """The ``max_in_flight`` / ``at_cap`` policy as pure bookkeeping (no clock, no I/O).

    ``arrive(k)`` when session k is due: True = start it now; False = it waits in a FIFO
    (``queue``) or is dropped (``drop``; listed in ``dropped``). ``finish()`` when a
    session ends: the next queued session to start now, or None. With several workers,
    give each a share of the cap (``share_of_cap``).
    """

    def __init__(self, max_in_flight: int | None, at_cap: str = "queue") -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ArrivalError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
        if at_cap not in ("queue", "drop"):
            raise ArrivalError(f"at_cap must be queue or drop, got {at_cap!r}")
        self.cap = max_in_flight
        self.at_cap = at_cap
        self.in_flight = 0
        self.queue: deque[int] = deque()
        self.dropped: list[int] = []

    def arrive(self, k: int) -> bool:
        """Session k is due: whether it starts now."""
        if self.cap is None or self.in_flight < self.cap:
            self.in_flight += 1
            return True
        if self.at_cap == "drop":
            self.dropped.append(k)
        else:
            self.queue.append(k)
        return False

    def finish(self) -> int | None:
        """A session ended: the queued session that starts in its place, if any."""
        if self.in_flight <= 0:
            raise ArrivalError("finish() without a session in flight")
        if self.queue:
            return self.queue.popleft()  # the slot passes on: in_flight unchanged
        self.in_flight -= 1
        return None


def share_of_cap(max_in_flight: int | None, worker: int, n_workers: int) -> int | None:
    """Worker w's part of a global cap: shares differ by at most 1 and sum to the cap."""
    _check_worker(worker, n_workers)
    if max_in_flight is None:
        return None
    share = max_in_flight // n_workers + (1 if worker < max_in_flight % n_workers else 0)
    return max(share, 1)  # a worker with no share would never start anything


# ---------------------------------------------------------------- lateness


@dataclass(frozen=True, slots=True)
class Lateness:
    """How late sessions started against their schedule (seconds)."""

    scheduled: int
    started: int
    dropped: int
    delayed: int  # started with lateness > tolerance_s
    tolerance_s: float
    p50_s: float | None
    p99_s: float | None
    max_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _nearest_rank(sorted_values: np.ndarray, q: float) -> float:
    k = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[min(k, len(sorted_values)) - 1])


def lateness_summary(
    scheduled: Sequence[float],
    actual: Sequence[float | None],
    tolerance_s: float = 0.1,
) -> Lateness:
    """Lateness (actual - scheduled, clipped at 0) of each session; ``None`` = dropped.

    Percentiles are nearest-rank over started sessions; ``delayed`` counts lateness >
    ``tolerance_s``. Merge workers by concatenating their (scheduled, actual) pairs.
    """
    if len(scheduled) != len(actual):
        raise ArrivalError("scheduled and actual start times differ in length")
    if not math.isfinite(tolerance_s) or tolerance_s < 0:
        raise ArrivalError(f"lateness tolerance must be finite and >= 0, got {tolerance_s!r}")
    late = np.array(
        [max(0.0, a - s) for s, a in zip(scheduled, actual, strict=True) if a is not None],
        dtype=float,
    )
    late.sort()
    dropped = sum(1 for a in actual if a is None)
    return Lateness(
        scheduled=len(scheduled),
        started=len(late),
        dropped=dropped,
        delayed=int((late > tolerance_s).sum()),
        tolerance_s=tolerance_s,
        p50_s=_nearest_rank(late, 0.50) if len(late) else None,
        p99_s=_nearest_rank(late, 0.99) if len(late) else None,
        max_s=float(late[-1]) if len(late) else None,
    )
