"""AgenticRLModule: one training iteration of DESIGN section 5, with manual optimisation.

The module owns the policy, the frozen reference, and the algorithm parts that the ``algo``
config selects (loss, advantage, filter); it wires them together and leaves the arithmetic to
``arl.algos``. A batch is one iteration's rollouts (:class:`~arl.datamodules.rollout_datamodule.RolloutBatch`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable

import torch
from lightning import LightningModule
from torchmetrics import MeanMetric

from arl.agent.samples import build_samples, collate_tokens, collate_turns, micro_batches, sum_tokens_per_turn, turn_values_to_tokens
from arl.algos import advantages, diagnostics, filters, kl
from arl.algos import objective as objective_lib
from arl.algos.config import advantage_kwargs_from_algo, filter_kwargs_from_algo, objective_config_from_algo
from arl.modules.forward import forward_log_probs


_ADDITIVE_METRICS = ("pg_loss", "kl_loss", "entropy", "masked_seqs")


class AgenticRLModule(LightningModule):
    """Policy-gradient training of an LLM agent on rollout batches.

    Args:
        policy: the causal LM being trained (an HF ``PreTrainedModel``).
        reference: a frozen copy for the KL term, or None when ``algo.kl.coef == 0``.
        tokenizer: the policy's tokenizer (padding id).
        algo: the ``algo`` config (see ``configs/algo/base.yaml``).
        optimizer: a partial optimiser (``_partial_: true``) taking the parameters.
        ppo_epochs, mini_batches: passes over one iteration's samples, and optimiser steps per pass.
        micro_token_budget: padded tokens per micro-batch (forward/backward chunk).
        grad_clip: max global gradient norm.
        warmup_steps: linear LR warm-up in optimiser steps.
        temperature: the rollout sampling temperature (logits are scaled by it when scoring).
    """

    def __init__(
        self,
        policy,
        reference,
        tokenizer,
        algo: dict[str, Any],
        optimizer: Callable,
        ppo_epochs: int = 1,
        mini_batches: int = 2,
        micro_token_budget: int = 8192,
        grad_clip: float = 1.0,
        warmup_steps: int = 0,
        temperature: float = 1.0,
    ):
        super().__init__()
        self.automatic_optimization = False
        self.policy = policy
        self.reference = reference
        if reference is not None:
            reference.requires_grad_(False).eval()
        self.pad_id = tokenizer.pad_token_id
        self.algo = algo
        self.objective = objective_config_from_algo(algo)
        self.advantage_name, self.advantage_kwargs = advantage_kwargs_from_algo(algo)
        self.advantage_fn = advantages.get(self.advantage_name)
        self.filter_name, self.filter_kwargs = filter_kwargs_from_algo(algo)
        self.optimizer_factory = optimizer
        self.ppo_epochs = ppo_epochs
        self.mini_batches = mini_batches
        self.micro_token_budget = micro_token_budget
        self.grad_clip = grad_clip
        self.warmup_steps = warmup_steps
        self.temperature = temperature
        self.skipped_steps = 0
        self.iteration = 0
        self.val_success = MeanMetric()
        self.val_return = MeanMetric()
        self.val_valid = MeanMetric()

    # ----------------------------------------------------------------- optimisation set-up
    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = self.optimizer_factory(params=params)
        warmup = max(int(self.warmup_steps), 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / (warmup + 1)) if warmup else 1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def group_filter(self, returns: torch.Tensor, group_ids: torch.Tensor, valid_ratio: float | None):
        """The configured dynamic-sampling filter (called by the DataModule during rollout)."""
        return filters.get(self.filter_name)(
            returns=returns, group_ids=group_ids, valid_ratio=valid_ratio, **self.filter_kwargs
        )

    # ----------------------------------------------------------------------- scoring
    @torch.no_grad()
    def _score(self, model, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """Log-probs of every row of ``data`` under ``model``, micro-batched; (B, L)."""
        out = torch.zeros_like(data["response_mask"])
        idx = torch.arange(data["input_ids"].shape[0])
        was_training = model.training
        model.eval()
        try:
            for mb in micro_batches({**data, "_row": idx}, idx, self.micro_token_budget):
                logp, _ = forward_log_probs(model, mb, self.temperature)
                out[mb["_row"], : logp.shape[1]] = logp
        finally:
            model.train(was_training)
        return out * data["response_mask"]

    # ----------------------------------------------------------------------- training
    def training_step(self, batch, batch_idx: int):
        t_start = time.perf_counter()
        metrics: dict[str, float] = dict(batch.metrics)
        samples, turns = build_samples(batch.episodes, getattr(batch, "sample_mode", "turn"))
        self.iteration += 1
        if not samples:
            self.skipped_steps += 1
            metrics["actor/skipped_steps"] = float(self.skipped_steps)
            self.last_metrics = metrics
            self._log_at_iteration(metrics)
            return
        data = {k: v.to(self.device) for k, v in collate_tokens(samples, self.pad_id).items()}
        table = {k: v.to(self.device) for k, v in collate_turns(turns).items()}
        mask = data["response_mask"]
        on_policy = self.ppo_epochs == 1 and self.mini_batches == 1

        t0 = time.perf_counter()
        need_old = not on_policy or not self.objective.kl_in_loss
        if need_old:
            data["old_log_probs"] = self._score(self.policy, data)
        if self.reference is not None and self.objective.kl_coef > 0:
            data["ref_log_probs"] = self._score(self.reference, data)
        t_logprob = time.perf_counter() - t0

        step_rewards = table["reward"]
        if "ref_log_probs" in data and not self.objective.kl_in_loss:
            # k-estimator per token, summed over each turn's own tokens (both sample modes)
            token_kl = kl.kl_penalty(data["old_log_probs"], data["ref_log_probs"], self.objective.kl_estimator) * mask
            penalty = self.objective.kl_coef * sum_tokens_per_turn(token_kl, data["turn_row"], len(turns))
            step_rewards = step_rewards - penalty
            metrics["actor/kl_reward"] = float(penalty.mean())
        adv = self.advantage_fn(
            step_rewards=step_rewards,
            episode_ids=table["episode_id"],
            turn_idx=table["turn"],
            group_ids=table["group_id"],
            anchor_keys=table["anchor_key"],
            valid=table["valid"],
            **self.advantage_kwargs,
        )
        data["advantages"] = turn_values_to_tokens(adv, data["turn_row"]) * mask
        metrics.update(
            {
                "adv/mean": float(adv.mean()),
                "adv/std": float(adv.std()) if adv.numel() > 1 else 0.0,
                "adv/frac_zero": float((adv.abs() < 1e-8).float().mean()),
            }
        )
        if "old_log_probs" in data:
            gap = diagnostics.logprob_gap(data["old_log_probs"], data["rollout_log_probs"], mask)
            metrics.update({f"is/rollout_{k}": float(v) for k, v in gap.items()})

        t1 = time.perf_counter()
        metrics.update(self._update(data, on_policy))
        t_update = time.perf_counter() - t1
        metrics.update(
            {
                "perf/rollout_s": float(batch.seconds),
                "perf/logprob_s": t_logprob,
                "perf/update_s": t_update,
                "perf/iteration_s": float(batch.seconds) + time.perf_counter() - t_start,
                "actor/skipped_steps": float(self.skipped_steps),
                "actor/lr": float(self.optimizers().param_groups[0]["lr"]),
                "train/samples": float(len(samples)),
                "train/turns": float(len(turns)),
            }
        )
        self.last_metrics = metrics
        self._log_at_iteration(metrics)

    def _update(self, data: dict[str, torch.Tensor], on_policy: bool) -> dict[str, float]:
        """``ppo_epochs`` passes of ``mini_batches`` optimiser steps; returns averaged metrics."""
        opt = self.optimizers()
        sched = self.lr_schedulers()
        params = [p for p in self.policy.parameters() if p.requires_grad]
        mask = data["response_mask"]
        n = mask.shape[0]
        sums: dict[str, float] = defaultdict(float)
        steps = 0
        for _epoch in range(self.ppo_epochs):
            perm = torch.randperm(n, device=mask.device)
            for mb_idx in perm.chunk(min(self.mini_batches, n)):
                global_tokens = self._reduce_sum(mask[mb_idx].sum())
                global_seqs = self._reduce_sum((mask[mb_idx].sum(-1) > 0).sum().float())
                opt.zero_grad(set_to_none=True)
                mb_metrics: dict[str, float] = defaultdict(float)
                finite = True
                for micro in micro_batches(data, mb_idx, self.micro_token_budget):
                    log_prob, entropy = forward_log_probs(self.policy, micro, self.temperature, with_entropy=True)
                    old = micro["old_log_probs"] if "old_log_probs" in micro and not on_policy else log_prob.detach()
                    loss, m = objective_lib.actor_loss(
                        log_prob,
                        old,
                        micro["advantages"],
                        micro["response_mask"],
                        self.objective,
                        ref_log_prob=micro.get("ref_log_probs"),
                        rollout_log_prob=micro["rollout_log_probs"],
                        entropy=entropy,
                        global_tokens=global_tokens,
                        global_seqs=global_seqs,
                    )
                    if not torch.isfinite(loss):
                        finite = False
                        break
                    # normalisers are global over ranks while DDP averages gradients: undo the mean
                    self.manual_backward(loss * self._world_size())
                    stats = diagnostics.is_stats(
                        log_prob.detach(), old, micro["advantages"], micro["response_mask"],
                        self.objective.loss.clip_ratio_low, self.objective.loss.clip_ratio_high,
                    )
                    m = {**m, **{f"is/{k}": v for k, v in stats.items()}}
                    # pg/kl/entropy come as this micro-batch's share of the mini-batch value;
                    # rates (clipfrac, ppo_kl, ...) are local means, weighted by token share
                    share = float(micro["response_mask"].sum() / global_tokens.clamp_min(1))
                    for k, v in m.items():
                        mb_metrics[k] += float(v) * (1.0 if k in _ADDITIVE_METRICS else share)
                grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip) if finite else torch.tensor(float("nan"))
                if not finite or not torch.isfinite(grad_norm):
                    opt.zero_grad(set_to_none=True)
                    self.skipped_steps += 1
                    continue
                opt.step()
                sched.step()
                steps += 1
                mb_metrics["grad_norm"] = float(grad_norm)
                for k, v in mb_metrics.items():
                    sums[k] += v
        return {(k if k.startswith("is/") else f"actor/{k}"): v / max(steps, 1) for k, v in sums.items()}

    def _log_at_iteration(self, metrics: dict[str, float]) -> None:
        """Send metrics to the loggers with the RL iteration as the x-axis.

        Validation before the first update is logged at step 0 (the BC result), iteration k at k.
        Loggers write on rank 0 only: ``val/*`` are global (torchmetrics), but training-time
        ``rollout/*``, ``actor/*`` and ``is/*`` values are rank 0's own under DDP. The ``is/``
        quantiles are averaged over micro-batches weighted by token share, not exact quantiles.
        """
        for logger in self.loggers:
            logger.log_metrics({k: float(v) for k, v in metrics.items()}, step=self.iteration)

    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum over data-parallel ranks (identity on one process)."""
        if self._world_size() > 1:
            return self.trainer.strategy.reduce(value.float(), reduce_op="sum")
        return value.float()

    # ----------------------------------------------------------------------- validation
    def validation_step(self, batch, batch_idx: int):
        for ep in batch.episodes:
            if ep.env_error:
                continue
            self.val_success.update(float(ep.won))
            self.val_return.update(ep.ret)
            if ep.turns:
                self.val_valid.update(sum(t.valid for t in ep.turns) / len(ep.turns))

    def on_validation_epoch_end(self):
        values = {
            "val/success_rate": self.val_success.compute(),
            "val/return_mean": self.val_return.compute(),
            "val/valid_action_ratio": self.val_valid.compute(),
        }
        self.log_dict(values, on_step=False, on_epoch=True, logger=False)  # for checkpoint monitors
        self.last_val = {k: float(v) for k, v in values.items()}
        self._log_at_iteration(self.last_val)
        for m in (self.val_success, self.val_return, self.val_valid):
            m.reset()

    # ----------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["arl"] = {"iteration": self.iteration, "skipped_steps": self.skipped_steps}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("arl", {})
        self.iteration = state.get("iteration", 0)
        self.skipped_steps = state.get("skipped_steps", 0)

