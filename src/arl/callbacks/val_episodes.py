"""Every validation's episodes, one JSON line each: which held-out task, won or not, turn by turn.

``<dirpath>/iter<k>.jsonl`` after the validation at RL iteration ``k`` (0: before RL), one line per
episode (a failed one too: ``env_error`` true, ``won`` false), sorted by task seed: ``seed``, ``task_type``, ``won``,
``return``, ``turns``, ``valid_turns`` and, since the episode viewer (``src/view.py``), the rest of
:func:`arl.agent.records.episode_record` (``turn_log``: observation, response, action, reward per
turn). Validation plays the same seeds every time, so two files of
a run pair up game by game (``arl.analysis.games.paired_games``): what RL won and lost on each held-out
game, a much finer comparison than two success rates. Under DDP/FSDP the ranks' shares are
gathered and rank 0 writes (to a temporary name, then renamed). A resumed run drops the files of
iterations after its checkpoint, as TensorBoard drops their steps: the run that wrote them is
not the one that continues.

Beside the curves, each validation also logs a few of its episodes as TensorBoard text
(``val_samples/<task type>/won`` and ``/lost``): per task type one won and one lost episode, drawn
with the run's seed and the iteration (:func:`sample_episodes`), so a reader sees what changed next
to ``val/success_rate``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from lightning import Callback

from arl.distributed import ranks as dist_utils
from arl.utils.episode_files import episodes_file, iteration_of


def validation_records(batch) -> list[dict[str, Any]]:
    """The per-episode rows of one :class:`~arl.datamodules.batches.ValidationBatch`: its
    ``records`` (turns included) when it has them, else the summary of its result tensors."""
    if getattr(batch, "records", ()):
        return [dict(record) for record in batch.records]
    r = {k: v.tolist() for k, v in batch.results.items()}
    n = len(r["won"])
    seeds = list(batch.seeds) or [None] * n
    types = list(batch.task_types) or [""] * n
    return [
        {"seed": seeds[i], "task_type": types[i], "won": bool(r["won"][i]), "return": float(r["ret"][i]),
         "turns": int(r["turns"][i]), "valid_turns": int(r["valid_turns"][i])}
        for i in range(n)
    ]


def sample_episodes(rows: list[dict[str, Any]], seed: int, iteration: int) -> list[tuple[str, dict[str, Any]]]:
    """Per task type (sorted), one won and one lost episode of ``rows``, drawn by a generator seeded
    with (``seed``, ``iteration``): ``[(tag, row), ...]`` with tags ``<task type>/won`` and
    ``<task type>/lost`` (a task type with no won or no lost episode has no such tag)."""
    rng = random.Random(f"{int(seed)}:{int(iteration)}")
    out = []
    for task_type in sorted({str(row.get("task_type") or "all") for row in rows}):
        of_type = [row for row in rows if str(row.get("task_type") or "all") == task_type]
        for outcome, won in (("won", True), ("lost", False)):
            pool = [row for row in of_type if bool(row["won"]) is won]
            if pool:
                out.append((f"{task_type}/{outcome}", pool[rng.randrange(len(pool))]))
    return out


def _block(text: str, limit: int) -> str:
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + f" ... ({len(text) - limit} more characters)"
    return "\n".join("    " + line for line in text.splitlines() or [""])


def episode_markdown(row: dict[str, Any], limit: int = 2000) -> str:
    """One episode row as Markdown for TensorBoard's text tab: the summary line, then each turn's
    observation and response (indented code, cut at ``limit`` characters), action and reward."""
    head = (f"**{'won' if row['won'] else 'lost'}**, task seed {row.get('seed')}, {row.get('task_type') or 'all'}: "
            f"return {float(row['return']):+.2f}, {row['turns']} turns, {row['valid_turns']} valid")
    parts = [head]
    log = row.get("turn_log")
    if log is None:
        parts.append("(this file holds the summary only: no turns)")
    for i, turn in enumerate(log or [], start=1):
        action = f"`{turn['action']}`" if turn.get("valid") else f"invalid ({turn.get('reason') or 'unparsed'})"
        parts.append(f"**turn {i}**: {action}, reward {float(turn['reward']):+.2f}")
        parts.append("observation:\n\n" + _block(turn.get("observation", ""), limit))
        parts.append("response:\n\n" + _block(turn.get("response", ""), limit))
    return "\n\n".join(parts)


class ValidationEpisodes(Callback):
    """Writes ``<dirpath>/iter<k>.jsonl`` after each validation of the RL stage and logs
    ``text_samples`` (a won and a lost episode per task type, drawn with ``seed``) as TensorBoard
    text."""

    def __init__(self, dirpath: str | Path, text_samples: bool = True, seed: int = 0):
        self.dirpath = Path(dirpath)
        self.text_samples = bool(text_samples)
        self.seed = int(seed)
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
        self.write(trainer, rows, int(getattr(pl_module, "iteration", 0)))

    def write(self, trainer, rows: list[dict[str, Any]], iteration: int) -> Path:
        """Write ``rows`` as iteration ``iteration``'s file (a temporary name, then renamed) and log
        their text samples; also how a validation played by another run is adopted
        (:mod:`arl.run.start_validation`). Returns the file's path."""
        self.dirpath.mkdir(parents=True, exist_ok=True)
        path = episodes_file(self.dirpath, iteration)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
        os.replace(tmp, path)
        if self.text_samples:
            self._log_samples(trainer, rows, iteration)
        return path

    def _log_samples(self, trainer, rows: list[dict[str, Any]], iteration: int) -> None:
        writers = [lg.experiment for lg in getattr(trainer, "loggers", []) if hasattr(lg.experiment, "add_text")]
        if not writers:
            return
        for tag, row in sample_episodes(rows, self.seed, iteration):
            text = episode_markdown(row)
            for writer in writers:
                writer.add_text(f"val_samples/{tag}", text, global_step=iteration)
