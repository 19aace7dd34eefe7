"""The data contracts between the data room and the LightningModules: tensors only.

An RL iteration reaches :class:`~arl.modules.rl_module.AgenticRLModule` as a :class:`RolloutBatch`
of two tensor tables (docs/design.md section 4), built by the DataModule from the episodes it rolled out
(:func:`arl.agent.samples.collate_episodes`):

- ``tokens``, the training rows, right-padded, shape (B, L): ``input_ids``, ``attention_mask``,
  ``position_ids`` (real tokens counted from 0), ``response_mask`` (1.0 on sampled tokens),
  ``rollout_log_probs`` (the engine's log-prob at each sampled token), ``turn_row`` (the turn-table
  row of each response token, -1 elsewhere); and (B,) ``group_id``, ``episode_id``;
- ``turns``, the turn table, shape (N,): ``group_id``, ``episode_id``, ``turn``, ``anchor_key``
  (int64), ``valid`` (bool), ``reward`` (the turn's environment reward), ``episode_return``.

A validation batch (:class:`ValidationBatch`) holds per-episode results, shape (E,); its metrics
are logged as ``val/*`` and again under the name of how it sampled (:func:`with_protocol_names`).
The other helpers below are the tensor operations both sides share: turn values onto tokens and
back, and micro-batching under a token budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

from arl.agent.metrics import member_means
from arl.utils.metrics import Metrics


@dataclass
class RolloutBatch:
    """One RL iteration (this rank's share), as the LightningModule receives it.

    Attributes:
        tokens: the (B, L) and (B,) training tensors (module docstring).
        turns: the (N,) turn table.
        iteration: the RL iteration it was rolled out in.
        seconds: wall time of the rollout.
        metrics: rollout and filter metrics of this rank, each with how it combines over
            data-parallel ranks.
    """

    tokens: dict[str, torch.Tensor]
    turns: dict[str, torch.Tensor]
    iteration: int
    seconds: float = 0.0
    metrics: Metrics = field(default_factory=Metrics)

    @property
    def num_samples(self) -> int:
        return int(self.tokens["input_ids"].shape[0])

    @property
    def num_turns(self) -> int:
        return int(self.turns["reward"].shape[0])


@dataclass
class ValidationBatch:
    """Held-out episodes (this rank's share): ``results`` has (E,) ``won`` (bool), ``ret`` and ``score``
    (float), ``turns`` and ``valid_turns`` (int64) and ``env_error`` (bool) of every episode, a failed one a
    loss (:func:`arl.agent.samples.episode_table`);
    ``protocol`` is ``val_sampled`` or ``val_greedy``; ``task_types`` names each row's task type
    (ALFWorld's six, MATH's two) and ``seeds`` its task seed (both empty when the batch predates them);
    ``records`` holds each row's :func:`~arl.agent.records.episode_record` (its turns as text);
    ``graded``: the env grades episodes (``val/score`` is logged from ``results["score"]``); ``member``: the
    member of a mix (``env=mix``) the episodes are from, "" for a run of one env."""

    results: dict[str, torch.Tensor]
    iteration: int
    seconds: float = 0.0
    protocol: str = ""
    task_types: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    records: tuple[dict, ...] = ()
    graded: bool = False
    member: str = ""

    def tally(self) -> dict[str, float]:
        """The sums a member's validation values are made of (:func:`member_values`), over this batch: ``won`` and
        ``episodes`` (a failed episode a loss), ``ret`` and ``returned`` (the episodes that did not fail),
        ``valid_turns`` and ``turns`` (of those that played a turn), ``score`` (0 for a failed one), ``graded``."""
        r = self.results
        failed = r["env_error"] if "env_error" in r else torch.zeros_like(r["won"])
        played = (r["turns"] > 0) & ~failed
        return {
            "won": float(r["won"].sum()), "episodes": float(r["won"].numel()),
            "ret": float(r["ret"][~failed].sum()), "returned": float((~failed).sum()),
            "valid_turns": float(r["valid_turns"][played].sum()), "turns": float(r["turns"][played].sum()),
            "score": float(r["score"].sum()) if self.graded else 0.0, "graded": float(self.graded),
        }


def add_tally(into: dict[str, dict[str, float]], member: str, tally: Mapping[str, float]) -> None:
    """Add a batch's :meth:`ValidationBatch.tally` to ``into[member]`` (``graded`` once any batch was)."""
    total = into.setdefault(member, {})
    for key, value in tally.items():
        total[key] = max(total.get(key, 0.0), value) if key == "graded" else total.get(key, 0.0) + value


def member_values(tallies: Iterable[Mapping[str, Mapping[str, float]]], prefix: str = "val/") -> dict[str, float]:
    """A mix's validation values from every rank's ``{member: tally}`` (summed): per member
    ``<prefix><member>/success_rate``, ``return_mean``, ``valid_action_ratio``, ``score`` (a graded member, x 100)
    and ``episodes``, as ``val/*`` counts them for one env; and the overall ``<prefix><measure>``, the mean over the
    members of the member's value (:func:`arl.agent.metrics.member_means`). Empty without a member."""
    totals: dict[str, dict[str, float]] = {}
    for mapping in tallies:
        for member, tally in mapping.items():
            add_tally(totals, member, tally)
    out: dict[str, float] = {}
    for member, t in sorted(totals.items()):
        head = f"{prefix}{member}/"
        out[f"{head}episodes"] = t["episodes"]
        out[f"{head}success_rate"] = t["won"] / t["episodes"] if t["episodes"] else float("nan")
        out[f"{head}return_mean"] = t["ret"] / t["returned"] if t["returned"] else float("nan")
        out[f"{head}valid_action_ratio"] = t["valid_turns"] / t["turns"] if t["turns"] else float("nan")
        if t["graded"]:
            out[f"{head}score"] = 100.0 * t["score"] / t["episodes"] if t["episodes"] else float("nan")
    return {**out, **member_means(out, list(totals), prefix)} if totals else {}


def with_protocol_names(metrics: Mapping[str, float], protocol: str) -> dict[str, float]:
    """``metrics`` plus each ``val/<name>`` again as ``<protocol>/<name>``, the name that says how
    validation sampled (``val_sampled``, ``val_greedy``; ``ValidationBatch.protocol``); no copy
    when ``protocol`` is empty."""
    named = {f"{protocol}/{k[4:]}": v for k, v in metrics.items() if k.startswith("val/")} if protocol else {}
    return {**metrics, **named}


def turn_values_to_tokens(values: torch.Tensor, turn_row: torch.Tensor) -> torch.Tensor:
    """Spread per-turn values (N,) onto their tokens: (B, L), 0 where ``turn_row`` is -1."""
    out = values[turn_row.clamp_min(0)]
    return torch.where(turn_row >= 0, out, torch.zeros_like(out))


def sum_tokens_per_turn(token_values: torch.Tensor, turn_row: torch.Tensor, n_turns: int) -> torch.Tensor:
    """Sum (B, L) token values into their turns: (N,). Tokens with ``turn_row == -1`` are dropped."""
    keep = turn_row >= 0
    out = token_values.new_zeros(n_turns)
    return out.index_add(0, turn_row[keep], token_values[keep])


def index_batch(batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rows ``idx`` of every tensor, with (B, L) tensors trimmed to their longest real row."""
    out = {k: v[idx] for k, v in batch.items()}
    if "attention_mask" in out and out["attention_mask"].numel():
        width = int(out["attention_mask"].sum(-1).max().item())
        for k, v in out.items():
            if v.dim() == 2:
                out[k] = v[:, :width]
    return out


def micro_batches(
    batch: dict[str, torch.Tensor], idx: torch.Tensor, token_budget: int, sort_by_length: bool = True
) -> Iterator[dict[str, torch.Tensor]]:
    """Split rows ``idx`` into micro-batches whose padded size (rows x longest row) fits the budget.

    With ``sort_by_length`` (default) the rows are packed shortest first, so each micro-batch
    holds rows of similar length (on the default Sokoban job 3 % padding instead of 16 % in
    random order; the loss normalisers are global, so the grouping does not change a step);
    otherwise in the given order. A single row longer than the budget is its own micro-batch.
    """
    if sort_by_length and len(idx) > 1:
        idx = idx[torch.argsort(batch["attention_mask"][idx].sum(-1), stable=True)]
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
