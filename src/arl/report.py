"""Results of a multirun as a markdown table and PNG plots (``python src/report.py <folder>``).

A multirun folder holds one subfolder per run, named by its overrides (``algo=grpo,experiment=sokoban,
seed=1``), each with TensorBoard events under ``tensorboard/``. For every run this reads the RL
scalars and reports:

- final and best ``val/success_rate`` (and per task type, ``val/success_rate/<type>``);
- steps to collapse: the first iteration where ``collapse/events`` counts an event, else ``-``;
- peak KL (``actor/kl_loss``; ``actor/ppo_kl`` when no KL term is logged), peak ``actor/grad_norm``;
- the clip fraction (``actor/clipfrac`` averaged over iterations: the tokens the policy loss clipped,
  a clipped sequence's tokens for GSPO, capped tokens for CISPO): whether IS clipping acted at all;
- the final ``rollout/valid_action_ratio``.

A behaviour-cloning run (``experiment=bc_<env>``)
has no RL curves; its row reads ``bc_results.json``: start success is the untrained model's, final
success the cloned policy's, and the valid-action ratio that of its greedy validation. It is left
out of the plots, whose x axis is the RL iteration.

Runs that differ only in ``seed`` are also summarised together (mean and 95 % confidence interval
over seeds, t distribution; bands of the same in the curves). The plots are the curves the paper shows, one line per run: validation success, KL,
gradient norm, the four clip fractions (``is/tokens_{above,below}_{pos,neg}``), the valid-format
ratio, the masked sequences and the advantage's spread (``adv/std``; ``adv/step_std`` for GiGPO).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from arl.utils.stats import bootstrap_ci, contrast_values, fisher_exact, mcnemar_exact, mean_ci, parse_contrast, t975

__all__ = ["Run", "find_runs", "write_report", "run_table", "group_table", "contrast_table", "collapse_tests",
           "fisher_exact", "mean_ci", "t975", "bootstrap_ci"]

Series = list[tuple[int, float]]  # (step, value), sorted by step, one value per step

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


@dataclass
class Run:
    """One run of a multirun: its label (the overrides) and its scalar curves."""

    name: str
    overrides: dict[str, str]
    scalars: dict[str, Series] = field(default_factory=dict)
    common: dict[str, str] = field(default_factory=dict)  # overrides shared by every run of the multirun
    bc_only: bool = False  # a behaviour-cloning run (bc_results.json, no RL curves)
    val_episodes: int | None = None  # rollout.val_episodes of the run's config
    best_checkpoint: str | None = None  # checkpoints/best-iter<k>.ckpt (the iteration of the best validation)
    games: dict[int, dict[int, bool]] = field(default_factory=dict)  # iteration -> task seed -> won (val_episodes/)

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.overrides.items()) or self.name

    @property
    def group(self) -> str:
        """The label without the seed: runs of one setting with different seeds share it."""
        return (",".join(f"{k}={v}" for k, v in self.overrides.items() if k != "seed")
                or ",".join(f"{k}={v}" for k, v in self.common.items()) or "(defaults)")

    def final(self, tag: str) -> float | None:
        s = self.scalars.get(tag)
        return s[-1][1] if s else None

    def first(self, tag: str) -> float | None:
        s = self.scalars.get(tag)
        return s[0][1] if s else None

    def gain(self, tag: str = "val/success_rate") -> float | None:
        """Final minus first value (for validation success: what RL added to its starting point)."""
        first, final = self.first(tag), self.final(tag)
        return None if first is None or final is None or len(self.scalars[tag]) < 2 else final - first

    def best(self, tag: str) -> float | None:
        s = self.scalars.get(tag)
        return max(v for _, v in s) if s else None

    def mean(self, tag: str) -> float | None:
        """Mean over the logged steps (finite values), e.g. how often clipping bound over a run."""
        s = [v for _, v in self.scalars.get(tag, []) if math.isfinite(v)]
        return statistics.mean(s) if s else None

    def start_was_best(self, tag: str = "val/success_rate") -> bool:
        """Whether the first validation (the policy RL started from) beat every later one: the best
        checkpoint is then only the best *after* RL began, not the best policy of the run."""
        s = self.scalars.get(tag, [])
        return len(s) > 1 and s[0][1] > max(v for _, v in s[1:])

    def peak(self, tag: str) -> float | None:
        s = [v for _, v in self.scalars.get(tag, []) if math.isfinite(v)]
        return max(s) if s else None

    def steps_to_collapse(self) -> int | None:
        for step, value in self.scalars.get("collapse/events", []):
            if value > 0:
                return step
        return None

    def task_types(self) -> list[str]:
        prefix = "val/success_rate/"
        return sorted(t[len(prefix):] for t in self.scalars if t.startswith(prefix))


# overrides that are paths or Hydra settings: they never name a run (configs/hydra/default.yaml)
PATH_KEYS = ("paths.", "hydra.", "ckpt_path", "model.init_from", "bc.dataset_path")


def parse_overrides(name: str) -> dict[str, str]:
    """``"experiment=grpo_sokoban,seed=1"`` -> ordered dict of the overrides (``{}`` for none).

    Values may contain commas inside brackets (``x=[1,2]``); those stay in one value.
    """
    out: dict[str, str] = {}
    depth, current = 0, ""
    parts = []
    for ch in name:
        depth += ch in "[({"
        depth -= ch in "])}"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    for part in parts:
        if "=" in part:
            key, value = part.split("=", 1)
            key = key.lstrip("+~")
            if not key.startswith(PATH_KEYS):
                out[key] = value
    return out


def read_overrides(run_dir: Path) -> dict[str, str]:
    """The run's overrides as Hydra wrote them (``.hydra/overrides.yaml``), parsed by
    :func:`parse_overrides` (path-like keys dropped); ``{}`` when there are none."""
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    import yaml

    items = yaml.safe_load(path.read_text()) or []
    return parse_overrides(",".join(str(i) for i in items))


def event_files(root: Path) -> list[Path]:
    """The TensorBoard event files under ``root`` in the order they were written: by the creation
    time TensorBoard puts in their names (``events.out.tfevents.<unix time>.<host>...``), which a
    copy or a git checkout keeps and the files' mtime does not (a name without it: its mtime)."""
    def written(p: Path) -> tuple:
        parts = p.name.split(".")
        stamp = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else int(p.stat().st_mtime)
        return (stamp, p.name)

    return sorted(Path(root).rglob("events.out.tfevents.*"), key=written) if Path(root).exists() else []


