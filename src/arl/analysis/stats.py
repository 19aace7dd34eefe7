"""Small-sample statistics for comparing runs over seeds (the report's intervals and tests).

Pure functions on plain lists, no numpy: a study has a handful of seeds per setting.

- :func:`mean_ci`: mean and the half-width of its 95 % interval, Student's t.
- :func:`bootstrap_ci`: the 95 % percentile bootstrap interval of the mean; exact (every
  resample enumerated with its multinomial probability) up to :data:`EXACT_BOOTSTRAP_MAX` values.
- :func:`fisher_exact`: two-sided Fisher's exact test on a 2 x 2 table (collapse counts).
- :func:`parse_contrast` / :func:`contrast_values`: a signed sum of settings per shared seed, e.g.
  ``"algo=sampo - algo=grpo"`` (a paired difference) or a difference of differences.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from itertools import combinations_with_replacement

# two-sided 95 % quantiles of Student's t by degrees of freedom (1.96 beyond the table)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
         25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}

EXACT_BOOTSTRAP_MAX = 10  # C(19, 10) = 92378 resamples; above this, Monte Carlo
MONTE_CARLO_RESAMPLES = 20000


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (the next smaller tabled df)."""
    return _T975[max(k for k in _T975 if k <= df)] if df < 120 else 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % confidence interval over the values: t x std / sqrt(n));
    half-width 0 for a single value."""
    m = statistics.mean(values)
    if len(values) < 2:
        return m, 0.0
    return m, t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def _weighted_quantile(points: list[tuple[float, float]], q: float) -> float:
    """The smallest value whose cumulative probability reaches ``q`` (points: (value, probability),
    sorted by value)."""
    total = 0.0
    for value, p in points:
        total += p
        if total >= q - 1e-12:
            return value
    return points[-1][0]


def bootstrap_distribution(values: Sequence[float], seed: int = 0) -> list[tuple[float, float]]:
    """The bootstrap distribution of the mean: (resample mean, probability) pairs.

    For n <= :data:`EXACT_BOOTSTRAP_MAX` values every distinct resample (a multiset of n indices)
    appears once with its multinomial probability n! / (prod c_i!) / n^n, so the result is exact
    and needs no random numbers. Above that, :data:`MONTE_CARLO_RESAMPLES` resamples drawn with
    ``random.Random(seed)``, each with probability 1 / resamples.
    """
    n = len(values)
    if n == 0:
        raise ValueError("bootstrap of no values")
    if n > EXACT_BOOTSTRAP_MAX:
        rng = random.Random(seed)
        w = 1.0 / MONTE_CARLO_RESAMPLES
        return [(statistics.fmean(rng.choices(values, k=n)), w) for _ in range(MONTE_CARLO_RESAMPLES)]
    log_n_fact, log_nn = math.lgamma(n + 1), n * math.log(n)
    out = []
    for combo in combinations_with_replacement(range(n), n):
        counts: dict[int, int] = {}
        for i in combo:
            counts[i] = counts.get(i, 0) + 1
        log_p = log_n_fact - sum(math.lgamma(c + 1) for c in counts.values()) - log_nn
        out.append((sum(values[i] * c for i, c in counts.items()) / n, math.exp(log_p)))
    return out


def bootstrap_ci(values: Sequence[float], level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, lower, upper): the percentile bootstrap interval of the mean over the values.

    With few values it is narrower than the t interval (a resample never leaves the values' range),
    so the report shows both and a verdict reads the t interval.
    """
    dist = sorted(bootstrap_distribution(list(values), seed))
    alpha = (1.0 - level) / 2
    return statistics.fmean(values), _weighted_quantile(dist, alpha), _weighted_quantile(dist, 1 - alpha)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test on the 2 x 2 table [[a, b], [c, d]] (rows: two
    settings; columns: runs that collapsed, runs that did not): the sum of the hypergeometric
    probabilities of every table with the same margins that is no more likely than this one."""
    row1, col1, n = a + b, a + c, a + b + c + d

    def prob(x: int) -> float:
        return math.comb(col1, x) * math.comb(n - col1, row1 - x) / math.comb(n, row1)

    observed = prob(a)
    lo, hi = max(0, row1 + col1 - n), min(row1, col1)
    return min(1.0, sum(p for p in (prob(x) for x in range(lo, hi + 1)) if p <= observed * (1 + 1e-9)))


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided p-value of McNemar's exact test on paired binary outcomes: of the discordant pairs
    (``gained``: failed before, won after; ``lost``: the reverse), is either direction more common
    than a fair coin gives? Twice the smaller binomial(n, 1/2) tail, at most 1; 1 with no discordant pair."""
    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def parse_contrast(spec: str) -> list[tuple[int, str]]:
    """``"A - B"`` -> ``[(+1, "A"), (-1, "B")]``; terms are separated by `` + `` or `` - `` (with
    spaces, so a setting's own ``-`` or ``+`` stays in its name), the first may carry a sign.

    >>> parse_contrast("algo=dapo_gigpo - algo=gigpo - algo=dapo_grpo + algo=grpo")[2]
    (-1, 'algo=dapo_grpo')
    """
    tokens = spec.strip().split()
    terms: list[tuple[int, str]] = []
    sign, name = 1, []
    for tok in tokens:
        if tok in ("+", "-"):
            if name:
                terms.append((sign, " ".join(name)))
                name = []
            elif terms:
                raise ValueError(f"contrast {spec!r}: two signs in a row")
            sign = 1 if tok == "+" else -1
        else:
            name.append(tok)
    if not name:
        raise ValueError(f"contrast {spec!r}: ends without a setting")
    terms.append((sign, " ".join(name)))
    return terms


