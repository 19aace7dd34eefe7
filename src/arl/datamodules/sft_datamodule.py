"""Expert turns -> tokenised SFT batches (behaviour cloning, the paper's first stage)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler

from arl.agent.records import Episode
from arl.agent.samples import TokenSample, build_samples, collate_tokens
from arl.distributed import ranks as dist_utils


class SFTDataModule(LightningDataModule):
    """Map-style batches of expert samples (one per turn, or one per episode in ``trajectory`` mode).

    Args:
        episodes: expert episodes (only successful ones are used unless ``keep_failed``).
        pad_id: padding token id.
        batch_size: samples per optimiser step.
        val_fraction: share of episodes held out for ``bc/val_loss``.
        seed: shuffling seed.
        val_token_budget: padded tokens (rows x longest row) of one held-out batch, at most
            ``batch_size`` rows (:func:`val_batches`).
        sample_mode: ``turn`` or ``trajectory``, as the episodes were recorded.
        repeat_pattern, repeat_times: training turns whose answer (``response_text``) the regular
            expression ``repeat_pattern`` finds are trained ``repeat_times`` times an epoch
            (:func:`repeated_turns`; turn samples only); held-out samples are not repeated.
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
        val_token_budget: int = 16384,
        repeat_pattern: str | None = None,
        repeat_times: int = 1,
    ):
        super().__init__()
        repeat = repeat_pattern is not None and repeat_times > 1
        if repeat and sample_mode != "turn":
            raise ValueError("bc.repeat_turns repeats turn samples; with rollout.sample_mode=trajectory an "
                             "episode is one sample: set bc.repeat_turns.pattern=null")
        eps = [e for e in episodes if e.won or keep_failed]
        n_val = round(len(eps) * val_fraction)
        self.val_samples: list[TokenSample] = build_samples(eps[:n_val], sample_mode)[0]
        train = build_samples(eps[n_val:], sample_mode)[0]
        self.repeated = 0  # training turns the pattern found
        if repeat:
            extra = repeated_turns(train, eps[n_val:], repeat_pattern)
            self.repeated = len(extra)
            train = train + extra * (repeat_times - 1)
        self.train_samples: list[TokenSample] = train
        if not self.train_samples:
            raise ValueError("behaviour cloning has no training samples: the expert won no episode")
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.seed = seed
        self.val_token_budget = val_token_budget

    def _collate_share(self, items):
        """``(sample, weight, global tokens)`` items -> a batch whose ``loss_tokens`` is the
        number of response tokens of the whole global batch (the loss divides by it); a weight-0
        item (a rank with no sample of a short last batch) keeps the graph but scores nothing."""
        batch = collate_tokens([sample for sample, _, _ in items], self.pad_id)
        weights = torch.tensor([w for _, w, _ in items], dtype=batch["response_mask"].dtype)
        batch["response_mask"] = batch["response_mask"] * weights[:, None]
        batch["loss_tokens"] = torch.tensor(float(items[0][2]))
        return batch

    def train_dataloader(self) -> DataLoader:
        """Global batches shuffled as one process would (the seed alone decides them), each rank
        taking its contiguous share of every batch (the trainer must not add a distributed
        sampler: ``use_distributed_sampler=False``)."""
        rank, world = dist_utils.rank_and_world(getattr(self, "trainer", None))
        gen = torch.Generator().manual_seed(self.seed)
        tokens = [int(sum(s.response_mask)) for s in self.train_samples]
        sampler = GlobalBatchShares(RandomSampler(self.train_samples, generator=gen), tokens, self.batch_size, rank, world)
        return DataLoader(_Shares(self.train_samples), batch_sampler=sampler, generator=gen, collate_fn=self._collate_share)

    def val_dataloader(self) -> DataLoader | list:
        """This rank's share of the held-out samples (a contiguous slice), in batches of at most
        ``val_token_budget`` padded tokens; every rank gets as many batches as the rank with the
        most (an FSDP forward is a collective), the missing ones a sample scored with weight 0."""
        if not self.val_samples:
            return []
        rank, world = dist_utils.rank_and_world(getattr(self, "trainer", None))
        lengths = [len(s.input_ids) for s in self.val_samples]
        shares = [val_batches(lengths, r, world, self.batch_size, self.val_token_budget) for r in range(world)]
        mine = shares[rank] + [[(0, 0.0)]] * (max(map(len, shares)) - len(shares[rank]))
        tokens = [int(sum(s.response_mask)) for s in self.val_samples]
        items = [[(i, w, int(sum(tokens[j] * v for j, v in batch))) for i, w in batch] for batch in mine]  # as _Shares reads them
        return DataLoader(_Shares(self.val_samples), batch_sampler=items, collate_fn=self._collate_share)

    @property
    def steps_per_epoch(self) -> int:
        return -(-len(self.train_samples) // self.batch_size)


def repeated_turns(samples: Sequence[TokenSample], episodes: Sequence[Episode], pattern: str) -> list[TokenSample]:
    """The turn samples of ``episodes`` (as :func:`arl.agent.samples.build_samples` made them, in
    turn mode: one per turn of each episode without an environment error) whose answer text the
    regular expression ``pattern`` finds."""
    answers = [t.response_text for e in episodes if not e.env_error for t in e.turns]
    if len(answers) != len(samples):
        raise ValueError(f"{len(samples)} samples for {len(answers)} turns: not the turn samples of these episodes")
    regex = re.compile(pattern)
    return [s for s, text in zip(samples, answers) if regex.search(text)]


def val_batches(lengths: Sequence[int], rank: int, world: int, max_rows: int, token_budget: int) -> list[list[tuple[int, float]]]:
    """Rank ``rank`` of ``world``'s share of held-out samples of token ``lengths``: the contiguous
    slice ``[n rank / world, n (rank + 1) / world)``, cut in order into batches of at most
    ``max_rows`` rows whose padded size (rows x longest row) fits ``token_budget`` (a longer row
    alone). Each index comes as ``(index, 1.0)``.

    >>> val_batches([5, 5, 9, 2, 2], rank=0, world=1, max_rows=4, token_budget=12)
    [[(0, 1.0), (1, 1.0)], [(2, 1.0)], [(3, 1.0), (4, 1.0)]]
    >>> val_batches([5, 5, 9, 2, 2], rank=1, world=2, max_rows=4, token_budget=100)
    [[(2, 1.0), (3, 1.0), (4, 1.0)]]
    """
    n = len(lengths)
    lo, hi = n * rank // world, n * (rank + 1) // world
    batches: list[list[tuple[int, float]]] = []
    current: list[int] = []
    longest = 0
    for i in range(lo, hi):
        wider = max(longest, lengths[i])
        if current and (len(current) >= max_rows or wider * (len(current) + 1) > token_budget):
            batches.append([(j, 1.0) for j in current])
            current, wider = [], lengths[i]
        current.append(i)
        longest = wider
    if current:
        batches.append([(j, 1.0) for j in current])
    return batches


class _Shares(Dataset):
    """``dataset[(i, weight, tokens)]`` -> ``(samples[i], weight, tokens)`` (see GlobalBatchShares)."""

    def __init__(self, samples: Sequence[TokenSample]):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, float, int]):
        i, weight, tokens = key
        return self.samples[i], weight, tokens