def read_scalars(folder: Path, subdir: str = "rl") -> dict[str, Series]:
    """Every scalar under ``folder/tensorboard/<subdir>`` (or ``folder/tensorboard`` when that
    subfolder is missing); all event files, the value of the file written later
    (:func:`event_files`) wins for a repeated step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = folder / "tensorboard" / subdir
    if not root.exists():
        root = folder / "tensorboard"
    merged: dict[str, dict[int, float]] = defaultdict(dict)
    for events in event_files(root):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for ev in acc.Scalars(tag):
                merged[tag][int(ev.step)] = float(ev.value)
    return {tag: sorted(values.items()) for tag, values in merged.items()}


def bc_scalars(results_path: Path) -> dict[str, Series]:
    """A BC-only run's ``bc_results.json`` as series: ``val/success_rate`` at step 0 (untrained,
    when it was validated) and step 1 (after BC), the per-type rates and valid-action ratio at 1."""
    import json

    results = json.loads(Path(results_path).read_text())
    after = results.get("val_after_bc") or {}
    out: dict[str, Series] = {}
    if "val/success_rate" in after:
        start = results.get("bc/val_success_untrained")
        out["val/success_rate"] = ([(0, float(start))] if start is not None else []) + [(1, float(after["val/success_rate"]))]
    for tag, value in after.items():
        if tag.startswith("val/success_rate/"):
            out[tag] = [(1, float(value))]
    if "val/valid_action_ratio" in after:
        out["rollout/valid_action_ratio"] = [(1, float(after["val/valid_action_ratio"]))]
    return out


def find_runs(multirun: Path) -> list[Run]:
    """The runs under a multirun folder (subfolders with TensorBoard events), sorted by setting and
    seed (:func:`_run_order`)."""
    multirun = Path(multirun)
    if not multirun.is_dir():
        raise FileNotFoundError(f"no such folder: {multirun}")
    runs = []
    for sub in sorted(p for p in multirun.iterdir() if p.is_dir()):
        if not (sub / "tensorboard").exists():
            continue
        # the exact overrides, when Hydra wrote them; else those the folder name gives
        overrides = read_overrides(sub) or parse_overrides(sub.name)
        bc_only = (sub / "bc_results.json").exists() and not (sub / "tensorboard" / "rl").exists()
        scalars = bc_scalars(sub / "bc_results.json") if bc_only else read_scalars(sub)
        runs.append(Run(sub.name, overrides, scalars, bc_only=bc_only, val_episodes=_val_episodes(sub),
                        best_checkpoint=best_checkpoint(sub), games=read_games(sub)))
    if not runs:
        raise FileNotFoundError(f"{multirun} holds no run folders with TensorBoard events")
    common = common_overrides(runs)
    for r in runs:  # labels show what differs between the runs; the rest is said once
        r.overrides = {k: v for k, v in r.overrides.items() if k not in common}
        r.common = common
    return sorted(runs, key=_run_order)


def _run_order(run: Run) -> tuple:
    """Setting first, then the seed as a number (seed 10 after seed 9), then the folder name."""
    seed = run.overrides.get("seed", "")
    return (run.group, int(seed) if seed.lstrip("-").isdigit() else math.inf, seed, run.name)


def best_checkpoint(run_dir: Path) -> str | None:
    """The name of the run's newest ``checkpoints/best-*.ckpt``; for a run archived without its
    checkpoints (scripts/archive_runs.sh), the name its ``best_checkpoint.txt`` records."""
    best = sorted((run_dir / "checkpoints").glob("best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    if best:
        return best[-1].name
    record = run_dir / "best_checkpoint.txt"
    return record.read_text().strip() or None if record.exists() else None


def read_games(run_dir: Path) -> dict[int, dict[int, bool]]:
    """``{iteration: {task seed: won}}`` of the run's ``val_episodes/iter<k>.jsonl`` (arl.callbacks.ValidationEpisodes)."""
    from arl.utils.episode_files import iteration_of

    out = {}
    for path in (run_dir / "val_episodes").glob("iter*.jsonl"):
        k = iteration_of(path)
        if k is not None:
            out[k] = {seed: won for seed, (_, won) in read_episodes(path).items()}
    return dict(sorted(out.items()))


