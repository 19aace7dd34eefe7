"""Numbers a page's prose quotes, generated from the run archives like its blocks.

A page marks a number (or a short phrase of numbers) of its prose as generated:

    SAMPO gained <!-- value sokoban_rl_study games algo=sampo -->...<!-- /value --> levels

``python src/report.py findings --write`` fills the text between the two comments from the
archive (:func:`inline_value`), ``--check`` names each that differs (:mod:`arl.analysis.pages`). The
comment holds the study key of the spec (several joined by ``,`` for a range over studies), the
kind, and its arguments (shell words: a contrast with spaces is quoted):

- ``contrast "A - B" MEASURE``: the contrast's mean, t 95 % interval, seeds above 0 and Holm p
  (:meth:`arl.analysis.study.Study.contrast`), ``+0.048 [+0.018, +0.077] (4/4 above 0), Holm 0.042``; a
  contrast outside the study's planned family gets its raw p, marked uncorrected;
- ``mean VALUE SETTING``: the mean over the setting's runs of one of :data:`VALUES`;
- ``range VALUE [SETTING ...]``: its lowest-highest over those settings' runs (every run without one;
  over several studies, each study's runs of the settings it has);
- ``lower VALUE A B``: in how many seeds A's value is below B's, and the seeds where it is not;
- ``games SETTING``: the setting's validations game by game (:func:`arl.analysis.games.games_by_setting`);
- ``episodes A B``: how many times B's training episodes A played;
- ``below``: how many runs ended below their start;
- ``seed=K`` (any kind but ``contrast``): only the runs of seed K.

A VALUE on one member of a mix is ``<value>@<member>`` (``start@sokoban_7x7``, ``final@``, ``gain@``,
``training@``: :data:`MEMBER_VALUES`).

``alpha`` (no study) is the spec's significance level. A setting is named as in the spec's
contrasts (``algo=sampo``); a VALUE names what is read from each run.
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

from arl.analysis.contrasts import fmt_p
from arl.analysis.findings import episodes_note
from arl.analysis.games import games_by_setting
from arl.analysis.runs import Run, kl_tag, seed_of, settings
from arl.analysis.study import _span

if TYPE_CHECKING:
    from arl.analysis.findings import Spec
    from arl.analysis.study import Study


def _first(tag: str) -> Callable[[Run], float | None]:
    return lambda r: r.first(tag)


def _last(tag: str) -> Callable[[Run], float | None]:
    return lambda r: r.final(tag)


def _won(run: Run) -> float | None:
    """Training episodes won over the run: each iteration's success rate times its episodes."""
    success, episodes = run.scalars.get("rollout/success_rate"), dict(run.scalars.get("rollout/episodes", []))
    if not success or not episodes:
        return None
    return sum(v * episodes[step] for step, v in success if step in episodes)


#: what ``mean``, ``range`` and ``lower`` read from a run, and how the page prints it
VALUES: dict[str, tuple[Callable[[Run], float | None], str]] = {
    "start": (_first("val/success_rate"), ".3f"),  # validation success at iteration 0: the start policy
    # WebShop's score at iteration 0 on success's scale (val/score / 100): the start's spread beside a score gain
    "start-score": (lambda r: None if (v := r.first("val/score")) is None else v / 100, ".3f"),
    "final": (_last("val/success_rate"), ".3f"),
    "gain": (lambda r: r.gain(), "+.3f"),
    "training": (lambda r: r.mean("rollout/success_rate"), ".3f"),  # mean over the iterations
    "training-first": (_first("rollout/success_rate"), ".3f"),  # the first iteration's, before any update
    "training-won": (_won, ".0f"),
    "episodes": (lambda r: r.total("rollout/episodes"), ".0f"),
    "episodes-first": (_first("rollout/episodes"), ".0f"),  # the first iteration's training episodes
    "peak-kl": (lambda r: r.peak(kl_tag(r)), ".3f"),
    "valid-first": (_first("rollout/valid_action_ratio"), ".2f"),
    "valid-last": (_last("rollout/valid_action_ratio"), ".2f"),
}


#: what ``<value>@<member>`` reads on one member of a mix (``start@sokoban_7x7``: ``val/sokoban_7x7/success_rate``
#: at iteration 0), and its format
MEMBER_VALUES: dict[str, tuple[Callable[[str], Callable[[Run], float | None]], str]] = {
    "start": (lambda m: _first(f"val/{m}/success_rate"), ".3f"),
    "final": (lambda m: _last(f"val/{m}/success_rate"), ".3f"),
    "gain": (lambda m: lambda r: r.gain(f"val/{m}/success_rate"), "+.3f"),
    "training": (lambda m: lambda r: r.mean(f"rollout/{m}/success_rate"), ".3f"),
}