class GlobalBatchShares(Sampler):
    """This rank's share of each global batch of ``order`` (a sampler over the whole data set).

    The global batches are the consecutive ``batch_size`` chunks of one pass of ``order``; rank
    ``r`` of ``W`` takes items ``[n r / W, n (r + 1) / W)`` of a batch of ``n``, so the ranks
    together see exactly the batches one process sees, in the same order. Each index comes as
    ``(index, weight, tokens)``: weight 1, and the response tokens of the whole global batch
    (``tokens_per_sample`` summed), which the loss divides by. A rank whose share of a short last
    batch is empty gets the batch's first item with weight 0 (every rank must run the step).
    """

    def __init__(self, order: Sampler, tokens_per_sample: Sequence[int], batch_size: int, rank: int = 0, world: int = 1):
        self.order = order
        self.tokens = list(tokens_per_sample)
        self.batch_size = int(batch_size)
        self.rank, self.world = int(rank), int(world)

    def __len__(self) -> int:
        return -(-len(self.tokens) // self.batch_size)  # noqa: PLE0303 - ceil(len / batch_size), >= 0

    def __iter__(self) -> Iterator[list[tuple[int, float, int]]]:
        # one pass of `order`, consumed as torch's BatchSampler consumes it under a Trainer that stops
        # after len() batches, so one process shuffles exactly as before: a short last batch runs
        # the sampler to its end (a RandomSampler then draws one more, empty, permutation), a full
        # one does not
        n = len(self.tokens)
        indices = list(self.order) if n % self.batch_size else list(itertools.islice(iter(self.order), n))
        for start in range(0, len(indices), self.batch_size):
            batch = indices[start : start + self.batch_size]
            total = sum(self.tokens[i] for i in batch)
            lo, hi = len(batch) * self.rank // self.world, len(batch) * (self.rank + 1) // self.world
            share = [(i, 1.0, total) for i in batch[lo:hi]]
            yield share or [(batch[0], 0.0, total)]
