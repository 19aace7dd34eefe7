"""Carry a study's run folders to the next machine through storage that outlives this one, and back.

Where a machine lasts a few hours, a study of days goes on only if what resuming needs is kept
elsewhere (a mounted volume, a folder synced to an object store; not the repository, which takes
no generated file over 2 MB). ``save`` copies a study folder (a sweep, BC starts, their logs) into
such a folder, keeping what ``ckpt_path=resume`` and ``src/report.py`` read and leaving out what
is large and rebuilt:

* kept: the Hydra config, TensorBoard events, validation episodes, ``*_results.json``, text logs,
  a BC run's ``bc_policy_hf`` (the start of the RL runs), and ``checkpoints/last.ckpt`` of each run
  that has not finished: weights, optimiser and RNG states, from which the run goes on exactly;
* left out: the checkpoints of finished runs (``rl_results.json`` marks them done when it records
  the iterations the run's config asks for, see ``arl.run.resume.finished_results``), best-iteration
  checkpoints (their name goes to ``best_checkpoint.txt``), RL runs' ``policy_hf`` unless
  ``--policies`` (to evaluate the final policies again later), BC datasets, and other files larger
  than ``--max-mb``. A policy folder and a ``last.ckpt`` (a file, or a folder of shards) are carried
  whole whatever their size: a start or a checkpoint with a part missing would look present and fail
  (or silently differ) on the next machine.

``save`` never leaves a half-written copy in place of a good one: it writes ``DEST.partial``, puts
a marker (``.carried.json``) in it last, and only then swaps it for ``DEST`` (the old copy is
``DEST.previous`` until the swap is done). It refuses a ``DEST`` that overlaps ``SRC`` or that
exists without the marker (a live study typed in the wrong place is not replaced).

``restore`` copies a marked folder back under ``logs/``; it never replaces a file the destination
already has (a machine that kept running has the newer state), writes each file under a temporary
name first (an interrupted restore leaves no truncated checkpoint behind), and names the files
that differ from the carried ones, warning when a start policy does (runs restored beside another
start would not be paired). Then the study's own command resumes it::

    python scripts/carry.py save logs/alfworld/study /mnt/keep/alfworld_study --policies
    # next machine
    python scripts/carry.py restore /mnt/keep/alfworld_study logs/alfworld/study
    BC=logs/alfworld/study/bc/bc_policy_hf OUT=logs/alfworld/study bash scripts/alfworld_study.sh
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import sys
import time
from pathlib import Path

SKIP_NAMES = {"__pycache__", "bc_dataset.jsonl", ".ipynb_checkpoints"}
MARKER = ".carried.json"
POLICY_DIRS = {"bc_policy_hf", "policy_hf"}


class CarryError(RuntimeError):
    """A save or restore that would lose data; the message says why."""


def _run_dir(path: Path, root: Path) -> Path | None:
    """The run folder (the one holding ``.hydra``) that ``path`` lies in, if any."""
    for parent in [path.parent, *path.parents]:
        if (parent / ".hydra").is_dir():
            return parent
        if parent == root:
            return None
    return None


def run_finished(run: Path) -> bool:
    """Whether ``run`` finished: its ``rl_results.json`` records at least the ``rl.iterations`` of
    its config (a finished run resumed for more iterations is not finished, even if its old record
    is still there)."""
    record = run / "rl_results.json"
    if not record.is_file():
        return False
    try:
        done = int(json.loads(record.read_text()).get("iterations_done", -1))
    except (ValueError, json.JSONDecodeError):
        return False  # a torn record: keep the checkpoint
    config = run / ".hydra" / "config.yaml"
    if not config.is_file():
        return True
    import yaml

    wanted = ((yaml.safe_load(config.read_text()) or {}).get("rl") or {}).get("iterations")
    return wanted is None or done >= int(wanted)


def plan(src: Path, policies: bool = False, max_mb: float = 40.0) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The files of ``src`` that ``save`` copies, and those it leaves out with the reason.

    Paths are relative to ``src``; best-iteration checkpoints are listed as left out (their names
    are written to ``best_checkpoint.txt`` by ``save``).
    """
    keep: list[Path] = []
    left: list[tuple[Path, str]] = []
    finished: dict[Path, bool] = {}
    for path in sorted(src.rglob("*")):
        if not path.is_file() or path.name == MARKER:
            continue
        rel = path.relative_to(src)
        if SKIP_NAMES & set(rel.parts):
            left.append((rel, "rebuilt, not carried"))
            continue
        run = _run_dir(path, src)
        if run is not None and run not in finished:
            finished[run] = run_finished(run)
        parts = path.relative_to(run).parts if run is not None else rel.parts
        whole = bool(POLICY_DIRS & set(rel.parts[:-1]))  # a part of a policy folder
        if parts[0] == "checkpoints" and len(parts) > 1:
            name = parts[1]  # a checkpoint file, or the folder of a sharded one
            if name.startswith("best-"):
                left.append((rel, "best checkpoint: its name goes to best_checkpoint.txt"))
                continue
            if name != "last.ckpt":
                left.append((rel, "partial or old checkpoint"))
                continue
            if finished[run]:
                left.append((rel, "finished run: rl_results.json marks it done"))
                continue
            whole = True
        if parts[0] == "policy_hf" and not policies:
            left.append((rel, "final policy (--policies keeps it)"))
            continue
        size_mb = path.stat().st_size / 2**20
        if size_mb > max_mb and not whole:
            left.append((rel, f"{size_mb:.0f} MB > --max-mb {max_mb:g}"))
            continue
        keep.append(rel)
    return keep, left


