"""Metrics that carry how they combine over data-parallel ranks.

Every rank computes its metrics on its own share of the data. Each value is a float with a
:class:`Reduce` rule, set where the value is produced, and :func:`combine` turns the per-rank
values into the global ones: a weighted mean over ranks with the counts as weights (episodes,
turns, tokens) is exactly the mean over all the data, shares of a global value add up, maxima
take the max, and values equal on every rank stay as they are.

    m = Metrics()
    m.mean("rollout/success_rate", won / n, weight=n)
    m.sum("rollout/episodes", n)
    combine(all_gather_object(m))  # {name: global value}; on one process: dict(m)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

ReduceKind = Literal["mean", "sum", "max", "same"]


@dataclass(frozen=True)
class Reduce:
    """How one metric combines over ranks.

    Attributes:
        kind: ``"mean"``, the mean over ranks weighted by ``weight`` (plain when every weight is
            equal or all are 0); ``"sum"`` (shares of a global value, totals, rates per second);
            ``"max"``; ``"same"`` (equal on every rank: the first rank's value).
        weight: the count a rank's mean is over (episodes, turns, tokens); read by ``"mean"`` only.
    """

    kind: ReduceKind = "mean"
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("mean", "sum", "max", "same"):
            raise ValueError(f"unknown reduction {self.kind!r}: mean, sum, max or same")


MEAN, SUM, MAX, SAME = Reduce("mean"), Reduce("sum"), Reduce("max"), Reduce("same")


class Metrics(Mapping[str, float]):
    """This rank's metrics: ``{name: value}`` (a read-only mapping of floats), each value with
    the :class:`Reduce` rule that combines it over ranks. Picklable (it travels through
    ``all_gather_object``).

    It starts empty and is filled by :meth:`add` and its shorthands. On purpose there is no
    constructor from a plain mapping: that has no rules, and a generic rebuild of a mapping as
    ``type(m)(dict(m))`` (Lightning's ``apply_to_collection``) then fails instead of silently
    turning every rule into a plain mean.
    """

    def __init__(self) -> None:
        self._values: dict[str, float] = {}
        self._rules: dict[str, Reduce] = {}

    def add(self, name: str, value: float, how: Reduce = MEAN) -> None:
        """Set ``name`` to ``value``, combined over ranks by ``how``."""
        self._values[name] = float(value)
        self._rules[name] = how

    def mean(self, name: str, value: float, weight: float = 1.0) -> None:
        """A mean over ``weight`` items of this rank (episodes, turns, tokens)."""
        self.add(name, value, Reduce("mean", float(weight)))

    def sum(self, name: str, value: float) -> None:
        """A total or a share of a global value: the ranks' values add up."""
        self.add(name, value, SUM)

    def max(self, name: str, value: float) -> None:
        """A maximum (or a time the slowest rank sets)."""
        self.add(name, value, MAX)

    def same(self, name: str, value: float) -> None:
        """A value equal on every rank (a global count, the learning rate)."""
        self.add(name, value, SAME)

    def update(self, other: Metrics) -> None:
        """Add ``other``'s values with their rules (replacing names already here)."""
        if not isinstance(other, Metrics):
            raise TypeError(f"Metrics.update takes Metrics (with their rules), not {type(other).__name__}")
        self._values.update(other._values)
        self._rules.update(other._rules)

    def rule(self, name: str) -> Reduce:
        """How ``name`` combines over ranks."""
        return self._rules[name]

    def __getitem__(self, name: str) -> float:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Metrics({self._values!r})"


def combine(parts: Sequence[Metrics]) -> dict[str, float]:
    """The global values of every rank's metrics (``parts``, one per rank, in rank order).

    A name missing on some rank combines over the ranks that have it, by the first such rank's
    rule; a weighted mean whose weights are all 0 is the plain mean of the values. A name on a
    single rank keeps its value, so one process gets ``dict(parts[0])``.
    """
    names = list(dict.fromkeys(name for part in parts for name in part))
    out: dict[str, float] = {}
    for name in names:
        having = [part for part in parts if name in part]
        values = [part[name] for part in having]
        kind = having[0].rule(name).kind
        if len(values) == 1 or kind == "same":
            out[name] = values[0]
        elif kind == "sum":
            out[name] = sum(values)
        elif kind == "max":
            out[name] = max(values)
        else:
            weights = [part.rule(name).weight for part in having]
            total = sum(weights)
            out[name] = sum(v * w for v, w in zip(values, weights)) / total if total > 0 else sum(values) / len(values)
    return out
