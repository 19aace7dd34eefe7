"""Which checkpoint a run resumes from: ``ckpt_path`` as a file, a sharded folder, ``last`` or ``resume``.

Light on purpose (no Lightning, no model code): ``src/train.py``'s dry run resolves
``ckpt_path=last`` with it before anything heavy is imported.
"""

from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path
from typing import Any

from arl.utils.config import ConfigError

log = logging.getLogger(__name__)


def find_last_checkpoint(log_dir: str | Path, task_name: str) -> Path:
    """The newest ``<log_dir>/<task_name>/runs/*/checkpoints/last.ckpt`` (a file or a sharded folder)."""
    root = Path(log_dir) / task_name / "runs"
    found = list(root.glob("*/checkpoints/last.ckpt"))
    if not found:
        raise ConfigError(
            f"ckpt_path=last: no checkpoint of task {task_name!r} found ({root}/*/checkpoints/last.ckpt); "
            "pass ckpt_path=<file> or check task_name and paths.log_dir"
        )
    return max(found, key=_checkpoint_mtime)


def _checkpoint_mtime(path: Path) -> float:
    """When a checkpoint was written: its file's time, or its sharded folder's ``meta.pt``'s."""
    meta = path / "meta.pt"
    return (meta if path.is_dir() and meta.exists() else path).stat().st_mtime


def checkpoint_problem(path: Path) -> str | None:
    """Why ``path`` is not a checkpoint this project can resume from (None when it can be read).

    A checkpoint file is a ``torch.save`` zip archive (its ``data.pkl`` listed in the archive's
    directory, which sits at its end, so a truncated file has none); a sharded checkpoint is a
    folder whose ``meta.pt`` is one. Reads the archive's directory only: seconds at most, whatever
    the checkpoint's size.
    """
    if path.is_dir():
        meta = path / "meta.pt"
        if not meta.is_file():
            return f"{path} is a folder without meta.pt, not a sharded checkpoint"
        return checkpoint_problem(meta)
    if not path.is_file():
        return f"{path} does not exist"
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except Exception as err:  # noqa: BLE001 - a damaged archive raises more than BadZipFile
        return f"{path} is not a checkpoint ({type(err).__name__}: {err}; a truncated or damaged file, or another kind of file)"
    if not any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
        return f"{path} is a zip archive but not a torch.save checkpoint (no data.pkl)"
    return None


def newest_valid_checkpoint(folder: Path, other_than: Path | None = None) -> Path | None:
    """The newest readable ``*.ckpt`` in ``folder`` (a run's ``checkpoints/``: ``last.ckpt`` and
    the ``best-iter<k>.ckpt`` of the best validation), leaving out ``other_than``."""
    if not folder.is_dir():
        return None
    found = {}
    for p in folder.glob("*.ckpt"):
        try:  # a dangling link, or a file removed while the folder is read, is no candidate
            if other_than is None or p.resolve() != other_than.resolve():
                found[p] = _checkpoint_mtime(p)
        except OSError:
            continue
    for candidate in sorted(found, key=found.get, reverse=True):
        if checkpoint_problem(candidate) is None:
            return candidate
    return None


def checked_checkpoint(path: Path, value: Any) -> Path:
    """``path`` when it is a readable checkpoint; else a ConfigError naming it and offering the
    newest readable checkpoint beside it."""
    problem = checkpoint_problem(path)
    if problem is None:
        return path
    other = newest_valid_checkpoint(path.resolve().parent, other_than=path)
    offer = (f"the newest readable checkpoint of this run is {other}: pass ckpt_path={other}" if other is not None
             else f"no other readable checkpoint in {path.parent}")
    raise ConfigError(f"ckpt_path={value}: {problem}; {offer}")


