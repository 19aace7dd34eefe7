"""Expert turns -> tokenised SFT batches (behaviour cloning, the paper's first stage)."""

from __future__ import annotations

from typing import Sequence

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader

from arl.agent.records import Episode
from arl.agent.samples import TokenSample, build_samples, collate_tokens


class SFTDataModule(LightningDataModule):
    """Map-style batches of expert samples (one per turn, or one per episode in ``trajectory`` mode).

    Args:
        episodes: expert episodes (only successful ones are used unless ``keep_failed``).
        pad_id: padding token id.
        batch_size: samples per optimiser step.
        val_fraction: share of episodes held out for ``bc/val_loss``.
        seed: shuffling seed.
        sample_mode: ``turn`` or ``trajectory``, as the episodes were recorded.
    """

    def __init__(
        self,
        episodes: Sequence[Episode],
        pad_id: int,
        batch_size: int = 32,
        val_fraction: float = 0.05,
        seed: int = 0,
        keep_failed: bool = False,
        sample_mode: str = "turn",
    ):
        super().__init__()
        eps = [e for e in episodes if e.won or keep_failed]
        n_val = int(round(len(eps) * val_fraction))
        self.val_samples: list[TokenSample] = build_samples(eps[:n_val], sample_mode)[0]
        self.train_samples: list[TokenSample] = build_samples(eps[n_val:], sample_mode)[0]
        if not self.train_samples:
            raise ValueError("behaviour cloning has no training samples: the expert won no episode")
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.seed = seed

    def _collate(self, samples):
        return collate_tokens(samples, self.pad_id)

    def train_dataloader(self) -> DataLoader:
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_samples, batch_size=self.batch_size, shuffle=True, generator=gen, collate_fn=self._collate)

    def val_dataloader(self) -> DataLoader | list:
        if not self.val_samples:
            return []
        return DataLoader(self.val_samples, batch_size=self.batch_size, shuffle=False, collate_fn=self._collate)

    @property
    def steps_per_epoch(self) -> int:
        return -(-len(self.train_samples) // self.batch_size)
