"""The callbacks that need the RL stage's iteration count read it from the rollout DataModule's plan: the
checkpoint after the last iteration is written however ``every`` falls, and the progress line says how many."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from lightning import LightningDataModule, LightningModule, Trainer
from torch.utils.data import DataLoader

from arl.callbacks import IterationLog
from arl.callbacks.checkpoint import IterationCheckpoint
from arl.utils.logging import console

ITERATIONS = 7


class _Iterations(LightningModule):
    """One optimiser step a batch, counted as ``iteration`` like the RL module does, with its metrics."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.iteration = 0
        self.last_metrics: dict[str, float] = {}

    def training_step(self, batch, batch_idx):
        self.iteration += 1
        self.last_metrics = {"rollout/success_rate": 0.5}
        return (self.layer(batch) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Planned(LightningDataModule):
    """A DataModule that knows its iteration count the way the rollout DataModule does: ``plan.iterations``."""

    def __init__(self):
        super().__init__()
        self.plan = SimpleNamespace(iterations=ITERATIONS)

    def train_dataloader(self):
        return DataLoader(torch.randn(ITERATIONS, 2), batch_size=1)


def test_the_last_iteration_is_checkpointed_and_the_progress_line_counts_to_it(tmp_path):
    checkpoint = IterationCheckpoint(str(tmp_path), every=3)
    trainer = Trainer(max_epochs=1, callbacks=[checkpoint, IterationLog()], logger=False, enable_checkpointing=True,
                      enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    with console.capture() as out:
        trainer.fit(_Iterations(), datamodule=_Planned())
    assert checkpoint.last_saved_iteration == ITERATIONS  # 3, 6, then the last one though 7 % 3 != 0
    assert (tmp_path / "last.ckpt").exists()
    lines = [line for line in out.get().splitlines() if line.startswith("it ")]
    assert lines[0].startswith("it 1/7") and lines[-1].startswith("it 7/7")
