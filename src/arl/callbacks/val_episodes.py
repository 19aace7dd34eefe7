"""Every validation's episodes, one JSON line each: which held-out task, won or not.

``<dirpath>/iter<k>.jsonl`` after the validation at RL iteration ``k`` (0: before RL), one line per
episode without an environment error, sorted by task seed: ``seed``, ``task_type``, ``won``,
``return``, ``turns``, ``valid_turns``. Validation plays the same seeds every time, so two files of
a run pair up game by game (``arl.analysis.games.paired_games``): what RL won and lost on each held-out
game, a much finer comparison than two success rates. Under DDP/FSDP the ranks' shares are
gathered and rank 0 writes (to a temporary name, then renamed). A resumed run drops the files of
iterations after its checkpoint, as TensorBoard drops their steps: the run that wrote them is
not the one that continues.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lightning import Callback

from arl.utils import distributed as dist_utils
from arl.utils.episode_files import episodes_file, iteration_of


def validation_records(batch) -> list[dict[str, Any]]:
    """The per-episode rows of one :class:`~arl.datamodules.batches.ValidationBatch`."""
    r = {k: v.tolist() for k, v in batch.results.items()}
    n = len(r["won"])
    seeds = list(batch.seeds) or [None] * n
    types = list(batch.task_types) or [""] * n
    return [
        {"seed": seeds[i], "task_type": types[i], "won": bool(r["won"][i]), "return": float(r["ret"][i]),
         "turns": int(r["turns"][i]), "valid_turns": int(r["valid_turns"][i])}
        for i in range(n)
    ]


class ValidationEpisodes(Callback):
    """Writes ``<dirpath>/iter<k>.jsonl`` after each validation of the RL stage."""

    def __init__(self, dirpath: str | Path):
        self.dirpath = Path(dirpath)
        self._rows: list[dict[str, Any]] = []

    def on_train_start(self, trainer, pl_module):
        """After a resume: drop the files of the iterations after the checkpoint's."""
        if not trainer.is_global_zero or not self.dirpath.is_dir():
            return
        done = int(getattr(pl_module, "iteration", 0))
        for path in self.dirpath.glob("iter*.jsonl"):
            k = iteration_of(path)
            if k is not None and k > done:
                path.unlink()

    def on_validation_epoch_start(self, trainer, pl_module):
        self._rows = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if hasattr(batch, "results"):
            self._rows.extend(validation_records(batch))

    def on_validation_epoch_end(self, trainer, pl_module):
        shares = dist_utils.all_gather_object(self._rows)
        self._rows = []
        if not trainer.is_global_zero or trainer.sanity_checking:
            return
        rows = sorted((row for share in shares for row in share), key=lambda row: (row["seed"] is None, row["seed"] or 0))
        self.dirpath.mkdir(parents=True, exist_ok=True)
        path = episodes_file(self.dirpath, int(getattr(pl_module, "iteration", 0)))
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
        os.replace(tmp, path)
