"""Episodes -> training samples -> padded tensors (docs/design.md section 4).

Two tables come out of a batch of episodes:

- the **turn table**: one row per turn (:class:`TurnSample`) with what advantages and filters
  need: ``group_id``, ``episode_id``, ``turn``, ``valid``, ``reward`` (the turn's raw environment
  reward), ``anchor_key``, ``episode_return``;
- the **token samples** (:class:`TokenSample`) the policy is trained on. In ``turn`` mode each
  turn is one sample: its prompt (which carries the history window as text) then the response as
  sampled. In ``trajectory`` mode each episode is one sample: the whole token stream, with
  ``response_mask`` 1 on the sampled tokens of every turn and 0 on prompts and observations (an episode played
  through the recording gateway whose program rewrote its history mid-episode is one sample per stream: a
  turn marked ``stream_start`` begins the next).

``turn_row`` (B, L) links the two: the turn-table row of each response token (-1 elsewhere), so a
turn's advantage lands on exactly its own tokens in both modes. Tensors are right-padded;
``position_ids`` count real tokens from 0. :mod:`arl.datamodules.batches` describes the tensor
tables the RL module receives and holds the tensor helpers both sides share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    policy_version: int = -1  # the policy version that sampled the turn (-1: the trainer's own, synchronous)
    stream_start: bool = False  # trajectory mode: the turn starts a new token stream of its episode


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
                    t.valid, t.reward, t.anchor_key, ret, -1 if t.policy_version is None else int(t.policy_version),
                    t.stream_start,
                )
            )
    return out


@dataclass
class TokenSample:
    """One training row: a token stream, which of its tokens the policy wrote, and their turns."""

    input_ids: list[int]
    response_mask: list[float]  # 1.0 on sampled response tokens
    rollout_log_probs: list[float]  # aligned with input_ids (0 off the response)
    turn_rows: list[int]  # turn-table row of each token, -1 off the response
    group_id: int
    episode_id: int


def turn_token_sample(t: TurnSample, row: int) -> TokenSample:
    """The ``turn``-mode sample of turn-table row ``row``."""
    p, r = len(t.prompt_ids), len(t.response_ids)
    return TokenSample(
        list(t.prompt_ids) + list(t.response_ids), [0.0] * p + [1.0] * r,
        [0.0] * p + list(t.rollout_log_probs), [-1] * p + [row] * r, t.group_id, t.episode_id,
    )


def trajectory_token_sample(turns: Sequence[TurnSample], first_row: int) -> TokenSample:
    """The ``trajectory``-mode sample of one episode's turns (rows ``first_row, first_row+1, ...``).

    Each turn's prompt must extend the previous prompt and response verbatim (the agent loop's
    trajectory mode guarantees it); a ``ValueError`` says which turn does not.
    """
    last = turns[-1]
    stream = list(last.prompt_ids) + list(last.response_ids)
    mask = [0.0] * len(stream)
    logps = [0.0] * len(stream)
    rows = [-1] * len(stream)
    for k, t in enumerate(turns):
        start, end = len(t.prompt_ids), len(t.prompt_ids) + len(t.response_ids)
        if stream[:end] != list(t.prompt_ids) + list(t.response_ids):
            raise ValueError(
                f"episode {t.episode_id}: turn {k} is not a prefix of the episode's stream; "
                "was it rolled out with sample_mode=trajectory?"
            )
        mask[start:end] = [1.0] * (end - start)
        logps[start:end] = list(t.rollout_log_probs)
        rows[start:end] = [first_row + k] * (end - start)
    return TokenSample(stream, mask, logps, rows, last.group_id, last.episode_id)


SAMPLE_MODES = ("turn", "trajectory")


def build_samples(episodes: Sequence[Episode], mode: str = "turn") -> tuple[list[TokenSample], list[TurnSample]]:
    """(token samples, turn table) of the episodes without environment errors."""
    turns = turn_samples(episodes)
    if mode == "turn":
        return [turn_token_sample(t, i) for i, t in enumerate(turns)], turns
    if mode != "trajectory":
        raise ValueError(f"sample mode {mode!r} is not valid; valid: {', '.join(SAMPLE_MODES)}")
    samples, start = [], 0
    while start < len(turns):  # an episode's turns, up to one that starts a new stream (a gateway episode's)
        end = start + 1
        while end < len(turns) and turns[end].episode_id == turns[start].episode_id and not turns[end].stream_start:
            end += 1
        samples.append(trajectory_token_sample(turns[start:end], start))
        start = end
    return samples, turns


def collate_tokens(samples: Sequence[TokenSample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad token samples: ``input_ids``, ``attention_mask``, ``position_ids``,
    ``response_mask``, ``rollout_log_probs``, ``turn_row`` of shape (B, L) (a log-prob sits at the
    position of the token it scores) and ``group_id``, ``episode_id`` (B,)."""
    B, L = len(samples), max((len(s.input_ids) for s in samples), default=0)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    response_mask = torch.zeros((B, L), dtype=torch.float32)
    rollout_log_probs = torch.zeros((B, L), dtype=torch.float32)
    turn_row = torch.full((B, L), -1, dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s.input_ids)
        input_ids[i, :n] = torch.tensor(s.input_ids, dtype=torch.long)
        attention_mask[i, :n] = 1
        response_mask[i, :n] = torch.tensor(s.response_mask, dtype=torch.float32)
        rollout_log_probs[i, :n] = torch.tensor(s.rollout_log_probs, dtype=torch.float32)
        turn_row[i, :n] = torch.tensor(s.turn_rows, dtype=torch.long)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
        "rollout_log_probs": rollout_log_probs,
        "turn_row": turn_row,
        "group_id": torch.tensor([s.group_id for s in samples], dtype=torch.long),
        "episode_id": torch.tensor([s.episode_id for s in samples], dtype=torch.long),
    }


