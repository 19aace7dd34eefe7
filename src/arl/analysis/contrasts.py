"""The findings' statistics: paired contrasts over seeds, their p-values, Holm, the verdict rule.

The paired t-test's two-sided p (:func:`paired_p`, through the regularised incomplete beta
function), Holm's step-down adjustment over a family (:func:`holm`), one contrast of a study on one
measure (:class:`Contrast`: per-seed values, mean, t 95 % interval, Holm p), the verdict a
corrected p and the paper's sign give (:func:`verdict`), the collapse detector's counts with
Fisher's exact test per tolerant setting and pooled (:func:`collapse_tests`, :func:`threshold_window`),
and per-seed ratios of two settings (:func:`ratio_values`). The numbers' formats (:func:`fmt_p`,
:func:`plural`) are the pages'.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arl.analysis.runs import Run, kl_tag, settings
from arl.analysis.stats import _seed_key, fisher_exact, mean_ci

if TYPE_CHECKING:
    from arl.analysis.study import Study


# --------------------------------------------------------------------------- statistics


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_p_two_sided(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def paired_p(values: list[float], null: float = 0.0) -> float:
    """Two-sided p of the one-sample t-test of the values' mean against ``null`` (paired
    differences against 0); 1 for fewer than two values, 0 when they are equal and off ``null``."""
    if len(values) < 2:
        return 1.0
    m, sd = statistics.fmean(values), statistics.stdev(values)
    if sd == 0.0:
        return 1.0 if m == null else 0.0
    return t_p_two_sided((m - null) / (sd / math.sqrt(len(values))), len(values) - 1)


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment of the p-values (the family-wise error rate), in their order."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [1.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def plural(n: int | str, word: str) -> str:
    """``"1 box"``, ``"2 boxes"``, ``"4 seeds"``."""
    one = str(n) == "1"
    return f"{n} {word}" if one else f"{n} {word}es" if word.endswith(("x", "s")) else f"{n} {word}s"


def fmt_p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


# --------------------------------------------------------------------------- contrasts


@dataclass
class Contrast:
    study: Study
    spec: str
    measure: str
    per_seed: dict[str, float]
    p_holm: float
    family_size: int

    @property
    def values(self) -> list[float]:
        return list(self.per_seed.values())

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def interval(self) -> tuple[float, float]:
        m, half = mean_ci(self.values)
        return m - half, m + half

    @property
    def above(self) -> int:
        return sum(v > 1e-12 for v in self.values)

    @property
    def p(self) -> float:
        return paired_p(self.values)

    @property
    def name(self) -> str:
        return self.study.contrast_name(self.spec)

    def text(self) -> str:
        """``"+0.047 [+0.009, +0.085] (4/4 above 0)"``."""
        lo, hi = self.interval
        return f"{self.mean:+.3f} [{lo:+.3f}, {hi:+.3f}] ({self.above}/{len(self.values)} above 0)"


# --------------------------------------------------------------------------- the verdict rule


def verdict(p_corrected: float, mean: float, expect: str, alpha: float, ours: bool = False,
            effect_p: float | None = None) -> str:
    """reproduced / not reproduced / inconclusive (ours: holds / does not hold / inconclusive).

    ``p_corrected`` < ``alpha`` with the mean on the ``expect`` side ("above" or "below" 0):
    reproduced; on the other side: not reproduced. ``effect_p`` (the corrected p of a test against
    the paper's effect size) < ``alpha`` with the mean below that size: not reproduced. Else
    inconclusive."""
    yes, no = ("holds", "does not hold") if ours else ("reproduced", "not reproduced")
    right_side = mean > 0 if expect == "above" else mean < 0
    if p_corrected < alpha:
        return yes if right_side else no
    if effect_p is not None and effect_p < alpha:
        return no
    return "inconclusive"


# --------------------------------------------------------------------------- collapse counts and ratios


def collapse_counts(study: Study, threshold: float | None = None, seeds: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """Setting -> (runs that collapsed, runs): the detector as it ran (``threshold`` None: some
    ``collapse/events``), or its KL rule at ``threshold`` (the run's peak KL above it)."""
    def collapsed(r: Run) -> bool:
        if threshold is None:
            return r.steps_to_collapse() is not None
        peak = r.peak(kl_tag(r))
        return peak is not None and peak > threshold

    return {name: (sum(collapsed(r) for r in members), len(members))
            for name, members in settings(study.select(seeds)).items()}


def collapse_tests(study: Study, threshold: float | None = None, seeds: set[str] | None = None) -> dict:
    """Fisher's exact test (two-sided) of each tolerant setting's collapse count against the
    baseline's, their Holm adjustment, and the tolerant settings pooled against the baseline."""
    spec = study.extra["collapse_tests"]
    counts = collapse_counts(study, threshold, seeds)
    base = counts[spec["baseline"]]
    per = {t: fisher_exact(counts[t][0], counts[t][1] - counts[t][0], base[0], base[1] - base[0])
           for t in spec["tolerant"]}
    pooled_c = sum(counts[t][0] for t in spec["tolerant"])
    pooled_n = sum(counts[t][1] for t in spec["tolerant"])
    pooled = fisher_exact(pooled_c, pooled_n - pooled_c, base[0], base[1] - base[0])
    return {"counts": counts, "per": per, "holm": dict(zip(per, holm(list(per.values())))),
            "pooled": (pooled_c, pooled_n, pooled), "baseline": spec["baseline"], "tolerant": spec["tolerant"]}


def threshold_window(study: Study) -> tuple[float, float]:
    """The KL thresholds t for which every tolerant run collapses and no baseline run does:
    [the baseline's highest peak, the tolerant runs' lowest peak)."""
    spec = study.extra["collapse_tests"]
    groups = settings(study.runs)
    base_peak = max(r.peak(kl_tag(r)) for r in groups[spec["baseline"]])
    tol_peak = min(r.peak(kl_tag(r)) for t in spec["tolerant"] for r in groups[t])
    return base_peak, tol_peak


def ratio_values(study: Study, num: str, den: str, measure: str) -> dict[str, float]:
    by = study.by_setting(measure)
    return {s: by[num][s] / by[den][s] for s in sorted(set(by[num]) & set(by[den]), key=_seed_key)}
