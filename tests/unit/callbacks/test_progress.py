"""IterationLog: a BC fit prints a progress line every twentieth of its optimiser steps."""

from __future__ import annotations

import re

import torch
from lightning import LightningModule, Trainer
from torch.utils.data import DataLoader

from arl.callbacks import IterationLog
from arl.callbacks.progress import BC_LINES
from arl.utils.logging import console


class _Regression(LightningModule):  # the fit the callback watches: one linear layer, logs bc/loss
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        loss = (self.layer(batch) ** 2).mean()
        self.log("bc/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_bc_fit_prints_twenty_progress_lines_with_the_loss():
    data = DataLoader(torch.randn(200, 2), batch_size=2)  # 100 steps an epoch
    trainer = Trainer(max_epochs=2, callbacks=[IterationLog()], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    with console.capture() as out:
        trainer.fit(_Regression(), data)
    lines = [line for line in out.get().splitlines() if line.startswith("bc step")]
    steps = [int(re.match(r"bc step (\d+)/200", line).group(1)) for line in lines]
    assert steps == list(range(10, 200, 10)) and len(steps) == BC_LINES - 1  # the last step is the epoch line's
    assert all(re.search(r"loss \d+\.\d{4} \| \d+s, about \d+s left", line) for line in lines)
    assert sum(line.startswith("bc epoch") for line in out.get().splitlines()) == 2
