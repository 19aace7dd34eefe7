"""Rename the run folders of a runs archive to short names that say what varies between its runs.

Hydra names a multirun's job folders by the whole override string (``algo=dapo_gigpo,debug=cpu_small,
env.kwargs.dim_room=[7,7],...,rl.~2586ced8c2``): up to ~290 characters, with brackets and commas, cut
and hashed where the file system limits a name. The readers do not need that name (``arl.analysis.runs.find_runs``
labels a run by its ``.hydra/overrides.yaml``), so an archive can carry short flat names instead, as the
newer studies write them (``hydra.sweep.subdir=${algo.name}_seed${seed}``, scripts/study_lib.sh)::

    python scripts/rename_runs.py docs/results/arena_stage2/runs --dry-run   # prints old -> new
    python scripts/rename_runs.py docs/results/arena_stage2/runs

The run folders are the direct subfolders that hold ``.hydra/overrides.yaml`` (the layout stays flat;
other folders are left alone). The rule, from each run's overrides as the readers take them
(``arl.analysis.runs.read_overrides``, which drops path-like keys, ``arl.analysis.runs.PATH_KEYS``):

* the overrides every run shares are dropped (``arl.analysis.runs.common_overrides``); the rest vary;
* the name is ``<algo>``, then ``<key><value>`` for every other varying key (in the order the runs'
  overrides first give them), then ``seed<k>``, joined by ``_``: ``grpo_lr0.0003_mb8_seed1``. ``algo`` and
  ``seed`` are named whenever a run sets them, varying or not (every archive's runs are told apart by
  them, as ``<algo>_seed<k>`` of the newer studies); with only those varying the name is ``<algo>_seed<k>``
  (``run`` for a run with no algo, no seed and no varying key);
* ``<key>`` is the key's last dotted segment, shortened to the initials of its ``_``-separated words
  when it has several (``rl.optimizer.lr`` -> ``lr``, ``rl.mini_batches`` -> ``mb``); where two varying
  keys would get the same short form, those keys are named by their whole last segment, and where that
  is still shared, by the whole dotted key;
* ``<value>``: brackets, braces and quotes dropped, every other run of characters outside
  ``[A-Za-z0-9._-]`` replaced by one ``-`` (``[7,7]`` -> ``7-7``).

Names must be unique within the archive: two runs that differ only in path-like keys (or not at all),
or a new name taken by a folder that is not a run, stop the script before anything is renamed. A
second call renames nothing (the names come from the overrides, not from the folder names). The
``run_dir`` a run's ``rl_results.json`` records and the paths in its ``.hydra/hydra.yaml`` keep the
folder the run was written in: they are the run's history, and no reader takes a name from them.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # `arl` without installing, too

from arl.analysis.runs import Run, common_overrides, read_overrides

FIRST, LAST = "algo", "seed"


class NameClash(ValueError):
    """Two run folders would get the same name, or a new name is taken by another folder."""


def safe_value(value: str) -> str:
    """``[7,7]`` -> ``7-7``: brackets, braces and quotes dropped, other runs outside ``[A-Za-z0-9._-]`` -> ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", re.sub(r"[\[\]{}()'\"]", "", value))


def short_keys(keys: list[str]) -> dict[str, str]:
    """Key -> its short form in a name: the initials of the last segment's words (``mini_batches`` -> ``mb``),
    else, where two keys share that, the whole last segment, else the whole key."""
    def initials(key: str) -> str:
        words = [w for w in key.rsplit(".", 1)[-1].split("_") if w]
        return "".join(w[0] for w in words) if len(words) > 1 else key.rsplit(".", 1)[-1]

    forms = [initials, lambda k: k.rsplit(".", 1)[-1], lambda k: k]
    out = {k: forms[0](k) for k in keys}
    for form in forms[1:]:
        shared = {k for k in keys if sum(out[j] == out[k] for j in keys) > 1}
        for k in shared:
            out[k] = form(k)
    return out


def new_names(runs_dir: Path) -> dict[Path, str]:
    """Run folder -> its short name (module docstring); raises :class:`NameClash` when names would repeat."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"no such folder: {runs_dir}")
    folders = sorted(p for p in runs_dir.iterdir() if p.is_dir() and (p / ".hydra" / "overrides.yaml").is_file())
    if not folders:
        raise FileNotFoundError(f"{runs_dir} holds no run folders (subfolders with .hydra/overrides.yaml)")
    runs = [Run(p.name, read_overrides(p)) for p in folders]
    common = common_overrides(runs)
    varying = list(dict.fromkeys(k for r in runs for k in r.overrides if k not in common and k not in (FIRST, LAST)))
    short = short_keys(varying)
    names = {}
    for folder, run in zip(folders, runs):
        o = run.overrides
        parts = ([safe_value(o[FIRST])] if FIRST in o else []) + \
                [short[k] + safe_value(o[k]) for k in varying if k in o] + \
                ([LAST + safe_value(o[LAST])] if LAST in o else [])
        names[folder] = "_".join(parts) or "run"
    by_name: dict[str, list[str]] = {}
    for folder, name in names.items():
        by_name.setdefault(name, []).append(folder.name)
    clashes = {n: olds for n, olds in by_name.items() if len(olds) > 1}
    if clashes:
        lines = [f"  {n!r}: {', '.join(map(repr, olds))}" for n, olds in clashes.items()]
        raise NameClash(f"{runs_dir}: runs whose overrides differ only in path-like keys (or not at all) would share "
                        "a name; nothing renamed:\n" + "\n".join(lines))
    others = {p.name for p in runs_dir.iterdir()} - {f.name for f in folders}
    if taken := sorted(set(names.values()) & others):
        raise NameClash(f"{runs_dir}: {', '.join(map(repr, taken))} already there and not a run folder; "
                        "nothing renamed")
    return names


def rename(runs_dir: Path, dry_run: bool = False) -> list[tuple[str, str]]:
    """Rename the archive's run folders (:func:`new_names`); returns the (old, new) names that changed."""
    runs_dir = Path(runs_dir)
    moves = [(folder, runs_dir / name) for folder, name in new_names(runs_dir).items() if folder.name != name]
    if dry_run or not moves:
        return [(a.name, b.name) for a, b in moves]
    if any(b.exists() for _, b in moves):  # a new name is another run's old one: through temporary names
        staged = []
        for i, (a, b) in enumerate(moves):
            tmp = runs_dir / f".rename_runs.{i}"
            a.rename(tmp)
            staged.append((tmp, b))
        for tmp, b in staged:
            tmp.rename(b)
    else:
        for a, b in moves:
            a.rename(b)
    return [(a.name, b.name) for a, b in moves]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs_dir", type=Path, help="a runs archive, e.g. docs/results/arena_stage2/runs")
    ap.add_argument("--dry-run", action="store_true", help="print old -> new without renaming")
    args = ap.parse_args(argv)
    try:
        changed = rename(args.runs_dir, dry_run=args.dry_run)
    except (NameClash, FileNotFoundError) as e:
        print(f"rename_runs: {e}", file=sys.stderr)
        return 1
    for old, new in changed:
        print(f"{old} -> {new}")
    verb = "would rename" if args.dry_run else "renamed"
    print(f"{verb} {len(changed)} run folders in {args.runs_dir}" if changed
          else f"nothing to rename in {args.runs_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