def contrast_values(terms: list[tuple[int, str]], by_setting: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Seed -> the signed sum of the settings' values at that seed, over the seeds every term has.

    ``by_setting``: setting -> {seed: value}. A setting that is not there raises ``KeyError`` with
    the names that are.
    """
    missing = [name for _, name in terms if name not in by_setting]
    if missing:
        raise KeyError(f"no setting named {missing[0]!r}; settings: {', '.join(sorted(by_setting))}")
    seeds = set.intersection(*(set(by_setting[name]) for _, name in terms))
    return {s: sum(sign * by_setting[name][s] for sign, name in terms) for s in sorted(seeds, key=_seed_key)}


def _seed_key(seed: str) -> tuple[int, str]:
    return (int(seed), "") if seed.lstrip("-").isdigit() else (0, seed)


# --------------------------------------------------------------------------- sizing a study

def binomial_se(p: float, n: int) -> float:
    """Standard error of a success rate ``p`` measured on ``n`` independent games: sqrt(p (1 - p) / n)."""
    if n < 1 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_se needs 0 <= p <= 1 and n >= 1, got p={p}, n={n}")
    return math.sqrt(p * (1.0 - p) / n)


def _normal_sf(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def _two_sided_tail(c: float, ncp: float, df: int, steps: int) -> float:
    """P(|T| > c) for T noncentral t with ``df`` degrees of freedom and noncentrality ``ncp``:
    E_V[P(|Z + ncp| > c sqrt(V / df))] over V ~ chi2(df), integrated in u = sqrt(V) (smooth at 0 for
    every df) by the midpoint rule on ``steps`` points; no scipy needed."""
    upper = math.sqrt(df + 40.0 * math.sqrt(2.0 * df))
    h = upper / steps
    log_norm = (df / 2) * math.log(2.0) + math.lgamma(df / 2)
    total = 0.0
    for i in range(steps):
        u = (i + 0.5) * h
        density = 2.0 * math.exp((df - 1) * math.log(u) - u * u / 2 - log_norm)  # of u, from chi2(df) of v = u^2
        bound = c * u / math.sqrt(df)
        total += density * (_normal_sf(bound - ncp) + _normal_sf(bound + ncp)) * h
    return min(1.0, total)


def t_critical(df: int, alpha: float = 0.05, steps: int = 4000) -> float:
    """The two-sided critical value of Student's t with ``df`` degrees of freedom: c with
    P(|T| > c) = ``alpha`` (the tabled t975 at alpha 0.05; bisection on the same integral otherwise)."""
    if not 0.0 < alpha < 1.0 or df < 1:
        raise ValueError(f"t_critical needs 0 < alpha < 1 and df >= 1, got alpha={alpha}, df={df}")
    if alpha == 0.05:
        return t975(df)
    lo, hi = 0.0, 1000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _two_sided_tail(mid, 0.0, df, steps) > alpha else (lo, mid)
    return (lo + hi) / 2


def paired_t_power(delta: float, sd: float, n: int, steps: int = 4000, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level ``alpha`` on ``n`` seeds when the per-seed
    difference has mean ``delta`` and standard deviation ``sd``: P(|T| > c) for T noncentral t with
    n - 1 degrees of freedom and noncentrality delta sqrt(n) / sd, c the test's critical value
    (``t_critical``). A Holm-corrected family of m tests: ``alpha`` = 0.05 / m is the level the
    smallest p must pass, so the power at it is the power a planned contrast has in the worst case.
    """
    if n < 2 or sd <= 0:
        raise ValueError(f"paired_t_power needs n >= 2 seeds and sd > 0, got n={n}, sd={sd}")
    df = n - 1
    return _two_sided_tail(t_critical(df, alpha, steps), delta * math.sqrt(n) / sd, df, steps)


def seeds_for_power(delta: float, sd: float, power: float = 0.8, max_seeds: int = 50,
                    alpha: float = 0.05) -> int | None:
    """The fewest paired seeds (>= 2) whose two-sided paired t-test at ``alpha`` reaches ``power``
    for a true difference ``delta`` with per-seed standard deviation ``sd``; None beyond ``max_seeds``."""
    for n in range(2, max_seeds + 1):
        if paired_t_power(delta, sd, n, alpha=alpha) >= power:
            return n
    return None


def detectable_difference(sd: float, n: int, power: float = 0.8, alpha: float = 0.05, steps: int = 2000) -> float:
    """The smallest true per-seed mean difference that the two-sided paired t-test at ``alpha`` on
    ``n`` seeds finds with probability ``power`` when the per-seed difference has standard deviation
    ``sd`` (bisection on ``paired_t_power``): a study's minimal detectable difference."""
    if not 0.0 < power < 1.0:
        raise ValueError(f"detectable_difference needs 0 < power < 1, got {power}")
    lo, hi = 0.0, 100.0 * sd
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if paired_t_power(mid, sd, n, steps, alpha) < power else (lo, mid)
    return (lo + hi) / 2
