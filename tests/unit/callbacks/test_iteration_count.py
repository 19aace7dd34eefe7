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


class _Copying:
    """An engine holding its own copy of the weights: records the iteration each sync loaded."""

    def __init__(self, module):
        self.module = module
        self.synced: list[int] = []

    def sync(self, policy):
        self.synced.append(self.module.iteration)


class _WithPolicy(_Iterations):
    def __init__(self):
        super().__init__()
        self.policy = self.layer

    def validation_step(self, batch, batch_idx):
        return None


class _PlannedWithValidation(_Planned):
    def val_dataloader(self):
        return DataLoader(torch.randn(1, 2), batch_size=1)


def test_the_learners_engine_in_asynchronous_rl_is_loaded_before_each_validation_only():
    """Asynchronous RL: the learner's engine only validates, so it is loaded at the start, before each validation
    (every 3 iterations here) and at the end, not after each of the 7 updates; synchronous RL loads it after each."""
    from arl.callbacks.weight_sync import WeightSync

    syncs = {}
    for each_update in (True, False):
        module = _WithPolicy()
        engine = _Copying(module)
        trainer = Trainer(max_epochs=1, callbacks=[WeightSync(engine, each_update=each_update)], logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                          accelerator="cpu", val_check_interval=3, num_sanity_val_steps=0)
        trainer.fit(module, datamodule=_PlannedWithValidation())
        syncs[each_update] = engine.synced
    assert syncs[True] == list(range(ITERATIONS + 1))  # the start, then after every update
    assert syncs[False] == [0, 3, 6, ITERATIONS]  # the start, before the validations at 3 and 6, the end
