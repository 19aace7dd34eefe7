"""Episodes -> training samples -> padded tensors (DESIGN section 3, ``turn`` mode).

In turn mode each turn is one sample: its prompt (which already carries the history window as
text) followed by the response exactly as sampled. ``response_mask`` is 1 on response tokens
only. Tensors are right-padded; ``position_ids`` count real tokens from 0.

Per-sample fields used by advantages and filters: ``group_id``, ``episode_id``, ``turn``,
``valid``, ``reward`` (the turn's raw environment reward), ``anchor_key``, ``episode_return``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from arl.agent.records import Episode

TOKEN_KEYS = ("input_ids", "attention_mask", "position_ids", "response_mask", "rollout_log_probs")
SAMPLE_KEYS = ("group_id", "episode_id", "turn", "valid", "reward", "anchor_key", "episode_return")


@dataclass
class TurnSample:
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    group_id: int
    episode_id: int
    turn: int
    valid: bool
    reward: float
    anchor_key: int
    episode_return: float


def turn_samples(episodes: Sequence[Episode]) -> list[TurnSample]:
    """One sample per turn of every episode that has no environment error."""
    out = []
    for ep in episodes:
        if ep.env_error:
            continue
        ret = ep.ret
        for k, t in enumerate(ep.turns):
            out.append(
                TurnSample(
                    t.prompt_ids, t.response_ids, t.rollout_log_probs, ep.group_id, ep.episode_id, k,
                    t.valid, t.reward, t.anchor_key, ret,
                )
            )
    return out


def collate(samples: Sequence[TurnSample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad samples into a batch; returns the tensors of DESIGN section 3.

    Returns a dict with ``input_ids``, ``attention_mask``, ``position_ids``, ``response_mask``,
    ``rollout_log_probs`` of shape (B, L) (log-probs sit at the position of the token they score)
    and ``group_id``, ``episode_id``, ``turn``, ``anchor_key`` (int64), ``valid`` (bool),
    ``reward``, ``episode_return`` (float) of shape (B,).
    """
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    B, L = len(samples), max(lengths, default=0)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    response_mask = torch.zeros((B, L), dtype=torch.float32)
    rollout_log_probs = torch.zeros((B, L), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        attention_mask[i, : p + r] = 1
        response_mask[i, p : p + r] = 1.0
        rollout_log_probs[i, p : p + r] = torch.tensor(s.rollout_log_probs, dtype=torch.float32)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
        "rollout_log_probs": rollout_log_probs,
        "group_id": torch.tensor([s.group_id for s in samples], dtype=torch.long),
        "episode_id": torch.tensor([s.episode_id for s in samples], dtype=torch.long),
        "turn": torch.tensor([s.turn for s in samples], dtype=torch.long),
        "anchor_key": torch.tensor([s.anchor_key for s in samples], dtype=torch.long),
        "valid": torch.tensor([s.valid for s in samples], dtype=torch.bool),
        "reward": torch.tensor([s.reward for s in samples], dtype=torch.float32),
        "episode_return": torch.tensor([s.episode_return for s in samples], dtype=torch.float32),
    }


def index_batch(batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rows ``idx`` of every tensor, with (B, L) tensors trimmed to their longest real row."""
    out = {k: v[idx] for k, v in batch.items()}
    if "attention_mask" in out and out["attention_mask"].numel():
        width = int(out["attention_mask"].sum(-1).max().item())
        for k in out:
            if out[k].dim() == 2:
                out[k] = out[k][:, :width]
    return out


def micro_batches(batch: dict[str, torch.Tensor], idx: torch.Tensor, token_budget: int) -> Iterator[dict[str, torch.Tensor]]:
    """Split rows ``idx`` into micro-batches whose padded size (rows x longest row) fits the budget.

    Rows are packed in the given order; a single row longer than the budget is its own micro-batch.
    """
    lengths = batch["attention_mask"][idx].sum(-1).tolist()
    start, longest = 0, 0
    for i, n in enumerate(lengths):
        new_longest = max(longest, n)
        if i > start and new_longest * (i - start + 1) > token_budget:
            yield index_batch(batch, idx[start:i])
            start, new_longest = i, n
        longest = new_longest
    if start < len(lengths):
        yield index_batch(batch, idx[start:])