def resolve_ckpt_path(value: str | None, log_dir: str, task_name: str, output_dir: str) -> Path | None:
    """The ``ckpt_path`` setting ``value`` as a path; None if unset (``log_dir`` and ``output_dir``:
    ``paths.log_dir`` and ``paths.output_dir``).

    Every checkpoint it returns has been checked (:func:`checkpoint_problem`): a truncated or foreign
    file stops the run at once, naming the file and the newest readable checkpoint beside it.

    ``last`` finds the newest run of ``task_name``. ``resume`` is this run folder's own
    ``checkpoints/last.ckpt`` when it exists and a fresh start when it does not: what makes a
    multirun with a fixed ``hydra.sweep.dir`` (each job's folder named by its overrides) resumable
    by running the same command again; jobs that had finished resume at their end and stop.
    """
    if not value:
        return None
    if str(value) == "last":
        return checked_checkpoint(find_last_checkpoint(log_dir, task_name), value)
    if str(value) == "resume":
        own = Path(output_dir) / "checkpoints" / "last.ckpt"
        return checked_checkpoint(own, value) if own.exists() else None
    path = Path(str(value))
    if not path.exists():
        raise ConfigError(f"ckpt_path={value!r} does not exist")
    return checked_checkpoint(path, value)


RESULTS_FILE = "rl_results.json"


def finished_results(ckpt_path: str | None, output_dir: str, iterations: int) -> dict[str, Any] | None:
    """With ``ckpt_path=resume``: the results the finished run in ``output_dir`` recorded, so that
    it is left as it is (``iterations``: ``rl.iterations``).

    A run that reached ``rl.iterations`` writes ``<run>/rl_results.json`` as its last act. Running the
    same multirun command again must leave such a run alone, whether the folder still holds its
    final ``checkpoints/last.ckpt`` or not (archived, carried to another machine by
    ``scripts/carry.py``, or checkpoints deleted to save disk): the recorded results are returned.
    (Resuming from the final checkpoint instead would train nothing but reload the run, add an empty
    event file and rewrite the record without its ``val_before_rl``.)

    None when the run has not finished, or when its checkpoint is there and training goes on from
    it (``rl.iterations`` raised since, or a checkpoint newer than the record); a ConfigError when it
    finished short of a since raised ``rl.iterations`` without its checkpoint.
    """
    if str(ckpt_path) != "resume":
        return None
    out = Path(output_dir)
    record = out / RESULTS_FILE
    if not record.exists():
        return None
    results = json.loads(record.read_text())
    done, wanted = int(results.get("iterations_done", -1)), iterations
    last = out / "checkpoints" / "last.ckpt"
    problem = checkpoint_problem(last) if last.exists() and done >= wanted else None
    if problem is not None:
        log.warning("ckpt_path=resume: %s finished (%s); its checkpoints/last.ckpt cannot be read (%s)",
                    out, RESULTS_FILE, problem)
        return results  # finished runs are left as they are
    if last.exists() and (done < wanted or checkpoint_iteration(checked_checkpoint(last, "resume")) != done):
        return None  # train on from the checkpoint
    if done < wanted:  # training on would start over from the start policy and overwrite the run
        raise ConfigError(
            f"ckpt_path=resume: {out} finished at iteration {done} ({RESULTS_FILE}) and rl.iterations is now "
            f"{wanted}, but its checkpoints/last.ckpt is gone, so it cannot go on; put the checkpoint back "
            "or give the longer run another folder"
        )
    if done > wanted:
        log.warning(
            "ckpt_path=resume: %s finished at iteration %d (%s), more than rl.iterations=%d now; "
            "its results are those of the longer run", out, done, RESULTS_FILE, wanted,
        )
    return results


def checkpoint_iteration(path: Path) -> int:
    """The RL iteration a checkpoint was written at (file, or sharded folder's ``meta.pt``)."""
    import torch  # heavy: this module stays light for train.py's dry run (see its docstring)

    meta = path / "meta.pt" if path.is_dir() else path
    state = torch.load(meta, map_location="cpu", weights_only=True, mmap=not path.is_dir())
    return int(state.get("arl", {}).get("iteration", 0))
