"""Which checkpoint a run resumes from: ``ckpt_path`` as a file, a sharded folder, ``last`` or ``resume``.

Light on purpose (no Lightning, no model code): ``src/train.py``'s dry run resolves
``ckpt_path=last`` with it before anything heavy is imported.
"""

from __future__ import annotations

import logging
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

    def mtime(p: Path) -> float:
        meta = p / "meta.pt"
        return (meta if p.is_dir() and meta.exists() else p).stat().st_mtime

    return max(found, key=mtime)


def resolve_ckpt_path(c: dict[str, Any]) -> Path | None:
    """``ckpt_path`` as a path; None if unset.

    ``last`` finds the newest run of ``task_name``. ``resume`` is this run folder's own
    ``checkpoints/last.ckpt`` when it exists and a fresh start when it does not: what makes a
    multirun with a fixed ``hydra.sweep.dir`` (each job's folder named by its overrides) resumable
    by running the same command again; jobs that had finished resume at their end and stop.
    """
    value = c.get("ckpt_path")
    if not value:
        return None
    if str(value) == "last":
        return find_last_checkpoint(c["paths"]["log_dir"], c["task_name"])
    if str(value) == "resume":
        own = Path(c["paths"]["output_dir"]) / "checkpoints" / "last.ckpt"
        return own if own.exists() else None
    path = Path(str(value))
    if not path.exists():
        raise ConfigError(f"ckpt_path={value!r} does not exist")
    return path


RESULTS_FILE = "rl_results.json"


def finished_results(c: dict[str, Any]) -> dict[str, Any] | None:
    """With ``ckpt_path=resume``: the results a finished run recorded, so that it is left as it is.

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
    import json

    if str(c.get("ckpt_path")) != "resume":
        return None
    out = Path(c["paths"]["output_dir"])
    record = out / RESULTS_FILE
    if not record.exists():
        return None
    results = json.loads(record.read_text())
    done, wanted = int(results.get("iterations_done", -1)), c["rl"]["iterations"]
    last = out / "checkpoints" / "last.ckpt"
    if last.exists() and (done < wanted or checkpoint_iteration(last) != done):
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
    import torch

    meta = path / "meta.pt" if path.is_dir() else path
    state = torch.load(meta, map_location="cpu", weights_only=True, mmap=not path.is_dir())
    return int(state.get("arl", {}).get("iteration", 0))