def _value(value: str) -> tuple[Callable[[Run], float | None], str]:
    """(what is read from a run, its format) of a VALUE: a key of :data:`VALUES`, or ``<value>@<member>``
    of :data:`MEMBER_VALUES`."""
    if value in VALUES:
        return VALUES[value]
    kind, at, member = value.partition("@")
    if at and member and kind in MEMBER_VALUES:
        read, fmt = MEMBER_VALUES[kind]
        return read(member), fmt
    raise ValueError(f"no value {value!r}; values: {', '.join(VALUES)}, and on one member of a mix "
                     f"{', '.join(k + '@<member>' for k in MEMBER_VALUES)}")


def _runs(study: Study, setting_names: list[str], seed: str | None) -> list[Run]:
    groups = settings(study.select({seed} if seed else None))
    if not setting_names:
        return [r for members in groups.values() for r in members]
    missing = [s for s in setting_names if s not in groups]
    if missing:
        raise ValueError(f"study {study.key!r} has no setting {', '.join(missing)}; settings: {', '.join(groups)}")
    return [r for s in setting_names for r in groups[s]]


def _values(study: Study, value: str, runs: list[Run]) -> list[float]:
    read = _value(value)[0]
    return [v for v in (read(r) for r in runs) if v is not None]


def _lower(study, value: str, a: str, b: str, seed: str | None) -> str:
    """How many seeds have ``value`` lower under setting ``a`` than under ``b`` (the others named)."""
    fmt = _value(value)[1]
    va = {seed_of(r): v for r, v in zip(_runs(study, [a], seed), _values(study, value, _runs(study, [a], seed)))}
    vb = {seed_of(r): v for r, v in zip(_runs(study, [b], seed), _values(study, value, _runs(study, [b], seed)))}
    seeds = [s for s in vb if s in va]
    below = [s for s in seeds if va[s] < vb[s]]
    other = [f"seed {s}: {format(vb[s], fmt)} -> {format(va[s], fmt)}" for s in seeds if s not in below]
    return f"{len(below)} of {len(seeds)} seeds" + (f" (not {'; '.join(other)})" if other else "")


def inline_value(spec: Spec, name: str) -> str:
    """The text of the inline value ``name`` (the words inside ``<!-- value NAME -->``)."""
    words = shlex.split(name)
    if words == ["alpha"]:
        return f"{spec.alpha:g}"
    if len(words) < 2:
        raise ValueError(f"value {name!r}: give a study and a kind")
    seed = next((w.split("=", 1)[1] for w in words if w.startswith("seed=")), None)
    words = [w for w in words if not w.startswith("seed=")]
    studies = [spec.study(k) for k in words[0].split(",")]
    kind, args = words[1], words[2:]
    study = studies[0]
    if kind == "contrast":
        c = study.contrast(args[0], args[1])
        if args[0] not in study.family:  # not planned: the raw p, no correction to claim
            return f"{c.text()}, p {fmt_p(c.p)} (not a planned contrast: uncorrected)"
        return f"{c.text()}, Holm {fmt_p(c.p_holm)}"
    if kind == "mean":
        value, names = args[0], args[1:]
        values = _values(study, value, _runs(study, names, seed))
        return format(statistics.fmean(values), _value(value)[1])
    if kind == "range":  # over several studies, each takes the named settings it has
        value, names = args[0], args[1:]
        values = []
        for s in studies:
            own = [n for n in names if n in settings(s.runs)] if len(studies) > 1 and names else names
            values += _values(s, value, _runs(s, own, seed)) if own or not names else []
        if not values:
            raise ValueError(f"value {name!r}: no run of {', '.join(names)} in {words[0]}")
        return _span(values, _value(value)[1])
    if kind == "lower":
        return _lower(study, *args, seed=seed)
    if kind == "games":
        rows = games_by_setting(_runs(study, args, seed))
        if len(rows) != 1:
            raise ValueError(f"value {name!r}: {len(rows)} settings with the episodes of two validations")
        g = next(iter(rows.values()))
        noun = study.facts.get("unit") or study.facts["held_out"].removeprefix("held-out ")
        return (f"{g.gained} gained, {g.lost} lost over the {g.seeds} seeds; {g.up} {noun} up, {g.down} down, "
                f"sign test over the {noun}, not the seeds, uncorrected: p {fmt_p(g.p)}")
    if kind == "episodes":
        return episodes_note(study, *args).split(" played ", 1)[1]
    if kind == "below":
        below, n = study.below_start()
        return f"{below} of {n}"
    raise ValueError(f"value {name!r}: no kind {kind!r}; kinds: contrast, mean, range, lower, games, episodes, below")
