"""What a multirun folder holds, read: one :class:`Run` per run folder (``python src/report.py <folder>``).

A multirun folder holds one subfolder per run, named by its overrides (``algo=grpo,experiment=sokoban,
seed=1``) or by what varies (``grpo_seed1``, scripts/rename_runs.py), each with TensorBoard events under
``tensorboard/``. This module reads them: the run's overrides (``.hydra/overrides.yaml``, else the
folder name) and config, its scalars (every event file, the later one winning a repeated step), a
behaviour-cloning run's ``bc_results.json``, the best checkpoint's name, and the per-game validation
episodes (``val_episodes/iter<k>.jsonl``). A :class:`Run` answers first, final, best, peak and mean
of a tag; :func:`settings` groups runs that differ only in ``seed``, :func:`values_by_setting` gives
a measure per setting and seed, what a paired contrast combines.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from arl.analysis.stats import parse_contrast
from arl.utils.episode_files import iteration_of

Series = list[tuple[int, float]]  # (step, value), sorted by step, one value per step
# a held-out game: its task seed, or (member, task seed) for a mix's (env=mix: every member validates on its own
# games under the same seeds, 2**30 + i), :func:`read_games`
GameKey = int | tuple[str, int]


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
    games: dict[int, dict[GameKey, bool]] = field(default_factory=dict)  # iteration -> game -> won (val_episodes/)

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

    def total(self, tag: str) -> float | None:
        """Sum over the logged steps (finite values), e.g. episodes lost to environment errors in a run."""
        s = [v for _, v in self.scalars.get(tag, []) if math.isfinite(v)]
        return sum(s) if s else None

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

    def members(self) -> list[str]:
        """The members of a mix (``env=mix``) whose validation the run logged (``val/<member>/success_rate``),
        sorted; ``[]`` for a run of one env."""
        return sorted(parts[1] for t in self.scalars if len(parts := t.split("/")) == 3
                      and parts[0] == "val" and parts[2] == "success_rate")


# overrides that are paths or Hydra settings: they never name a run (configs/hydra/default.yaml)
PATH_KEYS = ("paths.", "hydra.", "ckpt_path", "model.init_from", "bc.dataset_path", "rl.start_validation_cache")


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


def _read_events(events: Path):
    """TensorBoard's reader of one event file, loaded with every scalar."""
    # heavy: tensorboard's reader (~0.35 s, numpy, protobuf), only for runs that have event files
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def scalar_tags(events: Path) -> list[str]:
    """The scalar tags one event file holds."""
    return list(_read_events(events).Tags().get("scalars", []))


def read_scalars(folder: Path, subdir: str = "rl") -> dict[str, Series]:
    """Every scalar under ``folder/tensorboard/<subdir>`` (or ``folder/tensorboard`` when that
    subfolder is missing); all event files, the value of the file written later
    (:func:`event_files`) wins for a repeated step."""
    root = folder / "tensorboard" / subdir
    if not root.exists():
        root = folder / "tensorboard"
    merged: dict[str, dict[int, float]] = defaultdict(dict)
    for events in event_files(root):
        acc = _read_events(events)
        for tag in acc.Tags().get("scalars", []):
            for ev in acc.Scalars(tag):
                merged[tag][int(ev.step)] = float(ev.value)
    return {tag: sorted(values.items()) for tag, values in merged.items()}


def bc_scalars(results_path: Path) -> dict[str, Series]:
    """A BC-only run's ``bc_results.json`` as series: ``val/success_rate`` at step 0 (untrained,
    when it was validated) and step 1 (after BC), the per-type rates and valid-action ratio at 1."""
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


