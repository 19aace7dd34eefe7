"""Behaviour cloning's batches under data parallelism: every rank takes its share of the global
batches one process would see (GlobalBatchShares), and the loss divides by the global batch's
response tokens."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, RandomSampler

from arl.agent.samples import TokenSample, collate_tokens
from arl.datamodules.sft_datamodule import GlobalBatchShares, SFTDataModule
from arl.modules.sft_module import response_nll


def _sample(i: int, response: int) -> TokenSample:
    return TokenSample([i + 1] * (2 + response), [0.0, 0.0] + [1.0] * response, [0.0] * (2 + response),
                       [-1, -1] + [0] * response, i, i)


def _module(samples, batch_size=5, seed=3) -> SFTDataModule:
    dm = SFTDataModule.__new__(SFTDataModule)  # the samples directly, no episodes to build them from
    dm.train_samples, dm.val_samples, dm.pad_id, dm.batch_size, dm.seed = samples, [], 0, batch_size, seed
    return dm


def test_one_process_sees_the_batches_of_a_shuffling_dataloader():
    """World 1: the batches, epoch after epoch, of the ``DataLoader(shuffle=True)`` with the seed that
    behaviour cloning used before it was sharded (a single-process run is unchanged)."""
    for n in (23, 25):  # a short last batch, and none
        samples = [_sample(i, 1 + i % 3) for i in range(n)]
        old = DataLoader(samples, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(3),
                         collate_fn=lambda b: collate_tokens(b, 0))
        new = _module(samples).train_dataloader()
        assert len(new) == len(old) == 5
        for _epoch in range(3):  # len() batches an epoch, as a Trainer takes them
            for a, b in zip(itertools.islice(old, len(old)), itertools.islice(new, len(new)), strict=True):
                assert torch.equal(a["input_ids"], b["input_ids"])
                assert b["loss_tokens"].item() == a["response_mask"].sum().item()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), batch=st.integers(1, 8), world=st.integers(1, 4), seed=st.integers(0, 99))
def test_shares_add_up_to_the_global_batches(n, batch, world, seed):
    tokens = [(i * 7) % 5 + 1 for i in range(n)]

    def batches(rank, ranks):
        return list(GlobalBatchShares(RandomSampler(range(n), generator=torch.Generator().manual_seed(seed)), tokens,
                                      batch, rank, ranks))

    alone = batches(0, 1)
    per_rank = [batches(r, world) for r in range(world)]
    assert all(len(b) == len(alone) == -(-n // batch) for b in per_rank)  # every rank runs every step
    for k, whole in enumerate(alone):
        joined = [item for r in range(world) for item in per_rank[r][k] if item[1] == 1.0]
        assert [i for i, _, _ in joined] == [i for i, _, _ in whole]  # contiguous shares, rank order
        total = sum(tokens[i] for i, _, _ in whole)
        assert all(t == total for r in range(world) for _, _, t in per_rank[r][k])


def test_an_empty_share_is_one_item_of_weight_zero():
    # 5 samples, batch 4, 3 ranks: the last batch holds 1 sample; ranks 0 and 1 get nothing of it
    last = [list(GlobalBatchShares(range(5), [2] * 5, 4, r, 3))[-1] for r in range(3)]
    assert last == [[(4, 0.0, 2)], [(4, 0.0, 2)], [(4, 1.0, 2)]]


def test_the_collated_share_scores_against_the_global_token_count():
    samples = [_sample(i, r) for i, r in enumerate([3, 1, 2, 4])]
    batch = _module(samples)._collate_share([(samples[0], 1.0, 10), (samples[1], 0.0, 10)])
    assert batch["loss_tokens"].item() == 10.0
    assert batch["response_mask"].sum().item() == 3.0  # the weight-0 sample scores nothing
    log_probs = torch.full(batch["response_mask"].shape, -2.0)
    loss, tokens = response_nll(log_probs, batch["response_mask"], batch["loss_tokens"])
    assert tokens == 3 and loss.item() == pytest.approx(2.0 * 3 / 10)
    # without a global count: this batch's own token mean
    assert response_nll(log_probs, batch["response_mask"])[0].item() == pytest.approx(2.0)