def paired_games(run: Run) -> tuple[int, int, int, int, int] | None:
    """(games, won at the start, won at the last validation, gained, lost) over the held-out games
    both validations played: ``gained`` failed at the start (iteration 0, before RL) and won last,
    ``lost`` the reverse. None without the episodes of the start and of a later validation."""
    if 0 not in run.games or len(run.games) < 2:
        return None
    return game_pairs(run.games[0], run.games[max(run.games)])


def game_pairs(before: dict[int, bool], after: dict[int, bool]) -> tuple[int, int, int, int, int] | None:
    """(games, won before, won after, gained, lost) over the task seeds both ``{seed: won}`` maps
    hold: ``gained`` lost before and won after, ``lost`` the reverse. None when they share none."""
    seeds = sorted(set(before) & set(after))
    if not seeds:
        return None
    gained = sum(not before[s] and after[s] for s in seeds)
    lost = sum(before[s] and not after[s] for s in seeds)
    return len(seeds), sum(before[s] for s in seeds), sum(after[s] for s in seeds), gained, lost


def games_by_setting(runs: Iterable[Run]) -> dict[str, tuple[int, int, int, int, int, int, float]]:
    """Setting -> (seeds, games, won at start, won last, gained, lost, McNemar p): :func:`paired_games`
    summed over the setting's seeds that hold the episodes of the start and of a later validation, and
    McNemar's exact test on the pooled discordant games. Settings without such episodes are left out."""
    out = {}
    for name, members in settings(r for r in runs if not r.bc_only).items():
        pairs = [p for p in (paired_games(r) for r in members) if p is not None]
        if pairs:
            n, first, last, gained, lost = (sum(col) for col in zip(*pairs))
            out[name] = (len(pairs), n, first, last, gained, lost, mcnemar_exact(gained, lost))
    return out


