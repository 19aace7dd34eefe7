"""Sizing a study (arl.analysis.stats): the binomial standard error and the paired t-test's power."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.analysis.stats import binomial_se, detectable_difference, paired_t_power, seeds_for_power, t_critical


def test_binomial_se_by_hand():
    assert binomial_se(0.5, 100) == pytest.approx(0.05)
    assert binomial_se(0.2, 64) == pytest.approx(math.sqrt(0.16 / 64))  # 0.05
    assert binomial_se(0.0, 10) == 0.0
    with pytest.raises(ValueError, match="n >= 1"):
        binomial_se(0.5, 0)


def test_power_is_the_test_size_without_an_effect():
    # no difference: the two-sided test rejects 5 % of the time, whatever the seeds
    for n in (2, 3, 4, 8):
        assert paired_t_power(0.0, 1.0, n) == pytest.approx(0.05, abs=2e-3)


def test_power_matches_published_values():
    # paired t, two-sided 5 %, effect size 1 (G*Power; scipy's noncentral t gives 0.8031 and 0.2888)
    assert paired_t_power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=1e-3)
    assert paired_t_power(1.0, 1.0, 4) == pytest.approx(0.2888, abs=1e-3)
    assert seeds_for_power(1.0, 1.0) == 10
    assert seeds_for_power(0.01, 1.0, max_seeds=20) is None


@settings(max_examples=25, deadline=None)
@given(st.floats(0.05, 3.0), st.integers(2, 12))
def test_power_grows_with_effect_and_seeds(effect, n):
    p = paired_t_power(effect, 1.0, n, steps=1500)
    assert 0.05 - 2e-3 <= p <= 1.0
    assert paired_t_power(effect * 1.5, 1.0, n, steps=1500) >= p - 1e-9
    assert paired_t_power(effect, 1.0, n + 1, steps=1500) >= p - 1e-9
    assert paired_t_power(-effect, 1.0, n, steps=1500) == pytest.approx(p)  # two-sided


def test_critical_values_at_other_levels():
    # Student's t two-sided critical values (tables): df 5 at 2.5 % is 3.163, df 9 at 1 % is 3.250
    assert t_critical(5, 0.025) == pytest.approx(3.163, abs=2e-3)
    assert t_critical(9, 0.01) == pytest.approx(3.250, abs=2e-3)
    assert t_critical(5) == 2.571  # the tabled 5 % value
    assert paired_t_power(0.0, 1.0, 6, alpha=0.025) == pytest.approx(0.025, abs=2e-3)


def test_detectable_difference_inverts_the_power():
    # effect size 1 on 10 seeds has power 0.8031 at 5 %: the 80 % detectable difference is just below 1 sd
    d = detectable_difference(2.0, 10)
    assert 1.9 < d < 2.0
    assert paired_t_power(d, 2.0, 10) == pytest.approx(0.8, abs=2e-3)
    # a stricter level (Holm's first step over two tests) needs a larger difference, more seeds a smaller one
    assert detectable_difference(1.0, 6, alpha=0.025) > detectable_difference(1.0, 6) > detectable_difference(1.0, 8)
