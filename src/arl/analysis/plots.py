"""The report's figures: one PNG per curve the paper shows, and bar charts of the final success.

:func:`plot_curves` draws one file per entry of :data:`PLOTS` that some run logged (a panel per
tag), one line per run, a colour per setting and a line style per seed, and where a setting has
several seeds their mean with its 95 % t band; noisy per-iteration curves are smoothed
(:data:`SMOOTH`). :func:`plot_settings` and :func:`plot_types` draw the final validation success
per setting and per task type (seed mean, each seed a dot, the start a dashed tick).
Behaviour-cloning runs are left out of the curves: their steps are not RL iterations.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from arl.analysis.runs import Run, Series, settings
from arl.analysis.stats import mean_ci

PLOTS: dict[str, tuple[str, list[str]]] = {  # file stem -> (title, tags; several tags = panels)
    "success": ("validation success rate", ["val/success_rate"]),
    "rollout_success": ("training rollout success rate (every iteration)", ["rollout/success_rate"]),
    "clip_fraction": ("clip fraction of the policy loss (actor/clipfrac)", ["actor/clipfrac"]),
    "kl": ("KL to the reference (actor/kl_loss)", ["actor/kl_loss"]),
    "grad_norm": ("gradient norm", ["actor/grad_norm"]),
    "clip_fractions": (
        "tokens outside the clip range",
        ["is/tokens_above_pos", "is/tokens_below_pos", "is/tokens_above_neg", "is/tokens_below_neg"],
    ),
    "valid_format": ("valid-action ratio (sampled)", ["rollout/valid_action_ratio"]),
    # the whole advantage's spread beside GiGPO's step part (w x A_S); the second panel only for GiGPO runs
    "advantage": ("advantage spread over the turns", ["adv/std", "adv/step_std"]),
    "masked_seqs": ("masked sequences", ["actor/masked_seqs"]),
}


# per-iteration curves too noisy to read raw (64 episodes an iteration on the CPU): a centred moving
# average over this many iterations, said in the panel's title
SMOOTH: dict[str, int] = {"rollout/success_rate": 5}


def smooth(series: Series, window: int) -> Series:
    """Centred moving average over ``window`` consecutive points (fewer at the ends); the steps
    are kept. ``window`` <= 1 returns the series unchanged."""
    if window <= 1:
        return list(series)
    half = window // 2
    values = [v for _, v in series]
    out = []
    for i, (step, _) in enumerate(series):
        part = [v for v in values[max(0, i - half): i + half + 1] if math.isfinite(v)]
        out.append((step, statistics.fmean(part) if part else math.nan))
    return out


def _pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend."""
    import matplotlib  # optional: matplotlib (dev extra), only to draw the figures

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: as above; after use("Agg")

    return plt


def line_styles(runs: list[Run]) -> dict[str, tuple]:
    """Run label -> (colour, line style): one colour per setting, one line style per seed."""
    palette = _pyplot().colormaps["tab10" if len({r.group for r in runs}) <= 10 else "tab20"].colors
    dashes = ["-", "--", ":", "-."]
    groups = list(dict.fromkeys(r.group for r in runs))
    seen: dict[str, int] = defaultdict(int)
    out = {}
    for r in runs:
        out[r.label] = (palette[groups.index(r.group) % len(palette)], dashes[seen[r.group] % len(dashes)])
        seen[r.group] += 1
    return out


def plot_curves(runs: list[Run], out_dir: Path) -> list[Path]:
    """One PNG per entry of :data:`PLOTS` that some run has data for; returns the files."""
    plt = _pyplot()

    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [r for r in runs if not r.bc_only]  # their steps are not RL iterations
    styles = line_styles(runs)
    groups = settings(runs)
    written = []
    for stem, (title, tags) in PLOTS.items():
        tags = _plotted_tags(stem, tags, runs)
        if not tags:
            continue
        ncols = min(2, len(tags))
        nrows = -(-len(tags) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(6 * ncols, 3.6 * nrows + 0.6), squeeze=False)
        for ax, tag in zip(axes.flat, tags):
            _draw_panel(ax, stem, title, tag, groups, styles)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        legend = None
        if handles:  # below the panels; the saved figure grows to hold it (bbox_inches="tight")
            legend = fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                                ncol=min(2, len(labels)), fontsize=8, frameon=False)
        fig.suptitle(title)
        fig.tight_layout()
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight", bbox_extra_artists=[legend] if legend else None)
        plt.close(fig)
        written.append(path)
    return written


def _plotted_tags(stem: str, tags: list[str], runs: list[Run]) -> list[str]:
    """The tags of plot ``stem`` that get a panel: those some run measured with a value other than
    zero; for ``kl`` only the first KL tag any run logged."""
    if stem == "kl":
        present = [t for t in ("actor/kl_loss", "actor/ppo_kl") if any(t in r.scalars for r in runs)]
        tags = present[:1]
    # a panel only for what some run measured, and not for a feature that was off (all zeros)
    return [t for t in tags if any(v for r in runs for _, v in r.scalars.get(t, []) if not math.isnan(v))]


