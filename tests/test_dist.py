"""Samplers: moments, clamps, purity, and what a profile may write."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from workload.plan.dist import parse_dist

N = 200_000


def draw(spec, n=N, seed=1):
    return parse_dist(spec).sample_many(np.random.default_rng(seed), n)


def test_bare_number_is_constant():
    assert parse_dist(3).sample(np.random.default_rng(0)) == 3.0
    assert list(draw({"value": 2.5}, 3)) == [2.5, 2.5, 2.5]


@pytest.mark.parametrize(
    "spec, mean, std",
    [
        ({"dist": "uniform", "low": 2, "high": 10}, 6.0, 8 / math.sqrt(12)),
        ({"dist": "normal", "mean": 50, "std": 5}, 50.0, 5.0),
        (
            {"dist": "lognormal", "mean": 400, "sigma": 0.5},
            400.0,
            400 * math.sqrt(math.exp(0.25) - 1),
        ),
        (
            {"dist": "lognormal", "mu": 1.0, "sigma": 0.3},
            math.exp(1 + 0.045),
            math.exp(1 + 0.045) * math.sqrt(math.exp(0.09) - 1),
        ),
        ({"dist": "pareto", "alpha": 5, "scale": 10}, 12.5, math.sqrt(100 * 5 / (16 * 3))),
        ({"dist": "empirical", "values": [1, 2, 3], "weights": [1, 1, 2]}, 2.25, None),
        ({"dist": "empirical", "bins": [0, 10, 20], "counts": [3, 1]}, 7.5, None),
    ],
)
def test_moments(spec, mean, std):
    x = draw(spec)
    assert x.mean() == pytest.approx(mean, rel=0.02)
    if std is not None:
        assert x.std() == pytest.approx(std, rel=0.05)


def test_zipf_frequencies():
    x = draw({"dist": "zipf", "a": 2.0})
    # P(k=1) = 1/zeta(2) = 6/pi^2
    assert (x == 1).mean() == pytest.approx(6 / math.pi**2, rel=0.02)
    assert draw({"dist": "zipf", "a": 2.0, "scale": 10}, 100).min() >= 10


def test_mixture_mean_is_weighted():
    x = draw(
        {
            "dist": "mixture",
            "components": [
                {"weight": 3, "dist": "constant", "value": 0},
                {"weight": 1, "dist": "uniform", "low": 100, "high": 200},
            ],
        }
    )
    assert x.mean() == pytest.approx(0.25 * 150, rel=0.03)
    assert (x == 0).mean() == pytest.approx(0.75, abs=0.01)


def test_clamps():
    x = draw({"dist": "normal", "mean": 0, "std": 10, "min": -1, "max": 2})
    assert x.min() == -1 and x.max() == 2


def test_pure_same_generator_state_same_samples():
    d = parse_dist({"dist": "lognormal", "mean": 10, "sigma": 1})
    a = d.sample_many(np.random.default_rng(7), 50)
    b = d.sample_many(np.random.default_rng(7), 50)
    assert (a == b).all()
    assert d.sample_int(np.random.default_rng(7), lo=1) >= 1


def test_upper_bound():
    assert parse_dist({"dist": "uniform", "low": 0, "high": 5, "max": 3}).upper_bound() == 3
    ub = parse_dist({"dist": "normal", "mean": 0, "std": 1}).upper_bound()
    assert 2.8 < ub < 3.5


@pytest.mark.parametrize(
    "spec",
    [
        {"dist": "lognormal", "mean": 3},  # no sigma
        {"dist": "lognormal", "mean": 3, "mu": 1, "sigma": 1},  # both locations
        {"dist": "uniform", "low": 5, "high": 1},
        {"dist": "normal", "mean": 1, "std": 1, "min": 5, "max": 1},
        {"dist": "pareto", "alpha": 0, "scale": 1},
        {"dist": "zipf", "a": 1},
        {"dist": "empirical"},
        {"dist": "empirical", "values": [1, 2], "weights": [1]},
        {"dist": "empirical", "bins": [0, 1], "counts": [1, 2]},
        {"dist": "mixture", "components": []},
        {"dist": "nope"},
        {"low": 1},
        True,
    ],
)
def test_bad_specs_rejected(spec):
    with pytest.raises(ValidationError):
        parse_dist(spec)