def games_table(runs: Iterable[Run]) -> str:
    """Game by game, the start (iteration 0) against the last validation (the same held-out games; val_episodes/), per
    setting summed over its seeds: games won before and after, the games RL gained and lost, and
    McNemar's exact test on those discordant pairs (:func:`games_by_setting`). Pooling the seeds' games treats each game of
    each seed as one pair, so it speaks of these games, not of the spread between seeds (the
    settings table's gain interval does). An empty string when no run has two validations' episodes."""
    lines = ["| setting | seeds | games | won at start | won last | gained | lost | McNemar p |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, (seeds, n, first, last, gained, lost, p) in games_by_setting(runs).items():
        lines.append(f"| `{name}` | {seeds} | {n} | {first} ({first / n:.3f}) | {last} ({last / n:.3f}) | "
                     f"{gained} | {lost} | {p:.3g} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def read_episodes(path: Path) -> dict[int, tuple[str, bool]]:
    """``{task seed: (task type, won)}`` of one validation's episodes: an episodes file (a run's
    ``val_episodes/iter<k>.jsonl``, or ``val_episodes.jsonl`` of ``src/eval.py``), or a folder
    holding ``val_episodes.jsonl`` (an eval run)."""
    import json

    path = Path(path)
    if path.is_dir():
        path = path / "val_episodes.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no episodes file (src/eval.py writes <run>/val_episodes.jsonl)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {int(r["seed"]): (str(r.get("task_type") or ""), bool(r["won"])) for r in rows
            if r.get("seed") is not None and not r.get("env_error")}


def compare_table(pairs: list[tuple[Path, Path]]) -> str:
    """Two policies game by game, once per pair of validations (``before``, ``after``) of the same
    held-out games, e.g. a BC start and the RL policy of one seed, each evaluated with that seed.

    A row per pair: the games both played, won before and after, gained (lost before, won after),
    lost, McNemar's exact p and the gain (after - before, as rates). Then the gain over the pairs
    (mean and 95 % t interval: with one pair per seed, the spread between seeds), McNemar's test on
    the pooled discordant games, and success per task type pooled over the pairs."""
    lines = ["| before | after | games | won before | won after | gained | lost | McNemar p | gain |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    gains, gained_all, lost_all = [], 0, 0
    by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # won before, won after, games
    for before_path, after_path in pairs:
        before, after = read_episodes(before_path), read_episodes(after_path)
        counts = game_pairs({s: w for s, (_, w) in before.items()}, {s: w for s, (_, w) in after.items()})
        if counts is None:
            raise ValueError(f"{before_path} and {after_path} share no held-out game (task seed)")
        n, won_b, won_a, gained, lost = counts
        gain = (won_a - won_b) / n
        gains.append(gain)
        gained_all, lost_all = gained_all + gained, lost_all + lost
        for s in set(before) & set(after):
            per_type = by_type[before[s][0]]
            per_type[0] += before[s][1]
            per_type[1] += after[s][1]
            per_type[2] += 1
        lines.append(f"| `{before_path}` | `{after_path}` | {n} | {won_b} ({won_b / n:.3f}) | "
                     f"{won_a} ({won_a / n:.3f}) | {gained} | {lost} | {mcnemar_exact(gained, lost):.3g} | "
                     f"{gain:+.3f} |")
    out = ["\n".join(lines), "",
           f"Gain over {len(gains)} pair(s), mean and 95 % t interval: {format_mean_ci(gains, signed=True)}; pooled "
           f"games gained {gained_all}, lost {lost_all}, McNemar p {mcnemar_exact(gained_all, lost_all):.3g}."]
    types = [t for t in sorted(by_type) if t]
    if len(types) > 1:
        out += ["", "| task type | games | before | after |", "|---|---:|---:|---:|"]
        out += [f"| {t} | {by_type[t][2]} | {by_type[t][0] / by_type[t][2]:.3f} | {by_type[t][1] / by_type[t][2]:.3f} |"
                for t in types]
    return "\n".join(out)


def read_config(run_dir: Path) -> dict:
    """The run's saved config (``.hydra/config.yaml``) as a dict; ``{}`` when there is none."""
    config = Path(run_dir) / ".hydra" / "config.yaml"
    if not config.exists():
        return {}
    import yaml

    return yaml.safe_load(config.read_text()) or {}


def _val_episodes(run_dir: Path) -> int | None:
    """``rollout.val_episodes`` of the run's saved config (None when there is none)."""
    value = (read_config(run_dir).get("rollout") or {}).get("val_episodes")
    return int(value) if isinstance(value, (int, float)) else None


def common_overrides(runs: list[Run]) -> dict[str, str]:
    """The overrides every run shares with the same value (only when there are several runs)."""
    if len(runs) < 2:
        return {}
    first = runs[0].overrides
    return {k: v for k, v in first.items() if all(r.overrides.get(k) == v for r in runs[1:])}


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def kl_tag(run: Run) -> str:
    return "actor/kl_loss" if "actor/kl_loss" in run.scalars else "actor/ppo_kl"


def run_table(runs: Iterable[Run]) -> str:
    """The per-run markdown table."""
    runs = list(runs)
    types = sorted({t for r in runs for t in r.task_types()})
    head = ["run", "start success", "final success", "best success", *[f"final {t}" for t in types],
            "steps to collapse", "peak KL", "peak grad norm", "clip fraction", "valid-action ratio", "optimiser steps",
            "skipped updates"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in runs:
        cells = [f"`{r.label}`", _fmt(r.first("val/success_rate")), _fmt(r.final("val/success_rate")),
                 _fmt(r.best("val/success_rate")),
                 *[_fmt(r.final(f"val/success_rate/{t}")) for t in types],
                 _fmt(r.steps_to_collapse()), _fmt(r.peak(kl_tag(r)), 4), _fmt(r.peak("actor/grad_norm"), 2),
                 _fmt(r.mean("actor/clipfrac"), 4), _fmt(r.final("rollout/valid_action_ratio")),
                 _fmt(r.final("train/optimizer_steps"), 0), _fmt(r.final("train/updates_skipped"), 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


MAX_VALIDATION_COLUMNS = 12  # wider tables are left to the curves


def validation_table(runs: Iterable[Run], tag: str = "val/success_rate") -> str:
    """Validation success of every run at every validation iteration ("-" where a run had not
    reached that check), then, where a setting has several seeds, its mean over the seeds that
    reached each check. An empty string for fewer than two checks or more than
    :data:`MAX_VALIDATION_COLUMNS` of them.

    Example: runs ``seed=1`` (validations 0.2 at iteration 0, 0.4 at 10) and ``seed=2`` (0.3 at 0)
    of one setting ``s`` give the rows ``| `seed=1` | 0.200 | 0.400 |``, ``| `seed=2` | 0.300 | - |``
    and ``| mean of `s` (2 seeds) | 0.250 | 0.400 |``."""
    runs = [r for r in runs if not r.bc_only and r.scalars.get(tag)]
    steps = sorted({step for r in runs for step, _ in r.scalars[tag]})
    if not 2 <= len(steps) <= MAX_VALIDATION_COLUMNS:
        return ""
    at = {r.name: dict(r.scalars[tag]) for r in runs}  # by folder: unique, where labels might repeat
    head = ["run", *[f"it {s}" for s in steps]]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(steps)]
    for r in runs:
        lines.append("| " + " | ".join([f"`{r.label}`", *[_fmt(at[r.name].get(s)) for s in steps]]) + " |")
    groups = settings(runs)
    if any(len(m) > 1 for m in groups.values()):
        for name, members in groups.items():
            cells = []
            for s in steps:
                values = [at[r.name][s] for r in members if s in at[r.name]]
                cells.append(_fmt(statistics.fmean(values)) if values else "-")
            lines.append("| " + " | ".join([f"mean of `{name}` ({len(members)} seed{'s' if len(members) != 1 else ''})", *cells]) + " |")
    return "\n".join(lines)


def format_mean_ci(values: list[float], signed: bool = False) -> str:
    """``"0.250 [0.120, 0.380]"``: the mean and its 95 % t interval over the values (one value
    alone; ``"-"`` for none); ``signed`` writes a sign on every number (differences)."""
    if not values:
        return "-"
    fmt = "+.3f" if signed else ".3f"
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    m, half = mean_ci(values)
    return f"{m:{fmt}} [{m - half:{fmt}}, {m + half:{fmt}}]"


def collapse_tests(runs: Iterable[Run]) -> str:
    """Collapse counts of every pair of settings where some run collapsed, with Fisher's exact
    test (two-sided); an empty string when no run collapsed or there is one setting."""
    groups = settings(r for r in runs if not r.bc_only)
    counts = {g: (sum(r.steps_to_collapse() is not None for r in m), len(m)) for g, m in groups.items()}
    names = list(counts)
    lines = ["| setting A | collapsed | setting B | collapsed | Fisher p |", "|---|---:|---|---:|---:|"]
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            (cx, nx), (cy, ny) = counts[x], counts[y]
            if cx + cy == 0:
                continue
            p = fisher_exact(cx, nx - cx, cy, ny - cy)
            lines.append(f"| `{x}` | {cx}/{nx} | `{y}` | {cy}/{ny} | {p:.3f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def format_bootstrap(values: list[float], signed: bool = False) -> str:
    """``"[0.120, 0.380]"``: the percentile bootstrap 95 % interval of the mean (``"-"`` below two values)."""
    if len(values) < 2:
        return "-"
    fmt = "+.3f" if signed else ".3f"
    _, lo, hi = bootstrap_ci(values)
    return f"[{lo:{fmt}}, {hi:{fmt}}]"


def collapse_cell(members: list[Run]) -> str:
    """``"2/4 (it 1, 7)"``: runs the detector fired in, of the setting's runs, and the first
    iteration it fired in each of them (time to collapse)."""
    firsts = sorted(s for s in (r.steps_to_collapse() for r in members) if s is not None)
    return f"{len(firsts)}/{len(members)}" + (f" (it {', '.join(map(str, firsts))})" if firsts else "")


def settings(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """Setting (the label without the seed) -> its runs, in the runs' order."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        groups[r.group].append(r)
    return dict(groups)


def group_table(runs: Iterable[Run]) -> str:
    """Mean and 95 % confidence interval (t over the seeds) of each setting; the final success also
    with its percentile bootstrap interval over the seeds."""
    head = ["setting", "seeds", "final success", "final success, bootstrap", "gain over start", "best success",
            "collapsed (first iteration)", "peak KL", "clip fraction", "valid-action ratio"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, members in settings(runs).items():
        def vals(fn):
            return [v for v in (fn(r) for r in members) if v is not None]

        finals = vals(lambda r: r.final("val/success_rate"))
        cells = [f"`{name}`", str(len(members)), format_mean_ci(finals), format_bootstrap(finals),
                 format_mean_ci(vals(lambda r: r.gain("val/success_rate")), signed=True),
                 format_mean_ci(vals(lambda r: r.best("val/success_rate"))),
                 collapse_cell(members),
                 format_mean_ci(vals(lambda r: r.peak(kl_tag(r)))),
                 format_mean_ci(vals(lambda r: r.mean("actor/clipfrac"))),
                 format_mean_ci(vals(lambda r: r.final("rollout/valid_action_ratio")))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def type_cells(runs: Iterable[Run]) -> tuple[list[str], dict[str, tuple[int, list[str]]]]:
    """(the task types, setting -> (its seeds, a cell per type)) of the runs' validation success per
    task type (``val/success_rate/<type>``; envs with several types, ALFWorld's six): each cell
    ``"start -> final [t 95 %] (gain +g [t 95 %])"``, the start the seeds' mean, the final and the
    gain (final - start) with their t intervals over the seeds; ``"-"`` where the setting's runs
    lack the type. No types (and no settings) when no run logged one."""
    runs = [r for r in runs if not r.bc_only]
    types = sorted({t for r in runs for t in r.task_types()})
    if not types:
        return [], {}
    out = {}
    for name, members in settings(runs).items():
        cells = []
        for t in types:
            tag = f"val/success_rate/{t}"
            starts = [v for v in (r.first(tag) for r in members) if v is not None]
            finals = [v for v in (r.final(tag) for r in members) if v is not None]
            gains = [v for v in (r.gain(tag) for r in members) if v is not None]
            start = f"{sum(starts) / len(starts):.3f} -> " if starts else ""
            gain = f" (gain {format_mean_ci(gains, signed=True)})" if gains else ""
            cells.append(f"{start}{format_mean_ci(finals)}{gain}" if finals else "-")
        out[name] = (len(members), cells)
    return types, out


def type_table(runs: Iterable[Run]) -> str:
    """Validation success per task type of each setting (:func:`type_cells`): ``start -> final``
    with the final's 95 % t interval over the seeds, and the gain per type. An empty string when
    no run logged ``val/success_rate/<type>``."""
    types, rows = type_cells(runs)
    if not types:
        return ""
    lines = ["| setting | seeds | " + " | ".join(types) + " |", "|---|---:|" + "---|" * len(types)]
    lines += [f"| `{name}` | {n} | " + " | ".join(cells) + " |" for name, (n, cells) in rows.items()]
    return "\n".join(lines)


def default_contrasts(runs: list[Run]) -> list[str]:
    """Every setting against the paper's baseline, ``algo=grpo`` with the rest of its label equal,
    when the runs have it (``algo=sampo - algo=grpo``, ...); none otherwise."""
    groups = settings(r for r in runs if not r.bc_only)
    out = []
    for name, members in groups.items():
        algo = members[0].overrides.get("algo")
        if algo in (None, "grpo"):
            continue
        base = ",".join(f"{k}={'grpo' if k == 'algo' else v}" for k, v in members[0].overrides.items() if k != "seed")
        if base in groups:
            out.append(f"{name} - {base}")
    return out


#: what a paired comparison compares, per run (None: the run lacks it)
MEASURES: dict[str, Callable[[Run], float | None]] = {
    "final validation success": lambda r: r.final("val/success_rate"),
    # every iteration's training episodes (64 a time on the CPU, the same tasks for every method of a
    # seed): many more episodes than the last validation, so a tighter paired difference
    "mean training success over the run": lambda r: r.mean("rollout/success_rate"),
    # how soon a policy answers in the format (what the stage-aware filter is for) and how much of
    # it a collapse costs: the mean of the per-iteration valid-action ratio of the training episodes
    "mean training valid-action ratio over the run": lambda r: r.mean("rollout/valid_action_ratio"),
    # what RL added to the start: the last validation minus the first (iteration 0, the start policy), on
    # the same held-out games; a single setting's contrast ("algo=sampo") is its gain per seed
    "gain over the start": lambda r: r.gain("val/success_rate"),
}


def contrast_table(runs: Iterable[Run], contrasts: list[str], measure: str = "final validation success") -> str:
    """Paired comparisons over seeds: for each contrast (``"A - B"``, or a difference of differences
    ``"A - B - C + D"``) the ``measure`` (a key of :data:`MEASURES`) combined per seed over the seeds
    all its settings ran, with the mean, its t and bootstrap 95 % intervals, and how many seeds came
    out above / below zero. A contrast naming a setting the runs lack says so in its row (a study
    in progress still reports the rest; a misspelt name shows the names there are). An empty
    string without contrasts."""
    if not contrasts:
        return ""
    by_setting = values_by_setting(runs, MEASURES[measure])
    head = ["contrast (per seed)", "seeds", "mean [t 95 %]", "bootstrap 95 %", "above / below 0", "per seed"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|---|"]
    for spec in contrasts:
        try:
            per_seed = contrast_values(parse_contrast(spec), by_setting)
        except KeyError as err:  # a setting that has not run (yet): said in its row, the rest still reported
            lines.append(f"| `{spec}` | 0 | {err.args[0]} | - | - | - |")
            continue
        values = list(per_seed.values())
        if not values:
            lines.append(f"| `{spec}` | 0 | - | - | - | - |")
            continue
        above, below = sum(v > 1e-12 for v in values), sum(v < -1e-12 for v in values)
        lines.append(f"| `{spec}` | {len(values)} | {format_mean_ci(values, signed=True)} | {format_bootstrap(values, signed=True)} "
                     f"| {above} / {below} | {', '.join(f'{s}: {v:+.3f}' for s, v in per_seed.items())} |")
    return "\n".join(lines)


def seed_of(run: Run) -> str:
    """The run's seed as its label or the multirun's shared overrides give it (else its folder name)."""
    return run.overrides.get("seed") or run.common.get("seed") or run.name


def values_by_setting(runs: Iterable[Run], value: Callable[[Run], float | None]) -> dict[str, dict[str, float]]:
    """Setting -> {seed: ``value(run)``} over the runs that have the value: what a paired contrast
    (:func:`arl.utils.stats.contrast_values`) combines per seed."""
    return {name: {seed_of(r): v for r in members if (v := value(r)) is not None}
            for name, members in settings(runs).items()}


def line_styles(runs: list[Run]) -> dict[str, tuple]:
    """Run label -> (colour, line style): one colour per setting, one line style per seed."""
    import matplotlib

    palette = matplotlib.colormaps["tab10" if len({r.group for r in runs}) <= 10 else "tab20"].colors
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    from matplotlib.ticker import MaxNLocator

    window = SMOOTH.get(tag, 1)
    drawn: list[float] = []  # the lines' values: the y range, so that a wide band cannot squash them
    for name, members in groups.items():
        banded = len(members) > 1 and _band(ax, members, tag, styles[members[0].label][0], name, window, drawn)
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
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # round ticks: 0, 10, 20, not 0, 8, 16
    ax.grid(alpha=0.3)


def _band(ax, members: list[Run], tag: str, colour, name: str, window: int = 1, drawn: list[float] | None = None) -> bool:
    """The seeds' mean of ``tag`` at the iterations every seed logged, with its 95 % confidence
    band (t over the seeds), each seed's curve smoothed over ``window`` iterations first; the means
    are added to ``drawn``. False when the seeds share fewer than one iteration."""
    per_seed = [dict(smooth(r.scalars.get(tag, []), window)) for r in members]
    steps = sorted(set.intersection(*(set(s) for s in per_seed))) if per_seed else []
    if not steps:
        return False
    steps = [step for step in steps if all(math.isfinite(s[step]) for s in per_seed)]
    if not steps:
        return False
    stats = [mean_ci([s[step] for s in per_seed]) for step in steps]
    means = [m for m, _ in stats]
    floor = 0.0 if all(v >= 0 for s in per_seed for v in s.values() if math.isfinite(v)) else -math.inf
    ax.fill_between(steps, [max(m - h, floor) for m, h in stats], [m + h for m, h in stats], color=colour, alpha=0.18, lw=0)
    ax.plot(steps, means, color=colour, lw=2.0, label=f"{name} (mean of {len(members)}, 95 % CI)")
    if drawn is not None:
        drawn += means
    return True


def plot_settings(runs: list[Run], out_dir: Path) -> Path | None:
    """Bar chart of the final validation success per setting (mean over seeds, each seed a dot),
    with the mean start success as a tick; None when no run validated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def validation_line(runs: list[Run]) -> str:
    """How many episodes each validation played, and each run's best checkpoint (by iteration)."""
    sizes = sorted({r.val_episodes for r in runs if r.val_episodes})
    size = (f"{sizes[0]} episodes per validation" if len(sizes) == 1 else
            f"{', '.join(map(str, sizes))} episodes per validation (the runs differ)" if sizes else "validation size unknown")
    best = [f"`{r.label}`: `{r.best_checkpoint}`{' (the start scored higher)' if r.start_was_best() else ''}"
            for r in runs if r.best_checkpoint]
    return f"Validation: {size}." + (f" Best checkpoints (by validation success): {'; '.join(best)}." if best else "")


def write_report(multirun: Path, out_dir: Path | None = None, contrasts: list[str] | None = None) -> Path:
    """Write ``report.md`` and the PNG plots into ``out_dir`` (default ``<multirun>/report``).

    ``contrasts``: paired comparisons over seeds (:func:`contrast_table`), one table per measure of
    :data:`MEASURES` that the runs logged; default every setting against ``algo=grpo`` when the
    runs have it."""
    multirun = Path(multirun)
    runs = find_runs(multirun)
    contrasts = default_contrasts(runs) if contrasts is None else contrasts
    common = runs[0].common
    n_bc = sum(r.bc_only for r in runs)
    out_dir = Path(out_dir) if out_dir else multirun / "report"
    plots = plot_curves(runs, out_dir)
    bars = plot_settings(runs, out_dir)
    if bars is not None:
        plots.insert(0, bars)
    by_type = plot_types(runs, out_dir)
    if by_type is not None:
        plots.insert(1 if bars is not None else 0, by_type)
    parts = [
        f"# Report: {multirun.name}",
        f"{len(runs)} runs from `{multirun}`. Success is the validation success rate "
        "(`val/success_rate`: sampled as the paper's scripts, greedy where a run set `rollout.val_temperature=0`); start success is its first validation (before RL), the gain is final minus "
        "start; steps to collapse is the first iteration the collapse detector fired.",
        *([f"{n_bc} behaviour-cloning run(s) (`bc_results.json`): start is the untrained model, final the cloned "
           "policy; they are not in the curves."] if n_bc else []),
        *([f"Every run shares: `{','.join(f'{k}={v}' for k, v in common.items())}`."] if common else []),
        validation_line(runs),
        "## Runs",
        run_table(runs),
        *(["## Validation success at each check", checks] if (checks := validation_table(runs)) else []),
        "## Settings (mean and 95 % confidence interval over seeds, t distribution)",
        group_table(runs),
        *(["## Success per task type (validation: start -> final, mean and 95 % t interval over seeds)", types]
          if (types := type_table(runs)) else []),
        *(["## Game by game (start against last validation, the same held-out games; seeds pooled)", games]
          if (games := games_table(runs)) else []),
        *[part for measure, value in MEASURES.items() if any(value(r) is not None for r in runs)
          and (paired := contrast_table(runs, contrasts, measure))
          for part in (f"## Paired comparisons: {measure} (same seeds; t and bootstrap 95 % intervals)", paired)],
        *(["## Collapses (Fisher's exact test, two-sided; pairs where some run collapsed)", tests]
          if (tests := collapse_tests(runs)) else []),
        "## Curves",
        *[f"![{p.stem}]({p.name})" for p in plots],
    ]
    path = out_dir / "report.md"
    path.write_text("\n\n".join(parts) + "\n")
    return path
