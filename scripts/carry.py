"""Carry a study's run folders to the next machine through storage that outlives this one, and back.

Where a machine lasts a few hours, a study of days goes on only if what resuming needs is kept
elsewhere (a mounted volume, a folder synced to an object store; not the repository, which takes
no generated file over 2 MB). ``save`` copies a study folder (a sweep, BC starts, their logs) into
such a folder, keeping what ``ckpt_path=resume`` and ``src/report.py`` read and leaving out what
is large and rebuilt:

* kept: the Hydra config, TensorBoard events, validation episodes, ``*_results.json``, text logs,
  a BC run's ``bc_policy_hf`` (the start of the RL runs), and ``checkpoints/last.ckpt`` of each run
  that has not finished (no ``rl_results.json``): weights, optimiser and RNG states, from which the
  run goes on exactly;
* left out: the checkpoints of finished runs (``rl_results.json`` marks them done, see
  ``arl.resume.finished_results``), best-iteration checkpoints (their name goes to
  ``best_checkpoint.txt``), RL runs' ``policy_hf`` unless ``--policies`` (to evaluate the final
  policies again later), BC datasets, and anything larger than ``--max-mb``.

``restore`` copies such a folder back under ``logs/``; it never replaces a file the destination
already has (a machine that kept running has the newer state). Then the study's own command
resumes it::

    python scripts/carry.py save logs/alfworld/study /mnt/keep/alfworld_study --policies
    # next machine
    python scripts/carry.py restore /mnt/keep/alfworld_study logs/alfworld/study
    BC=logs/alfworld/study/bc/bc_policy_hf OUT=logs/alfworld/study bash scripts/alfworld_study.sh
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

SKIP_NAMES = {"__pycache__", "bc_dataset.jsonl", ".ipynb_checkpoints"}


def _run_dir(path: Path, root: Path) -> Path | None:
    """The run folder (the one holding ``.hydra``) that ``path`` lies in, if any."""
    for parent in [path.parent, *path.parents]:
        if (parent / ".hydra").is_dir():
            return parent
        if parent == root:
            return None
    return None


def plan(src: Path, policies: bool = False, max_mb: float = 40.0) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The files of ``src`` that ``save`` copies, and those it leaves out with the reason.

    Paths are relative to ``src``; best-iteration checkpoints are listed as left out (their names
    are written to ``best_checkpoint.txt`` by ``save``).
    """
    keep: list[Path] = []
    left: list[tuple[Path, str]] = []
    for path in sorted(src.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(src)
        if SKIP_NAMES & set(rel.parts):
            left.append((rel, "rebuilt, not carried"))
            continue
        run = _run_dir(path, src)
        finished = run is not None and (run / "rl_results.json").exists()
        parts = path.relative_to(run).parts if run is not None else rel.parts
        if parts[0] == "checkpoints" and len(parts) > 1:
            name = parts[1]  # a checkpoint file, or the folder of a sharded one
            if name.startswith("best-"):
                left.append((rel, "best checkpoint: its name goes to best_checkpoint.txt"))
                continue
            if name != "last.ckpt":
                left.append((rel, "partial or old checkpoint"))
                continue
            if finished:
                left.append((rel, "finished run: rl_results.json marks it done"))
                continue
        if parts[0] == "policy_hf" and not policies:
            left.append((rel, "final policy (--policies keeps it)"))
            continue
        size_mb = path.stat().st_size / 2**20
        if size_mb > max_mb:
            left.append((rel, f"{size_mb:.0f} MB > --max-mb {max_mb:g}"))
            continue
        keep.append(rel)
    return keep, left


def save(src: Path, dest: Path, policies: bool = False, max_mb: float = 40.0) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Replace ``dest`` with the carried part of ``src`` (see :func:`plan`)."""
    keep, left = plan(src, policies, max_mb)
    if dest.exists():
        shutil.rmtree(dest)
    for rel in keep:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dest / rel)
    for rel, _ in left:  # name the best checkpoint of each run, as scripts/archive_runs.sh does
        parts = rel.parts
        if "checkpoints" in parts[:-1]:
            at = parts.index("checkpoints")
            if parts[at + 1].startswith("best-"):
                run = dest.joinpath(*parts[:at])
                run.mkdir(parents=True, exist_ok=True)
                (run / "best_checkpoint.txt").write_text(parts[at + 1] + "\n")
    return keep, left


def restore(src: Path, dest: Path) -> tuple[int, int]:
    """Copy the carried folder ``src`` into ``dest``; files ``dest`` has are left as they are.

    Returns (files copied, files already there).
    """
    copied = kept = 0
    for path in sorted(src.rglob("*")):
        if not path.is_file():
            continue
        target = dest / path.relative_to(src)
        if target.exists():
            kept += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied += 1
    return copied, kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="copy what resuming and the report need from SRC into DEST (replaced)")
    s.add_argument("src", type=Path)
    s.add_argument("dest", type=Path)
    s.add_argument("--policies", action="store_true", help="keep the RL runs' final policy_hf too")
    s.add_argument("--max-mb", type=float, default=40.0, help="leave out files larger than this (default 40)")
    r = sub.add_parser("restore", help="copy a carried folder back; never replaces a file")
    r.add_argument("src", type=Path)
    r.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        print(f"{args.src}: no such folder", file=sys.stderr)
        return 2
    if args.cmd == "save":
        keep, left = save(args.src, args.dest, args.policies, args.max_mb)
        size = sum((args.dest / rel).stat().st_size for rel in keep) / 2**20
        print(f"carried {len(keep)} files ({size:.1f} MB) of {args.src} into {args.dest}; left out {len(left)}:")
        reasons: dict[str, int] = {}
        for _, why in left:
            reasons[why] = reasons.get(why, 0) + 1
        for why, n in sorted(reasons.items()):
            print(f"  {n:5d}  {why}")
    else:
        copied, kept = restore(args.src, args.dest)
        print(f"restored {copied} files of {args.src} into {args.dest} ({kept} already there, left as they were)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
