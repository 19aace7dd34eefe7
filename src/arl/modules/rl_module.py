"""AgenticRLModule: one training iteration (docs/design.md section 5), with manual optimisation.

The module owns the policy, the frozen reference, and the algorithm parts that the ``algo``
config selects (loss, advantage, filter); it wires them together and leaves the arithmetic to
``arl.algos``. A batch is one iteration's rollouts as tensors (:class:`~arl.datamodules.batches.RolloutBatch`:
the token rows and the turn table); a validation batch holds per-episode results
(:class:`~arl.datamodules.batches.ValidationBatch`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from lightning import LightningModule
from torchmetrics import MeanMetric

from arl.agent.metrics import success_by_type
from arl.algos import advantages, diagnostics, kl
from arl.algos import objective as objective_lib
from arl.algos.clip_control import ClipControl
from arl.algos.schema import AlgoConfig, algo_config
from arl.datamodules.batches import (
    RolloutBatch,
    ValidationBatch,
    add_tally,
    member_values,
    sum_tokens_per_turn,
    turn_values_to_tokens,
    with_protocol_names,
)
from arl.distributed import ranks as dist_utils
from arl.distributed.fsdp import data_parallel_mesh, fully_shard_model
from arl.models.lora import is_peft_model, reference_context
from arl.modules.forward import CHUNK_TOKENS, forward_log_probs
from arl.modules.lanes import Lanes
from arl.modules.passes import padding_logits
from arl.utils.metrics import SAME, SUM, Metrics, combine
from arl.utils.timing import timed

_ADDITIVE_METRICS = ("pg_loss", "kl_loss", "entropy", "masked_seqs")
OLD_LOG_PROBS_SOURCES = ("rollout", "recompute")  # where pi_old comes from (rl.old_log_probs, auto resolved)
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class UpdateSettings:
    """How one iteration's update runs, apart from the algorithm (``algo``), as
    :func:`arl.run.builders.build_rl_module` resolves it from the ``rl`` group (and the keys named
    below from other groups). The defaults are for programmatic use (benchmarks, tests); a run takes
    every value from its config.

    - ``ppo_epochs``: passes over one iteration's samples; a pass makes either ``mini_batches``
      optimiser steps, or, with ``mini_batch_size`` (samples per optimiser step over all ranks, the
      official scripts' ``ppo_mini_batch_size``), ``ceil(samples / mini_batch_size)`` steps, so a
      rollout with more turns gives more steps (a run sets one of the two, ``arl.run.checks``);
    - ``micro_token_budget``: padded tokens per micro-batch (forward/backward chunk);
    - ``grad_clip``: max global gradient norm; ``warmup_steps``: linear LR warm-up in optimiser steps;
    - ``temperature``: the rollout's sampling temperature (``rollout.temperature``), which scoring
      divides the logits by;
    - ``old_log_probs``: where pi_old comes from, ``rl.old_log_probs`` with ``auto`` resolved:
      ``rollout`` takes the rollout engine's own log-probs, ``recompute`` a trainer forward pass.
      ``rollout`` is only exact when the engine scores with this very policy in the trainer's
      precision (the transformers engine in fp32); the rollout-vs-trainer gap (``is/rollout_*``) is
      then not measured;
    - ``logit_chunk_tokens``: scored positions projected onto the vocabulary at once
      (``model.logit_chunk_tokens``; :mod:`arl.modules.forward`);
    - ``balance_tokens``: deal each global mini-batch's rows out to the data-parallel ranks by their
      token counts before its step (:mod:`arl.modules.balance`); the step's gradient is the same
      either way;
    - ``sharding``: ``trainer.sharding`` (``layer_cls``, ``activation_checkpointing``, ...) for the
      FSDP2 lane (``ModelParallelStrategy``); ignored by other strategies;
    - ``asynchronous``: the batches may be stale (``rl.max_staleness`` set): with pi_old from the
      rollout (``old_log_probs="rollout"``) the ratio is always taken against those behaviour
      log-probs, even where one step per iteration would otherwise take the current policy's.
    """

    ppo_epochs: int = 1
    mini_batches: int | None = 2
    mini_batch_size: int | None = None
    micro_token_budget: int = 8192
    grad_clip: float = 1.0
    warmup_steps: int = 0
    temperature: float = 1.0
    old_log_probs: str = "recompute"
    logit_chunk_tokens: int = CHUNK_TOKENS
    balance_tokens: bool = True
    sharding: Mapping[str, Any] | None = None
    asynchronous: bool = False


class AgenticRLModule(LightningModule):
    """Policy-gradient training of an LLM agent on rollout batches.

    Args:
        policy: the causal LM being trained (an HF ``PreTrainedModel``).
        reference: a frozen copy for the KL term, or None: no KL term (``algo.kl.coef == 0``), or a
            LoRA policy, whose reference is itself with the adapters off
            (:func:`arl.models.lora.reference_context`; the BC adapters folded into its base first).
        tokenizer: the policy's tokenizer (padding id).
        algo: the ``algo`` group, typed (:class:`arl.algos.schema.AlgoConfig`) or a mapping validated here.
        optimizer: a partial optimiser (``_partial_: true``) taking the parameters.
        update: how the update runs (:class:`UpdateSettings`); None: its defaults.
    """

    def __init__(
        self,
        policy,
        reference,
        tokenizer,
        algo: AlgoConfig | Mapping[str, Any],
        optimizer: Callable,
        update: UpdateSettings | None = None,
    ):
        super().__init__()
        update = update or UpdateSettings()
        self.automatic_optimization = False
        self.policy = policy
        self.reference = reference
        if reference is not None:
            reference.requires_grad_(False).eval()
        self.pad_id = tokenizer.pad_token_id
        self.algo = algo_config(algo)  # validated and typed
        self.clip_control = ClipControl(self.algo.clip_control)  # the clip bounds' factor across iterations
        self.update_algo = self.algo  # the algo of this iteration's update: its clip bounds (algo.clip_control)
        self.advantage_fn = advantages.estimator(self.algo.advantage)  # algo.advantage.kwargs bound
        self.optimizer_factory = optimizer
        self.ppo_epochs = update.ppo_epochs
        self.mini_batches = int(update.mini_batches or 1)
        self.mini_batch_size = int(update.mini_batch_size) if update.mini_batch_size else None
        self.micro_token_budget = update.micro_token_budget
        self.grad_clip = update.grad_clip
        self.warmup_steps = update.warmup_steps
        self.temperature = update.temperature
        self.logit_chunk_tokens = int(update.logit_chunk_tokens)
        if update.old_log_probs not in OLD_LOG_PROBS_SOURCES:
            raise ValueError(f"old_log_probs={update.old_log_probs!r}; valid: {', '.join(OLD_LOG_PROBS_SOURCES)}")
        self.old_log_probs = update.old_log_probs
        self.asynchronous = bool(update.asynchronous)
        self.balance_tokens = bool(update.balance_tokens)
        if self.algo.loss.agg == "seq-mean-token-sum-norm" and self.algo.loss.horizon is None:
            raise ValueError(
                "algo.loss.agg=seq-mean-token-sum-norm needs a constant horizon (algo.loss.horizon); the padded "
                "width of a micro-batch would make the update depend on how the batch is split"
            )
        self.sharding = dict(update.sharding) if update.sharding else None
        self.skipped_steps = 0
        self.optimizer_steps_total = 0  # train/optimizer_steps: every optimiser step of the run
        self.updates_skipped = 0  # train/updates_skipped: iterations that made no optimiser step
        self.iteration = 0
        self.last_metrics: dict[str, float] = {}  # the last iteration's metrics, global over ranks
        self._init_validation_state()

    def _init_validation_state(self) -> None:
        """The validation's metric states and its last values."""
        self.val_success = MeanMetric()
        self.val_return = MeanMetric()
        self.val_score = MeanMetric()  # graded envs (WebShop): the mean final score x 100
        self.val_graded = False
        self.val_valid = MeanMetric()
        self.val_by_type: dict[str, list[int]] = {}  # task type -> [won, played] of this rank's validation
        self.val_members: dict[str, dict[str, float]] = {}  # env=mix: member -> this rank's sums (ValidationBatch.tally)
        self.val_protocol = ""  # how the validation episodes were sampled (ValidationBatch.protocol); "" unnamed
        self.last_val: dict[str, float] = {}  # the last validation's val/* metrics (restored on resume)
        self.last_val_iteration: int | None = None  # the iteration of last_val; None before any validation

    # ----------------------------------------------------------------- optimisation set-up
    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = self.optimizer_factory(params=params)
        warmup = max(int(self.warmup_steps), 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / (warmup + 1)) if warmup else 1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ----------------------------------------------------------------------- distribution
    def configure_model(self) -> None:
        """FSDP2 (``ModelParallelStrategy``): shard policy and reference on the data-parallel mesh."""
        mesh = data_parallel_mesh(self, self.sharding)
        if mesh is None:
            return
        fully_shard_model(self.policy, self.sharding, mesh)
        if self.reference is not None:
            fully_shard_model(self.reference, {**self.sharding, "activation_checkpointing": False}, mesh)

    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _lanes(self) -> Lanes:
        """What every data-parallel rank does alike in this update (:class:`arl.modules.lanes.Lanes`)."""
        return Lanes(self, self.policy, self._world_size(), self.pad_id, self.micro_token_budget, self.balance_tokens,
                     self.grad_clip)

    # ----------------------------------------------------------------------- scoring
    @torch.no_grad()
    def _score(self, model, data: dict[str, torch.Tensor] | None) -> torch.Tensor | None:
        """Log-probs of every row of ``data`` under ``model``, micro-batched; (B, L). A rank without
        rows (``data`` None) runs padding forwards, as many as the other ranks' passes."""
        idx = torch.arange(data["input_ids"].shape[0]) if data is not None else torch.zeros(0, dtype=torch.long)
        rows = {**data, "_row": idx} if data is not None else None
        was_training = model.training
        model.eval()
        try:
            out = torch.zeros_like(data["response_mask"]) if data is not None else None
            for mb in self._lanes().passes(rows, idx, backward=False):
                if mb is None:
                    padding_logits(model, self.pad_id, self.device)
                    continue
                logp, _ = forward_log_probs(model, mb, self.temperature, chunk_tokens=self.logit_chunk_tokens)
                out[mb["_row"], : logp.shape[1]] = logp
        finally:
            model.train(was_training)
        return out * data["response_mask"] if data is not None else None

    # ----------------------------------------------------------------------- training
    def training_step(self, batch: RolloutBatch, batch_idx: int):
        """One RL iteration on ``batch``, as the paper writes it: score the sampled tokens (pi_old and
        pi_ref), the advantage of every turn, then ``ppo_epochs`` passes of mini-batches, each a loss
        and an optimiser step (:meth:`_update`); the metrics are combined over ranks and logged at
        the iteration. A rank without rows (``data`` None) still takes part in every collective."""
        times: dict[str, float] = {}  # seconds of the timed phases, logged as perf/<name>_s
        with timed(times, "iteration"):
            metrics = Metrics()
            metrics.update(batch.metrics)
            self.iteration += 1
            self.update_algo = self.clip_control.algo_at(self.algo, self.iteration)
            n_global = int(self._lanes().total(float(batch.num_samples)))
            if n_global == 0:  # no rank has anything
                self._log_empty_iteration(metrics)
                return
            data, table = self._batch_to_device(batch)
            n_steps = self.steps_per_epoch(n_global)
            # one step per iteration: pi_old is the policy itself, unless stale samples keep their behaviour log-probs
            on_policy = self.ppo_epochs == 1 and n_steps == 1 and not (self.asynchronous and self.old_log_probs == "rollout")
            # what the ratio's pi_old was: 0 the policy itself (ratio 1), 1 the behaviour log-probs, 2 a trainer pass
            metrics.same("actor/old_log_probs_source", 0.0 if on_policy else 1.0 if self.old_log_probs == "rollout" else 2.0)
            with timed(times, "logprob"):  # 1. score: log pi_old and log pi_ref of the sampled tokens, (B, L)
                with timed(times, "old_logprob"):
                    old_log_probs = self._old_log_probs(data, on_policy)
                ref_log_probs = self._ref_log_probs(data)
            if data is not None:  # 2. the advantage of every turn, spread onto its tokens, (B, L)
                scores = {"old_log_probs": old_log_probs, "ref_log_probs": ref_log_probs}
                data = {**data, **{k: v for k, v in scores.items() if v is not None}}
                advantages, advantage_metrics = self._advantages(data, table)
                data = {**data, "advantages": advantages}
                metrics.update(advantage_metrics)
            with timed(times, "update"):  # 3. per mini-batch: the loss, then the optimiser step
                metrics.update(self._update(data, on_policy, n_steps))
        metrics.update(self._iteration_metrics(batch, times))
        self._end_iteration(metrics, int(metrics["actor/optimizer_steps"]), "every optimiser step was skipped: a "
                            "non-finite loss or gradient norm (actor/skipped_steps), or no response token in any mini-batch")

    def _update(self, data: dict[str, torch.Tensor] | None, on_policy: bool, n_steps: int | None = None) -> Metrics:
        """``ppo_epochs`` passes of ``n_steps`` optimiser steps (:meth:`steps_per_epoch`) over the
        rows shuffled and split into mini-batches of (nearly) equal size; returns the metrics
        averaged over the steps (this rank's shares of the global values, the gradient norm global)
        and ``actor/optimizer_steps``, the steps applied. What every data-parallel rank must do alike
        (the global normalisers, the token deal, matched passes, the world-size scaling, the
        non-finite skip) is :class:`arl.modules.lanes.Lanes`'s; a skipped step is counted in
        ``actor/skipped_steps``.
        """
        lanes, opt, sched = self._lanes(), self.optimizers(), self.lr_schedulers()
        params = [p for p in self.policy.parameters() if p.requires_grad]
        n = 0 if data is None else int(data["response_mask"].shape[0])
        n_steps = n_steps or self.steps_per_epoch(int(lanes.total(float(n))))
        sums: dict[str, float] = defaultdict(float)
        balance: dict[str, list[float]] = defaultdict(list)  # the deals' max-over-mean, before and after
        steps = 0
        for _epoch in range(self.ppo_epochs):
            for mb_idx in torch.tensor_split(torch.randperm(n, device=self.device), n_steps):
                global_tokens, global_seqs = lanes.normalisers(data, mb_idx)
                if float(global_tokens) == 0:  # the same on every rank
                    continue
                rows, idx = lanes.deal(data, mb_idx, balance)
                opt.zero_grad(set_to_none=True)
                mb_metrics: dict[str, float] = defaultdict(float)
                finite = True
                for micro in lanes.passes(rows, idx):  # None: a padding pass
                    loss, m = self._micro_loss(micro, on_policy, global_tokens, global_seqs) if micro else (None, {})
                    if loss is not None and not torch.isfinite(loss):  # a zero loss instead: no NaN in the gradients
                        finite, loss, m = False, None, {}
                    for k, v in m.items():
                        mb_metrics[k] += v
                    lanes.backward(loss if loss is not None else lanes.padding_pass())
                grad_norm = lanes.step(opt, sched, params, finite)
                if grad_norm is None:
                    self.skipped_steps += 1
                    continue
                steps += 1
                mb_metrics["grad_norm"] = grad_norm
                for k, v in mb_metrics.items():
                    sums[k] += v
        return self._update_metrics(sums, steps, balance)

    @staticmethod
    def _update_metrics(sums: dict[str, float], steps: int, balance: dict[str, list[float]]) -> Metrics:
        """The update's metrics: the step sums ``sums`` averaged over the ``steps`` applied (shares of
        the global values add up over ranks; the norm is global), the step count, the deals' loads."""
        out = Metrics()
        for k, v in sums.items():
            name = k if k.startswith("is/") else f"actor/{k}"
            out.add(name, v / max(steps, 1), SAME if name == "actor/grad_norm" else SUM)
        out.same("actor/optimizer_steps", steps)
        for name, values in balance.items():  # the same on every rank
            out.same(name, sum(values) / len(values))
        return out

    def _log_empty_iteration(self, metrics: Metrics) -> None:
        """An iteration without a training sample on any rank (``metrics``: the batch's): count it
        as skipped (no update) and log."""
        self.skipped_steps += 1
        metrics.same("actor/skipped_steps", self.skipped_steps)
        self._end_iteration(metrics, 0, "no training sample on any rank: the filter kept no group, or every episode "
                            "ended with an environment error (filter/kept_groups, rollout/env_errors)")

    def _end_iteration(self, metrics: Metrics, steps: int, no_step_reason: str) -> None:
        """Count the iteration's optimiser ``steps`` (a warning with ``no_step_reason`` when none),
        combine the metrics over ranks (``last_metrics``) and log them at the iteration."""
        metrics.update(self._count_update(steps, no_step_reason))
        loss = self.update_algo.loss  # the clip bounds in force (algo.clip_control), then its controller's step
        metrics.same("actor/clip_factor", self.clip_control.factor_at(self.iteration))
        metrics.same("actor/clip_ratio_low", loss.clip_ratio_low)
        metrics.same("actor/clip_ratio_high", loss.clip_ratio_high)
        self.last_metrics = self._reduce_metrics(metrics)
        self.clip_control.observe(self.last_metrics)
        if self.last_metrics.get("adv/frac_zero", 0.0) >= 1.0:
            log.warning("iteration %d: every advantage is zero (each group's returns are equal), so the policy-gradient "
                        "term is zero; only the KL and entropy terms moved the policy", self.iteration)
        self._log_at_iteration(self.last_metrics)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """A :class:`RolloutBatch` is handed over as it is (:meth:`_batch_to_device` moves its
        tensors): Lightning's generic transfer would rebuild its :class:`Metrics` as a plain mapping,
        without the rules that combine them over ranks. Other batches move as Lightning moves them."""
        if isinstance(batch, RolloutBatch):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def _batch_to_device(
        self, batch: RolloutBatch
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        """The batch's token rows (``data``, each (B, L)) and turn table (``table``, each (n_turns,))
        on this module's device; ``(None, None)`` when this rank has no sample."""
        if not batch.num_samples:
            return None, None
        data = {k: v.to(self.device) for k, v in batch.tokens.items()}
        table = {k: v.to(self.device) for k, v in batch.turns.items()}
        return data, table

    def _old_log_probs(self, data: dict[str, torch.Tensor] | None, on_policy: bool) -> torch.Tensor | None:
        """log pi_old of the sampled tokens (B, L) when the update (ratio) or the KL reward reads
        them, else None: the rollout engine's (``old_log_probs="rollout"``) or scored by the policy.
        A rank without rows (``data`` None) still runs the scoring forwards, and gets None."""
        if on_policy and self.algo.kl.in_loss:
            return None
        if self.old_log_probs == "rollout":  # the engine scored the sampled tokens with these very weights
            return None if data is None else data["rollout_log_probs"] * data["response_mask"]
        return self._score(self.policy, data)

    def _ref_log_probs(self, data: dict[str, torch.Tensor] | None) -> torch.Tensor | None:
        """log pi_ref of the sampled tokens (B, L) when the KL term is on (``kl.coef > 0``), else
        None. A rank without rows (``data`` None) still runs the scoring forwards, and gets None."""
        if self.algo.kl.coef <= 0:
            return None
        if self.reference is not None:
            return self._score(self.reference, data)
        if is_peft_model(self.policy):  # the base weights: no copy of the model
            with reference_context(self.policy):
                return self._score(self.policy, data)
        raise RuntimeError("algo.kl.coef > 0 needs a reference: a frozen copy, or a LoRA policy (adapters off)")

    def _iteration_metrics(self, batch: RolloutBatch, times: dict[str, float]) -> Metrics:
        """Timings (``perf/*``, seconds, the slowest rank's; ``times`` from :meth:`training_step`),
        learning rate and skipped steps (equal on every rank), and the batch's size of this rank
        (added up over ranks)."""
        n_samples = batch.num_samples
        metrics = Metrics()
        metrics.max("perf/rollout_s", batch.seconds)
        metrics.max("perf/logprob_s", times["logprob"])
        metrics.max("perf/old_logprob_s", times["old_logprob"])
        metrics.max("perf/ref_logprob_s", times["logprob"] - times["old_logprob"])
        metrics.max("perf/update_s", times["update"])
        metrics.max("perf/iteration_s", batch.seconds + times["iteration"])
        metrics.same("actor/skipped_steps", self.skipped_steps)
        metrics.same("actor/lr", self.optimizers().param_groups[0]["lr"])
        metrics.sum("train/samples", n_samples)
        metrics.sum("train/turns", batch.num_turns)
        # tokens of one forward pass over the batch (prompts and responses; padding excluded)
        metrics.sum("train/tokens", float(batch.tokens["attention_mask"].sum()) if n_samples else 0.0)
        if torch.cuda.is_available() and self.device.type == "cuda":
            metrics.max("perf/peak_memory_gb", torch.cuda.max_memory_allocated(self.device) / 2**30)
        return metrics

    def _count_update(self, steps: int, reason: str) -> Metrics:
        """Add this iteration's optimiser steps (the same on every rank) to the run's totals;
        returns them as ``train/optimizer_steps`` and ``train/updates_skipped``. Warns with
        ``reason`` when the iteration made no step."""
        self.optimizer_steps_total += steps
        if steps == 0:
            self.updates_skipped += 1
            log.warning("iteration %d: no update (%s)", self.iteration, reason)
        metrics = Metrics()
        metrics.same("train/optimizer_steps", self.optimizer_steps_total)
        metrics.same("train/updates_skipped", self.updates_skipped)
        return metrics

    def _advantages(self, data: dict[str, torch.Tensor], table: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
        """The advantage of every turn of the turn table ``table``, spread onto the turn's tokens,
        (B, L), and metrics: means over this rank's turns (``is/rollout_*``: over its response
        tokens; ``is/rollout_max_abs_diff`` a max)."""
        mask = data["response_mask"]
        n_turns = int(table["reward"].shape[0])
        metrics = Metrics()
        step_rewards = table["reward"]
        if "ref_log_probs" in data and not self.algo.kl.in_loss:
            # k-estimator per token, summed over each turn's own tokens (both sample modes)
            token_kl = kl.kl_penalty(data["old_log_probs"], data["ref_log_probs"], self.algo.kl.estimator) * mask
            penalty = self.algo.kl.coef * sum_tokens_per_turn(token_kl, data["turn_row"], n_turns)
            step_rewards = step_rewards - penalty
            metrics.mean("actor/kl_reward", float(penalty.mean()), n_turns)
        turns = advantages.TurnTable(
            step_rewards=step_rewards,
            episode_ids=table["episode_id"],
            turn_idx=table["turn"],
            group_ids=table["group_id"],
            anchor_keys=table["anchor_key"],
            valid=table["valid"],
        )
        adv, estimator_metrics = self.advantage_fn(turns, self.algo.advantage)
        token_advantages = turn_values_to_tokens(adv, data["turn_row"]) * mask
        metrics.mean("adv/mean", float(adv.mean()), n_turns)
        metrics.mean("adv/std", float(adv.std()) if adv.numel() > 1 else 0.0, n_turns)
        metrics.mean("adv/frac_zero", float((adv.abs() < 1e-8).float().mean()), n_turns)
        # how much GiGPO's step part has to compare (logged for every estimator)
        metrics.mean("adv/shared_anchor_frac",
                     advantages.shared_anchor_fraction(table["group_id"], table["anchor_key"]), n_turns)
        for key, value in estimator_metrics.items():  # the estimator's own (GiGPO: step_std)
            metrics.mean(f"adv/{key}", float(value), n_turns)
        if "old_log_probs" in data and self.old_log_probs == "recompute":
            gap = diagnostics.logprob_gap(data["old_log_probs"], data["rollout_log_probs"], mask)
            n_tokens = float(mask.sum())
            for k, v in gap.items():
                if k == "max_abs_diff":
                    metrics.max(f"is/rollout_{k}", float(v))
                else:
                    metrics.mean(f"is/rollout_{k}", float(v), n_tokens)
        return token_advantages, metrics

    def steps_per_epoch(self, n_samples: int) -> int:
        """Optimiser steps of one pass over ``n_samples`` samples (all ranks): ``ceil(n /
        mini_batch_size)`` with the official sizing, else ``mini_batches`` (at most one per sample)."""
        if self.mini_batch_size:
            return max(1, -(-int(n_samples) // self.mini_batch_size))
        return max(1, min(self.mini_batches, int(n_samples))) if self._world_size() == 1 else self.mini_batches

    def _micro_loss(self, micro: dict[str, torch.Tensor], on_policy: bool, global_tokens, global_seqs):
        """The loss of one micro-batch (its share of the mini-batch loss) and its metric shares."""
        log_prob, entropy = forward_log_probs(
            self.policy, micro, self.temperature, with_entropy=True, chunk_tokens=self.logit_chunk_tokens
        )
        old = micro["old_log_probs"] if "old_log_probs" in micro and not on_policy else log_prob.detach()
        batch = objective_lib.TokenBatch(
            log_prob=log_prob,
            old_log_prob=old,
            advantages=micro["advantages"],
            response_mask=micro["response_mask"],
            ref_log_prob=micro.get("ref_log_probs"),
            rollout_log_prob=micro["rollout_log_probs"],
            entropy=entropy,
        )
        loss, m = objective_lib.actor_loss(batch, self.update_algo, global_tokens, global_seqs)
        stats = diagnostics.is_stats(
            log_prob.detach(), old, micro["advantages"], micro["response_mask"],
            self.update_algo.loss.clip_ratio_low, self.update_algo.loss.clip_ratio_high,
        )
        m = {**m, **{f"is/{k}": v for k, v in stats.items()}}
        # pg/kl/entropy come as this micro-batch's share of the mini-batch value; rates
        # (clipfrac, ppo_kl, ...) are local means, weighted by token share of the global batch
        share = float(micro["response_mask"].sum() / global_tokens.clamp_min(1))
        return loss, {k: float(v) * (1.0 if k in _ADDITIVE_METRICS else share) for k, v in m.items()}

    def _reduce_metrics(self, metrics: Metrics) -> dict[str, float]:
        """Every rank's metrics combined into global values by their rules
        (:func:`arl.utils.metrics.combine`); on one process the values as they are."""
        if self._world_size() <= 1:
            return dict(metrics)
        return combine(dist_utils.all_gather_object(metrics))

    def _log_at_iteration(self, metrics: dict[str, float]) -> None:
        """Send metrics to the loggers with the RL iteration as the x-axis.

        Validation before the first update is logged at step 0 (the BC result), iteration k at k.
        Loggers write on rank 0 only; the values are global over ranks (see :meth:`_reduce_metrics`;
        ``val/*`` are torchmetrics). The ``is/`` quantiles are averaged over micro-batches
        weighted by token share, not exact quantiles.
        """
        for logger in self.loggers:
            logger.log_metrics({k: float(v) for k, v in metrics.items()}, step=self.iteration)

    # ----------------------------------------------------------------------- validation
    def on_validation_epoch_start(self):
        self.val_by_type = {}
        self.val_members = {}
        self.val_graded = False
        self.val_errors = 0

    def validation_step(self, batch: ValidationBatch, batch_idx: int):
        """One validation batch: success (a failed episode is a loss) and score (0 for a failed one) over every
        episode; the return and the valid-action ratio over the episodes that did not fail; the failed counted."""
        self.val_protocol = batch.protocol or self.val_protocol
        r = batch.results
        if not r["won"].numel():
            return
        failed = r["env_error"] if "env_error" in r else torch.zeros_like(r["won"])
        self.val_errors += int(failed.sum())
        self.val_success.update(r["won"].float())
        if bool((~failed).any()):
            self.val_return.update(r["ret"][~failed])
        if batch.graded:
            self.val_graded = True
            self.val_score.update(100.0 * r["score"])
        played = (r["turns"] > 0) & ~failed  # over turns, as rollout/valid_action_ratio and eval.py count it
        if played.any():
            turns = r["turns"][played].float()
            self.val_valid.update(r["valid_turns"][played].float() / turns, weight=turns)
        for task_type, won in zip(batch.task_types, r["won"].tolist()):
            counts = self.val_by_type.setdefault(task_type, [0, 0])
            counts[0] += int(won)
            counts[1] += 1
        if batch.member:  # env=mix: val/<member>/*, and the overall values as the mean over the members
            add_tally(self.val_members, batch.member, batch.tally())

    def on_validation_epoch_end(self):
        values = {
            "val/success_rate": self.val_success.compute(),
            "val/return_mean": self.val_return.compute(),
            "val/valid_action_ratio": self.val_valid.compute(),
        }
        # every rank's per-type counts, and whether it saw a graded batch: a rank whose share of the validation
        # was empty saw none, and the ranks must agree before the score's compute (a collective)
        by_type, graded, errors, members = zip(*dist_utils.all_gather_object(
            (self.val_by_type, self.val_graded, self.val_errors, self.val_members)))
        if any(graded):
            values["val/score"] = self.val_score.compute()
        values["val/env_errors"] = torch.tensor(float(sum(errors)))  # failed episodes, counted as losses above
        values.update({k: torch.tensor(v) for k, v in member_values(members).items()})  # env=mix
        # for checkpoint monitors; the values are global already (sync_dist averages equal values)
        self.log_dict(values, on_step=False, on_epoch=True, logger=False, sync_dist=True)
        # the RL iteration, for checkpoint names (callbacks.model_checkpoint: best-iter<k>.ckpt)
        self.log("iteration", float(self.iteration), on_step=False, on_epoch=True, logger=False)
        self.last_val = {k: float(v) for k, v in values.items()}
        self.last_val.update(success_by_type(by_type))
        self.last_val_iteration = self.iteration
        # the same values again under a name that says how they were sampled
        self._log_at_iteration(with_protocol_names(self.last_val, self.val_protocol))
        for m in (self.val_success, self.val_return, self.val_valid, self.val_score):
            m.reset()

    def adopt_validation(self, values: dict[str, float], protocol: str, loggers) -> None:
        """Take a validation played by another run as this iteration's (a sweep's shared start
        validation, :mod:`arl.run.start_validation`): ``last_val`` and the sampling ``protocol`` set,
        the same metrics sent to ``loggers`` at this iteration as :meth:`on_validation_epoch_end` sends them."""
        self.val_protocol = protocol or self.val_protocol
        self.last_val = {k: float(v) for k, v in values.items()}
        self.last_val_iteration = self.iteration
        for logger in loggers:
            logger.log_metrics(with_protocol_names(self.last_val, self.val_protocol), step=self.iteration)

    # ----------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["arl"] = {
            "iteration": self.iteration,
            "skipped_steps": self.skipped_steps,
            "optimizer_steps_total": self.optimizer_steps_total,
            "updates_skipped": self.updates_skipped,
            "last_val": dict(self.last_val),
            "last_val_iteration": self.last_val_iteration,
            "clip_control": self.clip_control.state_dict(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.reference is None and "state_dict" in checkpoint:  # a LoRA run's checkpoint from when it kept a copy
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if not k.startswith("reference.")}
        state = checkpoint.get("arl", {})
        self.iteration = state.get("iteration", 0)
        self.skipped_steps = state.get("skipped_steps", 0)
        self.optimizer_steps_total = state.get("optimizer_steps_total", 0)
        self.updates_skipped = state.get("updates_skipped", 0)
        self.clip_control.load_state_dict(state.get("clip_control", {}))
        if state.get("last_val"):
            self.last_val = dict(state["last_val"])
            self.last_val_iteration = state.get("last_val_iteration")

