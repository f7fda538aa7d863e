"""Seeded samplers for profile distributions (sizes in tokens, times in seconds).

A distribution is written in a profile as a mapping with a ``dist`` tag, or as a
bare number meaning a constant::

    user_turn: {dist: lognormal, mean: 400, sigma: 0.8, min: 20, max: 4000}
    think_time_s: 2.5                      # constant
    result_tokens:
      dist: mixture
      components:
        - {weight: 0.8, dist: uniform, low: 50, high: 400}
        - {weight: 0.2, dist: pareto, alpha: 1.5, scale: 2000}
    steps: {dist: empirical, values: [1, 2, 8], weights: [5, 3, 1]}
    output: {dist: empirical, bins: [0, 100, 500], counts: [7, 3]}   # uniform within a bin

Every kind takes optional ``min``/``max`` clamps, applied after sampling.
Sampling is pure: each call takes the caller's ``numpy.random.Generator``, so
callers decide the stream (one Generator per purpose, seeded from run seed,
class, user and session) and nothing here holds state.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, model_validator


class _Base(BaseModel):
    # NaN and infinity are refused everywhere: a NaN size once "completed" thousands of
    # sessions with no request at all.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min: float | None = Field(None, description="Lower clamp applied to every sample.")
    max: float | None = Field(None, description="Upper clamp applied to every sample.")

    @model_validator(mode="after")
    def _clamps(self) -> _Base:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} > max {self.max:g} (min must be <= max)")
        return self

    # --- sampling -------------------------------------------------------
    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def sample_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n clamped float samples."""
        x = np.asarray(self._raw(rng, n), dtype=float)
        if self.min is not None or self.max is not None:
            x = np.clip(x, self.min, self.max)
        return x

    def sample(self, rng: np.random.Generator) -> float:
        """One clamped float sample."""
        return float(self.sample_many(rng, 1)[0])

    def sample_int(self, rng: np.random.Generator, lo: int = 0) -> int:
        """One sample rounded to an int, at least ``lo`` (token counts, step counts)."""
        return max(lo, int(round(self.sample(rng))))

    def _raw_floor(self) -> float:
        """The least value an unclamped sample can take (-inf when unbounded below)."""
        return -math.inf

    def floor(self) -> float:
        """The least value a (clamped) sample can take; -inf when unbounded below."""
        lo = self._raw_floor()
        if self.min is not None:
            lo = max(lo, self.min)
        if self.max is not None:
            lo = min(lo, self.max)
        return lo

    def upper_bound(self) -> float:
        """A value samples stay under: the max clamp, else a 99.9 % quantile estimate."""
        if self.max is not None:
            return self.max
        x = self.sample_many(np.random.default_rng(12345), 20000)
        return float(np.quantile(x, 0.999))


class Constant(_Base):
    dist: Literal["constant"] = "constant"
    value: float = Field(description="The value every sample takes.")

    def _raw_floor(self) -> float:
        return self.value

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=float)


class Uniform(_Base):
    dist: Literal["uniform"]
    low: float = Field(description="Lower bound (inclusive).")
    high: float = Field(description="Upper bound (exclusive).")

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.low > self.high:
            raise ValueError(f"low {self.low:g} > high {self.high:g} (low must be <= high)")
        return self

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)

    def _raw_floor(self) -> float:
        return self.low


class Normal(_Base):
    dist: Literal["normal"]
    mean: float = Field(description="Mean.")
    std: float = Field(ge=0, description="Standard deviation (>= 0).")

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.normal(self.mean, self.std, n)


class LogNormal(_Base):
    dist: Literal["lognormal"]
    mean: float | None = Field(
        None, gt=0, description="Mean of the samples (give this or mu, not both)."
    )
    mu: float | None = Field(None, description="Mean of the underlying normal (log space).")
    sigma: float = Field(ge=0, description="Std of the underlying normal (log space): the spread.")

    @model_validator(mode="after")
    def _one_location(self) -> LogNormal:
        if (self.mean is None) == (self.mu is None):
            raise ValueError("lognormal needs exactly one of mean or mu (plus sigma)")
        return self

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        mu = self.mu if self.mu is not None else math.log(self.mean) - self.sigma**2 / 2  # type: ignore[arg-type]
        return rng.lognormal(mu, self.sigma, n)

    def _raw_floor(self) -> float:
        return 0.0


class Pareto(_Base):
    dist: Literal["pareto"]
    alpha: float = Field(gt=0, description="Shape (tail index); mean is finite for alpha > 1.")
    scale: float = Field(gt=0, description="Minimum value x_m (classic Pareto).")

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.scale * (1.0 + rng.pareto(self.alpha, n))

    def _raw_floor(self) -> float:
        return self.scale