def _draw_panel(ax, stem: str, title: str, tag: str, groups: dict[str, list[Run]], styles: dict[str, tuple]) -> None:
    """Panel ``tag`` of plot ``stem`` on ``ax``: every run's curve (smoothed per :data:`SMOOTH`),
    thin under its setting's mean and 95 % band where the setting has several seeds, the y range
    fitted to the lines, titled with the tag (several panels) or the plot's ``title``."""
    window = SMOOTH.get(tag, 1)
    drawn: list[float] = []  # the lines' values: the y range, so that a wide band cannot squash them
    for name, members in groups.items():
        means = _band(ax, members, tag, (styles[members[0].label][0], name), window) if len(members) > 1 else []
        drawn += means
        banded = bool(means)
        for r in members:
            series = smooth(r.scalars.get(tag, []), window)
            if series:
                steps, values = zip(*series)
                drawn += [v for v in values if math.isfinite(v)]
                colour, style = styles[r.label]
                ax.plot(steps, values, marker="o" if len(series) < 12 else None, ms=3,
                        lw=0.8 if banded else 1.4, alpha=0.45 if banded else 1.0,
                        label=None if banded else r.label, color=colour, linestyle=style)
    if drawn:
        lo, hi = min(drawn), max(drawn)
        pad = 0.08 * (hi - lo) or 0.05 * abs(hi) or 0.05
        ax.set_ylim(lo - pad, hi + pad)
    name = tag if len(PLOTS[stem][1]) > 1 else title
    ax.set_title(name + (f" (moving average of {window} iterations)" if window > 1 else ""), fontsize=10)
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(_pyplot().MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # round ticks: 0, 10, 20, not 0, 8, 16
    ax.grid(alpha=0.3)


def _band(ax, members: list[Run], tag: str, look: tuple[Any, str], window: int = 1) -> list[float]:
    """The seeds' mean of ``tag`` at the iterations every seed logged, with its 95 % confidence
    band (t over the seeds), each seed's curve smoothed over ``window`` iterations first, drawn in
    ``look`` (the colour, and the setting's name for the legend). Returns the means drawn: none
    when the seeds share no iteration."""
    colour, name = look
    per_seed = [dict(smooth(r.scalars.get(tag, []), window)) for r in members]
    steps = sorted(set.intersection(*(set(s) for s in per_seed))) if per_seed else []
    steps = [step for step in steps if all(math.isfinite(s[step]) for s in per_seed)]
    if not steps:
        return []
    stats = [mean_ci([s[step] for s in per_seed]) for step in steps]
    means = [m for m, _ in stats]
    floor = 0.0 if all(v >= 0 for s in per_seed for v in s.values() if math.isfinite(v)) else -math.inf
    ax.fill_between(steps, [max(m - h, floor) for m, h in stats], [m + h for m, h in stats], color=colour, alpha=0.18, lw=0)
    ax.plot(steps, means, color=colour, lw=2.0, label=f"{name} (mean of {len(members)}, 95 % CI)")
    return means


def plot_settings(runs: list[Run], out_dir: Path) -> Path | None:
    """Bar chart of the final validation success per setting (mean over seeds, each seed a dot),
    with the mean start success as a tick; None when no run validated."""
    plt = _pyplot()

    groups = settings(r for r in runs if r.final("val/success_rate") is not None)
    if not groups:
        return None
    names = list(groups)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 2), 4.2))
    for i, name in enumerate(names):
        finals = [r.final("val/success_rate") for r in groups[name]]
        starts = [r.first("val/success_rate") for r in groups[name]]
        ax.bar(i, statistics.mean(finals), color="tab:blue", alpha=0.55, width=0.7)
        ax.scatter([i] * len(finals), finals, color="tab:blue", s=14, zorder=3)
        ax.hlines(statistics.mean(starts), i - 0.35, i + 0.35, colors="black", linestyles="--", lw=1.2)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace("experiment=", "") for n in names], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("final validation success")
    ax.grid(axis="y", alpha=0.3)
    # no legend: the title names the marks, and a legend inside the axes covered a setting's start dash
    ax.set_title("final validation success (bar: seed mean, dots: seeds, dashes: start)", fontsize=10)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "success_by_setting.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_types(runs: list[Run], out_dir: Path) -> Path | None:
    """Bar chart of the final validation success per task type, one bar per setting in each type's
    group (seed mean, each seed a dot), the setting's mean start success as a dashed tick; None when
    no run logged per-type success (``val/success_rate/<type>``)."""
    plt = _pyplot()

    runs = [r for r in runs if not r.bc_only]
    types = sorted({t for r in runs for t in r.task_types()})
    if not types:
        return None
    groups = settings(runs)
    names = list(groups)
    colours = plt.get_cmap("tab10").colors
    width = 0.8 / len(names)
    labelled: set[str] = set()
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(types) * max(1, len(names) / 2) + 2), 4.4))
    for j, name in enumerate(names):
        colour = colours[j % len(colours)]
        for i, t in enumerate(types):
            tag = f"val/success_rate/{t}"
            finals = [v for v in (r.final(tag) for r in groups[name]) if v is not None]
            starts = [v for v in (r.first(tag) for r in groups[name]) if v is not None]
            if not finals:
                continue
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(x, statistics.mean(finals), width=width * 0.9, color=colour, alpha=0.55,
                   label=None if name in labelled else name)
            labelled.add(name)
            ax.scatter([x] * len(finals), finals, color=colour, s=12, zorder=3)
            if starts:
                ax.hlines(statistics.mean(starts), x - width * 0.45, x + width * 0.45, colors="black",
                          linestyles="--", lw=1.1, label=None if "start" in labelled else "start (mean)")
                labelled.add("start")
    ax.set_xticks(range(len(types)))
    ax.set_xticklabels([t.replace("_", " ") for t in types], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("final validation success")
    ax.set_ylim(0, 1.05)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=min(4, len(names) + 1))
    ax.set_title("final validation success per task type (bar: seed mean, dots: seeds, dashes: start)", fontsize=10)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "success_by_type.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