def collate_turns(turns: Sequence[TurnSample]) -> dict[str, torch.Tensor]:
    """The turn table as tensors of shape (N,): ``group_id``, ``episode_id``, ``turn``,
    ``anchor_key``, ``policy_version`` (int64; -1: sampled by the trainer's own weights), ``valid``
    (bool), ``reward``, ``episode_return`` (float)."""
    return {
        "group_id": torch.tensor([t.group_id for t in turns], dtype=torch.long),
        "episode_id": torch.tensor([t.episode_id for t in turns], dtype=torch.long),
        "turn": torch.tensor([t.turn for t in turns], dtype=torch.long),
        "anchor_key": torch.tensor([t.anchor_key for t in turns], dtype=torch.long),
        "valid": torch.tensor([t.valid for t in turns], dtype=torch.bool),
        "reward": torch.tensor([t.reward for t in turns], dtype=torch.float32),
        "episode_return": torch.tensor([t.episode_return for t in turns], dtype=torch.float32),
        "policy_version": torch.tensor([t.policy_version for t in turns], dtype=torch.long),
    }


def collate_episodes(episodes: Sequence[Episode], mode: str, pad_id: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """An iteration's episodes as the two tensor tables the RL module trains on:
    (:func:`collate_tokens` of the ``mode`` samples, :func:`collate_turns` of the turn table).
    Episodes with an environment error are left out of both."""
    samples, turns = build_samples(episodes, mode)
    return collate_tokens(samples, pad_id), collate_turns(turns)


def episode_table(episodes: Sequence[Episode]) -> dict[str, torch.Tensor]:
    """Per-episode results of every episode, shape (E,): ``won`` (bool; a failed episode is a loss),
    ``ret`` and ``score`` (float: the env's final score, in [0, 1]; 0 for a failed episode), ``turns``
    and ``valid_turns`` (int64), ``env_error`` (bool: the episode failed, a crashed or timed-out env,
    a non-finite reward, a program that broke its contract)."""
    return {
        "won": torch.tensor([bool(e.won) and not e.env_error for e in episodes], dtype=torch.bool),
        "ret": torch.tensor([0.0 if e.env_error else float(e.ret) for e in episodes], dtype=torch.float32),
        "score": torch.tensor([0.0 if e.env_error else float(e.score) for e in episodes], dtype=torch.float32),
        "turns": torch.tensor([len(e.turns) for e in episodes], dtype=torch.long),
        "valid_turns": torch.tensor([sum(t.valid for t in e.turns) for e in episodes], dtype=torch.long),
        "env_error": torch.tensor([bool(e.env_error) for e in episodes], dtype=torch.bool),
    }


def collate(samples: Sequence[TurnSample], pad_id: int) -> dict[str, torch.Tensor]:
    """``turn``-mode batch of turn samples: the token tensors of :func:`collate_tokens` and the
    per-sample fields of :func:`collate_turns` (row ``i`` is turn ``i``)."""
    tokens = collate_tokens([turn_token_sample(t, i) for i, t in enumerate(samples)], pad_id)
    return {**tokens, **collate_turns(samples)}
