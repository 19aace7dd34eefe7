"""The study's statistics: hand-computed small cases and properties on random samples."""

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.analysis.stats import (
    EXACT_BOOTSTRAP_MAX,
    bootstrap_ci,
    bootstrap_distribution,
    contrast_values,
    parse_contrast,
)


def test_exact_bootstrap_by_hand():
    # (0, 1): resample means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4
    dist = sorted(bootstrap_distribution([0.0, 1.0]))
    assert dist == [(0.0, pytest.approx(0.25)), (0.5, pytest.approx(0.5)), (1.0, pytest.approx(0.25))]
    assert bootstrap_ci([0.0, 1.0]) == (0.5, 0.0, 1.0)
    # (0, 0, 0, 1): the number of 1s drawn is Binomial(4, 1/4); P(k <= 2) = 243/256 < 0.975 <= P(k <= 3)
    assert bootstrap_ci([0.0, 0.0, 0.0, 1.0]) == (0.25, 0.0, 0.75)
    assert bootstrap_ci([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))
    assert len(bootstrap_distribution([1.0, 2.0, 3.0, 4.0])) == math.comb(7, 4)  # distinct resamples


def test_monte_carlo_bootstrap_is_seeded_and_close_to_exact():
    values = [float(i % 5) for i in range(EXACT_BOOTSTRAP_MAX + 2)]
    a, b = bootstrap_ci(values, seed=3), bootstrap_ci(values, seed=3)
    assert a == b
    m, lo, hi = a
    half = 1.96 * statistics.pstdev(values) / math.sqrt(len(values))  # the normal approximation
    assert lo == pytest.approx(m - half, abs=0.15) and hi == pytest.approx(m + half, abs=0.15)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=7))
def test_exact_bootstrap_properties(values):
    dist = bootstrap_distribution(values)
    assert sum(p for _, p in dist) == pytest.approx(1.0)
    # the resample means average to the sample mean (the bootstrap is unbiased for the mean)
    assert sum(v * p for v, p in dist) == pytest.approx(statistics.fmean(values), abs=1e-9)
    m, lo, hi = bootstrap_ci(values)
    assert min(values) - 1e-12 <= lo <= hi <= max(values) + 1e-12
    assert lo - 1e-12 <= m <= hi + 1e-12


def test_contrasts():
    assert parse_contrast("algo=sampo - algo=grpo") == [(1, "algo=sampo"), (-1, "algo=grpo")]
    assert parse_contrast("- a + b") == [(-1, "a"), (1, "b")]
    assert parse_contrast("algo=a-b") == [(1, "algo=a-b")]  # a sign without spaces is part of the name
    for bad in ("a - - b", "a -", ""):
        with pytest.raises(ValueError):
            parse_contrast(bad)
    data = {"a": {"1": 0.5, "2": 0.4, "10": 0.1}, "b": {"1": 0.25, "10": 0.3}}
    assert contrast_values(parse_contrast("a - b"), data) == {"1": 0.25, "10": pytest.approx(-0.2)}
    assert list(contrast_values(parse_contrast("a"), data)) == ["1", "2", "10"]  # seeds in numeric order
    with pytest.raises(KeyError, match="settings: a, b"):
        contrast_values(parse_contrast("a - c"), data)