def _overlap(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def save(src: Path, dest: Path, policies: bool = False, max_mb: float = 40.0) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Replace the carried folder ``dest`` with the carried part of ``src`` (see :func:`plan`).

    The copy is written to ``dest.partial`` and swapped in once complete; ``dest`` must be absent
    or an earlier ``save``'s folder (with its marker), and must not overlap ``src``.
    """
    if _overlap(src, dest):
        raise CarryError(f"{dest} and {src} overlap: save copies a study to another place (restore brings it back)")
    if dest.exists() and not (dest / MARKER).is_file():
        raise CarryError(
            f"{dest} exists and was not written by `carry.py save` (no {MARKER}); refusing to replace it "
            "(did you mean `restore`?)"
        )
    keep, left = plan(src, policies, max_mb)
    partial = dest.with_name(dest.name + ".partial")
    previous = dest.with_name(dest.name + ".previous")
    if partial.exists():
        shutil.rmtree(partial)  # an interrupted earlier save
    for rel in keep:
        (partial / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, partial / rel)
    for rel, _ in left:  # name the best checkpoint of each run, as scripts/archive_runs.sh does
        parts = rel.parts
        if "checkpoints" in parts[:-1]:
            at = parts.index("checkpoints")
            if parts[at + 1].startswith("best-"):
                run = partial.joinpath(*parts[:at])
                run.mkdir(parents=True, exist_ok=True)
                (run / "best_checkpoint.txt").write_text(parts[at + 1] + "\n")
    partial.mkdir(parents=True, exist_ok=True)
    marker = {"source": str(src.resolve()), "saved": time.strftime("%Y-%m-%d %H:%M:%S"), "files": len(keep),
              "policies": policies, "max_mb": max_mb}
    (partial / MARKER).write_text(json.dumps(marker, indent=2) + "\n")  # written last: the copy is complete
    if previous.exists():
        shutil.rmtree(previous)
    if dest.exists():
        os.replace(dest, previous)
    os.replace(partial, dest)
    if previous.exists():
        shutil.rmtree(previous)
    return keep, left


def restore(src: Path, dest: Path) -> tuple[int, int, list[Path]]:
    """Copy the carried folder ``src`` into ``dest``; files ``dest`` has are left as they are.

    Returns (files copied, files already there, those of them that differ from the carried ones).
    """
    if not (src / MARKER).is_file():
        hint = ""
        for sibling in (src.with_name(src.name + ".previous"), src.with_name(src.name + ".partial")):
            if (sibling / MARKER).is_file():
                hint = f"; {sibling} is a complete copy (a save was interrupted while swapping it in)"
        raise CarryError(f"{src} is not a complete `carry.py save` folder (no {MARKER}){hint}")
    if _overlap(src, dest):
        raise CarryError(f"{dest} and {src} overlap")
    copied = kept = 0
    differ: list[Path] = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if not path.is_file() or rel == Path(MARKER):
            continue
        target = dest / rel
        if target.exists():
            kept += 1
            if not filecmp.cmp(path, target, shallow=False):
                differ.append(rel)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".restoring")
        shutil.copy2(path, tmp)
        os.replace(tmp, target)  # never a truncated file under the real name
        copied += 1
    return copied, kept, differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="copy what resuming and the report need from SRC into DEST (replaced)")
    s.add_argument("src", type=Path)
    s.add_argument("dest", type=Path)
    s.add_argument("--policies", action="store_true", help="keep the RL runs' final policy_hf too")
    s.add_argument("--max-mb", type=float, default=40.0,
                   help="leave out other files larger than this (default 40); policies and last.ckpt go whole")
    r = sub.add_parser("restore", help="copy a carried folder back; never replaces a file")
    r.add_argument("src", type=Path)
    r.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        print(f"{args.src}: no such folder", file=sys.stderr)
        return 2
    try:
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
            copied, kept, differ = restore(args.src, args.dest)
            print(f"restored {copied} files of {args.src} into {args.dest} ({kept} already there, left as they were; "
                  f"{len(differ)} of them differ from the carried copy)")
            for rel in differ[:20]:
                print(f"  differs, kept: {rel}")
            starts = sorted({str(Path(*rel.parts[: rel.parts.index(d) + 1]))
                             for rel in differ for d in POLICY_DIRS if d in rel.parts[:-1]})
            if starts:
                print(f"warning: the destination holds another policy than the carried one in {', '.join(starts)}: "
                      "runs resumed from the carried checkpoints started from the carried policy, so they would not "
                      "pair with new runs from this one", file=sys.stderr)
    except CarryError as err:
        print(f"carry.py {args.cmd}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