class Zipf(_Base):
    dist: Literal["zipf"]
    a: float = Field(gt=1, description="Exponent (> 1); samples are integers k >= 1, P(k) ~ k^-a.")
    scale: float = Field(1.0, gt=0, description="Multiplier applied to k.")

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.scale * rng.zipf(self.a, n).astype(float)

    def _raw_floor(self) -> float:
        return self.scale


class Empirical(_Base):
    dist: Literal["empirical"]
    values: list[float] | None = Field(
        None, min_length=1, description="Observed values, drawn with `weights` (default equal)."
    )
    weights: list[float] | None = Field(None, description="Weights for `values` (>= 0).")
    bins: list[float] | None = Field(
        None, min_length=2, description="Histogram bin edges (ascending); sample uniform in a bin."
    )
    counts: list[float] | None = Field(None, description="Histogram counts, len(bins) - 1.")

    @model_validator(mode="after")
    def _shape(self) -> Empirical:
        if (self.values is None) == (self.bins is None):
            raise ValueError("empirical needs either values (+weights) or bins + counts")
        if self.values is not None:
            if self.weights is not None:
                if len(self.weights) != len(self.values):
                    raise ValueError("weights must have one entry per value")
                _check_weights(self.weights, "weights")
        else:
            assert self.bins is not None
            if self.counts is None or len(self.counts) != len(self.bins) - 1:
                raise ValueError("counts must have len(bins) - 1 entries")
            if any(b2 < b1 for b1, b2 in zip(self.bins, self.bins[1:], strict=False)):
                raise ValueError("bins must be ascending")
            _check_weights(self.counts, "counts")
        return self

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.values is not None:
            p = _norm(self.weights) if self.weights is not None else None
            return rng.choice(np.asarray(self.values, dtype=float), size=n, p=p)
        edges = np.asarray(self.bins, dtype=float)
        idx = rng.choice(len(edges) - 1, size=n, p=_norm(self.counts))  # type: ignore[arg-type]
        return rng.uniform(edges[idx], edges[idx + 1])

    def _raw_floor(self) -> float:
        if self.values is not None:
            return min(self.values)
        return min(self.bins or [0.0])


def _check_weights(w: list[float], name: str) -> None:
    if any(x < 0 for x in w) or sum(w) <= 0:
        raise ValueError(f"{name} must be >= 0 with a positive sum")


def _norm(w: list[float]) -> np.ndarray:
    a = np.asarray(w, dtype=float)
    return a / a.sum()


class Component(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    weight: float = Field(gt=0, description="Relative weight of this component.")
    of: Dist = Field(description="The component distribution.")

    @model_validator(mode="before")
    @classmethod
    def _inline(cls, data: Any) -> Any:
        # Allow `{weight: 0.2, dist: pareto, alpha: 1.5, scale: 100}` inline.
        if isinstance(data, dict) and "of" not in data:
            rest = {k: v for k, v in data.items() if k != "weight"}
            out: dict[str, Any] = {"of": rest}
            if "weight" in data:
                out["weight"] = data["weight"]
            return out
        return data


class Mixture(_Base):
    dist: Literal["mixture"]
    components: list[Component] = Field(min_length=1, description="Weighted components.")

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        p = _norm([c.weight for c in self.components])
        which = rng.choice(len(self.components), size=n, p=p)
        out = np.empty(n, dtype=float)
        for i, c in enumerate(self.components):
            m = which == i
            k = int(m.sum())
            if k:
                out[m] = c.of.sample_many(rng, k)
        return out

    def _raw_floor(self) -> float:
        return min(c.of.floor() for c in self.components)


def _coerce(v: Any) -> Any:
    if isinstance(v, bool):
        return v  # let pydantic reject it
    if isinstance(v, (int, float)):
        return {"dist": "constant", "value": v}
    if isinstance(v, dict) and "dist" not in v and "value" in v:
        return {"dist": "constant", **v}
    return v


DIST_KINDS = (
    "constant",
    "uniform",
    "normal",
    "lognormal",
    "pareto",
    "zipf",
    "empirical",
    "mixture",
)

Dist = Annotated[
    Constant | Uniform | Normal | LogNormal | Pareto | Zipf | Empirical | Mixture,
    Field(discriminator="dist"),
    BeforeValidator(_coerce),
]

Component.model_rebuild()
Mixture.model_rebuild()


def constant(value: float) -> Constant:
    """A constant distribution (for defaults)."""
    return Constant.model_validate({"value": value})


def parse_dist(
    obj: Any,
) -> Constant | Uniform | Normal | LogNormal | Pareto | Zipf | Empirical | Mixture:
    """Validate a profile value (mapping or bare number) into a distribution."""
    return _ADAPTER.validate_python(obj)


_ADAPTER: TypeAdapter[Any] = TypeAdapter(Dist)