def read_games(run_dir: Path) -> dict[int, dict[GameKey, bool]]:
    """``{iteration: {game: won}}`` of the run's ``val_episodes/iter<k>.jsonl`` (arl.callbacks.ValidationEpisodes).
    A game is its task seed, or ``(member, task seed)`` when the run's records name several envs (a mix, whose
    members validate under the same seeds: :func:`games_of`); one key for every file of the run."""
    rows = {}
    for path in (run_dir / "val_episodes").glob("iter*.jsonl"):
        k = iteration_of(path)
        if k is not None:
            rows[k] = episode_rows(path)
    by_env = several_envs(*rows.values())
    return {k: {key: won for key, (_, won) in games_of(r, by_env).items()} for k, r in sorted(rows.items())}


def episode_rows(path: Path) -> list[dict]:
    """The records of one validation's episodes that name a task and played it (no ``env_error``): an
    episodes file (a run's ``val_episodes/iter<k>.jsonl``, or ``val_episodes.jsonl`` of ``src/eval.py``), or
    a folder holding ``val_episodes.jsonl`` (an eval run)."""
    path = Path(path)
    if path.is_dir():
        path = path / "val_episodes.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no episodes file (src/eval.py writes <run>/val_episodes.jsonl)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("seed") is not None and not r.get("env_error")]


def several_envs(*row_lists: list[dict]) -> bool:
    """Whether the records name more than one env (``env``: a mix's member; records written before they
    named it count as none), so that a game must be keyed by its member as well as its seed."""
    return len({r["env"] for rows in row_lists for r in rows if r.get("env")}) > 1


def games_of(rows: list[dict], by_env: bool) -> dict[GameKey, tuple[str, bool]]:
    """``{game: (task type, won)}`` of episode records: a game is its task seed, or with ``by_env``
    ``(member, task seed)``, so that two members' games of one seed never pair up."""
    return {((str(r.get("env") or ""), int(r["seed"])) if by_env else int(r["seed"])):
            (str(r.get("task_type") or ""), bool(r["won"])) for r in rows}


def read_episodes(path: Path) -> dict[GameKey, tuple[str, bool]]:
    """``{game: (task type, won)}`` of one validation's episodes (:func:`episode_rows`): the game its task
    seed, or ``(member, task seed)`` where the records name several envs (a mix: :func:`games_of`)."""
    rows = episode_rows(path)
    return games_of(rows, several_envs(rows))


def read_config(run_dir: Path) -> dict:
    """The run's saved config (``.hydra/config.yaml``) as a dict; ``{}`` when there is none."""
    config = Path(run_dir) / ".hydra" / "config.yaml"
    if not config.exists():
        return {}
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


def settings(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """Setting (the label without the seed) -> its runs, in the runs' order."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        groups[r.group].append(r)
    return dict(groups)


def seed_of(run: Run) -> str:
    """The run's seed as its label or the multirun's shared overrides give it (else its folder name)."""
    return run.overrides.get("seed") or run.common.get("seed") or run.name


def setting_terms(spec: str, names: Iterable[str]) -> list[tuple[int, str]]:
    """The contrast ``spec``'s terms (:func:`arl.analysis.stats.parse_contrast`) with each name resolved to
    a setting of ``names``: the setting of that name, else the one setting whose overrides include the
    name's (``algo=grpo`` names the setting of a folder holding one method's runs, whose label is
    every override its runs share). A name neither resolves is kept as it is (the caller's lookup
    then says it is missing)."""
    names = list(names)
    terms = []
    for sign, name in parse_contrast(spec):
        if name not in names:
            want = parse_overrides(name).items()
            matches = [n for n in names if want and want <= parse_overrides(n).items()]
            name = matches[0] if len(matches) == 1 else name
        terms.append((sign, name))
    return terms


def values_by_setting(runs: Iterable[Run], value: Callable[[Run], float | None]) -> dict[str, dict[str, float]]:
    """Setting -> {seed: ``value(run)``} over the runs that have the value: what a paired contrast
    (:func:`arl.analysis.stats.contrast_values`) combines per seed."""
    return {name: {seed_of(r): v for r in members if (v := value(r)) is not None}
            for name, members in settings(runs).items()}


def kl_tag(run: Run) -> str:
    return "actor/kl_loss" if "actor/kl_loss" in run.scalars else "actor/ppo_kl"
