"""Mutation testing of the update path: named mutants that change training semantics.

Each mutant is one textual edit of a source file under ``src/arl`` (a sign, a ratio, a clip bound,
a coefficient, a filter rule, a normaliser, the sample-to-token mapping, the mini-batch count,
the dynamic-sampling schedule, a metric's reduction over ranks). The script copies ``src``,
``tests``, ``configs`` and ``pyproject.toml`` to a temporary folder (the working tree is never
edited), and for each mutant applies the edit there, runs the fast tests that guard that file
(``pytest -x``), records whether a test failed (the mutant is *killed*) or all passed (it
*survived*), and restores the file. A mutant whose text is not found exactly once stops the script
(the list must follow the code); ``--check`` does only that check.

    python scripts/mutation.py                      # all mutants; prints the table
    python scripts/mutation.py --only grpo_mean_sign,ppo_min
    python scripts/mutation.py --write docs/mutation.md

``make mutation`` runs it with ``--write docs/mutation.md``. About 30-40 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "arl"

ALGOS_TESTS = ["tests/unit/algos", "tests/integration/test_update_oracle.py"]
MODULE_TESTS = ["tests/integration/test_update_oracle.py", "tests/integration/test_scale_update.py"]
SCORING_TESTS = "tests/unit/modules/test_chunked_scoring.py"
SAMPLES_TESTS = ["tests/unit/agent/test_samples.py", "tests/integration/test_update_oracle.py"]
DATA_TESTS = ["tests/unit/datamodules/test_dynamic_sampling.py", "tests/unit/datamodules/test_rollout_datamodule.py"]
METRICS_TESTS = ["tests/unit/utils/test_metrics.py", "tests/unit/datamodules/test_rollout_datamodule.py"]
CLIP_TESTS = [*ALGOS_TESTS, "tests/integration/test_clip_control.py"]
CLIP_MODULE_TESTS = [*MODULE_TESTS, "tests/integration/test_clip_control.py"]


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to src/arl
    old: str
    new: str
    what: str
    tests: tuple[str, ...]


M = Mutant
MUTANTS: list[Mutant] = [
    # ---------------------------------------------------------------- advantages
    M("grpo_mean_sign", "algos/advantages.py",
      "adv = targets - _gather(torch.where(single, torch.zeros_like(mean), mean), target_group)",
      "adv = targets + _gather(torch.where(single, torch.zeros_like(mean), mean), target_group)",
      "GRPO adds the group mean instead of subtracting it", tuple(ALGOS_TESTS)),
    M("grpo_biased_std", "algos/advantages.py",
      "return torch.sqrt(sq_dev / (count - 1.0).clamp_min(1.0))", "return torch.sqrt(sq_dev / count.clamp_min(1.0))",
      "group std biased (n) instead of unbiased (n - 1)", tuple(ALGOS_TESTS)),
    M("grpo_no_std", "algos/advantages.py",
      "        adv = _divide(adv, _gather(std, target_group) + eps, undivided)\n", "        adv = adv\n",
      "GRPO never divides by the std", tuple(ALGOS_TESTS)),
    M("group_of_one_mean", "algos/advantages.py",
      "adv = targets - _gather(torch.where(single, torch.zeros_like(mean), mean), target_group)",
      "adv = targets - _gather(mean, target_group)",
      "a group of one subtracts its own mean (advantage 0 instead of the score)", tuple(ALGOS_TESTS)),
    M("gamma_ignored", "algos/advantages.py",
      "running = dense[k] + gamma * running", "running = dense[k] + running",
      "step returns undiscounted", tuple(ALGOS_TESTS)),
    M("penalty_on_valid_turns", "algos/advantages.py",
      "return (~valid.bool()).to(torch.float64) * invalid_penalty", "return valid.bool().to(torch.float64) * invalid_penalty",
      "the format penalty hits the valid turns", tuple(ALGOS_TESTS)),
    M("gigpo_step_sign", "algos/advantages.py",
      "return (episode_adv + weighted_step).to(_out_dtype(table.step_rewards))",
      "return (episode_adv - weighted_step).to(_out_dtype(table.step_rewards))",
      "GiGPO subtracts the step part", tuple(ALGOS_TESTS)),
    M("gigpo_clusters_across_groups", "algos/advantages.py",
      "    return _dense_pair_index(group_index, anchor_keys)",
      "    return _dense_index(anchor_keys)",
      "anchor clusters span groups", tuple(ALGOS_TESTS)),
    M("gigpo_step_no_std", "algos/advantages.py",
      "        step_adv = _divide(step_adv, _gather(std, cluster_index) + eps, step_undivided)  # a cluster of one: 0 / eps",
      "        step_adv = step_adv",
      "mean_std_norm does not divide the step part", tuple(ALGOS_TESTS)),
    M("grpo_zero_std_by_eps", "algos/advantages.py",
      "        std = torch.where(single | (std == 0), torch.ones_like(std), std)",
      "        std = torch.where(single, torch.ones_like(std), std)",
      "a group whose statistics are all equal is divided by eps", tuple(ALGOS_TESTS)),
    M("penalty_only_center_divides", "algos/advantages.py",
      "        denominators = torch.where(undivided, torch.ones_like(denominators), denominators)",
      "        denominators = denominators",
      "center normalises penalty-only groups as any other", tuple(ALGOS_TESTS)),
    M("penalty_only_any_group", "algos/advantages.py",
      "    return (count >= 2) & (high == low)",
      "    return count >= 2",
      "every group and step group is treated as penalty-only", tuple(ALGOS_TESTS)),
    M("penalty_only_step_groups_ignored", "algos/advantages.py",
      "        step_only = only | _gather(_all_equal_segments(raw_returns, cluster_index, num_clusters), cluster_index)",
      "        step_only = only",
      "penalty-only step groups inside a group with a win are divided by their std", tuple(ALGOS_TESTS)),
    M("penalty_only_step_groups_with_penalty", "algos/advantages.py",
      "        step_only = only | _gather(_all_equal_segments(raw_returns, cluster_index, num_clusters), cluster_index)",
      "        step_only = only | _gather(_all_equal_segments(returns, cluster_index, num_clusters), cluster_index)",
      "penalty-only step groups judged on the returns with the penalty", tuple(ALGOS_TESTS)),
    M("penalty_only_zero_keeps_step_groups", "algos/advantages.py",
      "        return _zero_where(episode_adv, only), _zero_where(step_adv, step_only)",
      "        return _zero_where(episode_adv, only), _zero_where(step_adv, only)",
      "zero leaves penalty-only step groups of a group with a win", tuple(ALGOS_TESTS)),
    M("rloo_includes_self", "algos/advantages.py",
      "other_sum = _gather(group_sum, turns.group_index) - _gather(own_sum, turns.episode_index)",
      "other_sum = _gather(group_sum, turns.group_index)",
      "RLOO's baseline includes the own episode", tuple(ALGOS_TESTS)),
    # ---------------------------------------------------------------- policy losses
    M("log_ratio_flipped", "algos/policy_losses.py",
      "return (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)",
      "return (old_log_prob - log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)",
      "token ratio pi_old / pi", tuple(ALGOS_TESTS)),
    M("ppo_min", "algos/policy_losses.py",
      "loss_ppo = torch.maximum(loss_unclipped, loss_clipped)", "loss_ppo = torch.minimum(loss_unclipped, loss_clipped)",
      "PPO takes the optimistic branch", tuple(ALGOS_TESTS)),
    M("ppo_bounds_swapped", "algos/policy_losses.py",
      "loss_clipped = -advantages * ratio.clamp(1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)",
      "loss_clipped = -advantages * ratio.clamp(1.0 - cfg.clip_ratio_high, 1.0 + cfg.clip_ratio_low)",
      "PPO's asymmetric clip bounds swapped", tuple(ALGOS_TESTS)),
    M("dual_clip_positive", "algos/policy_losses.py",
      "loss_mat = torch.where(advantages < 0, torch.minimum(loss_ppo, loss_dual), loss_ppo)",
      "loss_mat = torch.where(advantages > 0, torch.minimum(loss_ppo, loss_dual), loss_ppo)",
      "the dual clip applies to positive advantages", tuple(ALGOS_TESTS)),
    M("gspo_no_detach", "algos/policy_losses.py",
      "log_seq_ratio = sequence_log_ratio(log_prob, old_log_prob, mask).detach()  # (B,)",
      "log_seq_ratio = sequence_log_ratio(log_prob, old_log_prob, mask)  # (B,)",
      "GSPO's sequence ratio carries a gradient", tuple(ALGOS_TESTS)),
    M("gspo_sum_not_mean", "algos/policy_losses.py",
      "return (_zero_outside(log_prob - old_log_prob, mask) * mask).sum(dim=-1) / lengths",
      "return (_zero_outside(log_prob - old_log_prob, mask) * mask).sum(dim=-1)",
      "the sequence log-ratio is not length-normalised", tuple(ALGOS_TESTS)),
    M("gspo_min", "algos/policy_losses.py",
      "loss_mat = torch.maximum(loss_unclipped, loss_clipped)\n    clipped = loss_clipped > loss_unclipped",
      "loss_mat = torch.minimum(loss_unclipped, loss_clipped)\n    clipped = loss_clipped > loss_unclipped",
      "GSPO takes the optimistic branch", tuple(ALGOS_TESTS)),
    M("cispo_unclipped", "algos/policy_losses.py",
      "weight = ratio.clamp(1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)",
      "weight = ratio",
      "CISPO's IS weight is not truncated", tuple(ALGOS_TESTS)),
    M("sapo_taus_swapped", "algos/policy_losses.py",
      "torch.as_tensor(cfg.tau_pos, dtype=ratio.dtype, device=ratio.device),\n        torch.as_tensor(cfg.tau_neg, dtype=ratio.dtype, device=ratio.device),",
      "torch.as_tensor(cfg.tau_neg, dtype=ratio.dtype, device=ratio.device),\n        torch.as_tensor(cfg.tau_pos, dtype=ratio.dtype, device=ratio.device),",
      "SAPO's gate temperatures swapped", tuple(ALGOS_TESTS)),
    M("sapo_gate_scale", "algos/policy_losses.py",
      "loss_mat = -(4.0 / tau) * torch.sigmoid(gate_arg) * advantages",
      "loss_mat = -(1.0 / tau) * torch.sigmoid(gate_arg) * advantages",
      "SAPO's gate loses its 4 / tau scale", tuple(ALGOS_TESTS)),
    M("seqmask_positive", "algos/policy_losses.py",
      "drop = (mean_adv < 0) & (mean_drift > delta)", "drop = (mean_adv > 0) & (mean_drift > delta)",
      "sequence masking drops positive-advantage sequences", tuple(ALGOS_TESTS)),
    M("seqmask_drift", "algos/policy_losses.py",
      "drop = (mean_adv < 0) & (mean_drift > delta)", "drop = (mean_adv < 0) & (mean_drift < delta)",
      "sequence masking drops the sequences that did not drift", tuple(ALGOS_TESTS)),
    M("tis_not_capped", "algos/policy_losses.py",
      'weights = weights.clamp(max=cap) if mode == "truncate" else torch.where(weights <= cap, weights, 0.0)',
      'weights = weights if mode == "truncate" else torch.where(weights <= cap, weights, 0.0)',
      "truncated IS without its cap", tuple(ALGOS_TESTS)),
    M("is_mask_keeps_past_cap", "algos/policy_losses.py",
      'weights = weights.clamp(max=cap) if mode == "truncate" else torch.where(weights <= cap, weights, 0.0)',
      'weights = weights.clamp(max=cap) if mode == "truncate" else weights.clamp(max=cap)',
      "the behaviour-weight cap truncates instead of masking the tokens past it", tuple(ALGOS_TESTS)),
    M("is_geometric_as_sequence", "algos/policy_losses.py",
      "log_rho = (log_rho.sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True).clamp_min(1.0)).expand_as(log_rho)",
      "log_rho = log_rho.sum(dim=-1, keepdim=True).expand_as(log_rho)",
      "the geometric-level weight is the sequence's whole likelihood ratio", tuple(ALGOS_TESTS)),
    M("is_sequence_counts_padding", "algos/policy_losses.py",
      "log_rho = (old_log_prob - rollout_log_prob) * mask",
      "log_rho = old_log_prob - rollout_log_prob",
      "the sequence-level weights sum the log-ratios of padding too", tuple(ALGOS_TESTS)),
    # ---------------------------------------------------------------- gspo's sequence ratio that sees outliers
    M("outlier_beta_sign", "algos/policy_losses.py",
      "scores = beta * log_ratio.abs()", "scores = -beta * log_ratio.abs()",
      "the outlier weights favour the tokens closest to on-policy", tuple(ALGOS_TESTS)),
    M("outlier_no_abs", "algos/policy_losses.py",
      "scores = beta * log_ratio.abs()", "scores = beta * log_ratio",
      "the outlier weights use the signed log-ratio (a token far below on-policy weighs nothing)", tuple(ALGOS_TESTS)),
    M("outlier_weights_unnormalised", "algos/policy_losses.py",
      "return (log_ratio * weights).sum(dim=-1) / weights.sum(dim=-1).clamp_min(1.0)",
      "return (log_ratio * weights).sum(dim=-1)",
      "the outlier weights are not normalised", tuple(ALGOS_TESTS)),
    M("outlier_ratio_with_gradient", "algos/policy_losses.py",
      "    with torch.no_grad():\n        mask = response_mask.to(log_prob.dtype)\n        log_ratio = _zero_outside(",
      "    if True:\n        mask = response_mask.to(log_prob.dtype)\n        log_ratio = _zero_outside(",
      "the outlier-weighted sequence ratio carries a gradient", tuple(ALGOS_TESTS)),
    M("outlier_setting_ignored", "algos/policy_losses.py",
      'if cfg.seq_ratio == "outlier_weighted":', 'if cfg.seq_ratio == "outlier-weighted":',
      "seq_ratio=outlier_weighted falls back to the geometric mean", tuple(ALGOS_TESTS)),
    M("token_bound_sides_swapped", "algos/policy_losses.py",
      "return ((advantages > 0) & (high > above).unsqueeze(-1)) | ((advantages < 0) & (low < below).unsqueeze(-1))",
      "return ((advantages < 0) & (high > above).unsqueeze(-1)) | ((advantages > 0) & (low < below).unsqueeze(-1))",
      "the token bound clips the side the advantage does not push", tuple(ALGOS_TESTS)),
    M("token_bound_not_applied", "algos/policy_losses.py",
      "loss_mat = torch.where(past, loss_mat.detach(), loss_mat)", "loss_mat = loss_mat",
      "the token bound is counted but keeps the gradient", tuple(ALGOS_TESTS)),
    M("max_token_dev_above_only", "algos/policy_losses.py",
      "(torch.maximum(high, -low) * rows)", "(high * rows)",
      "seq_ratio_max_token_dev misses the tokens below on-policy", tuple(ALGOS_TESTS)),
    # ---------------------------------------------------------------- clipping that follows the training stage
    M("clip_clipfrac_direction", "algos/clip_control.py",
      'DIRECTIONS: dict[str, float] = {"clipfrac": 1.0, "ppo_kl": -1.0}',
      'DIRECTIONS: dict[str, float] = {"clipfrac": -1.0, "ppo_kl": -1.0}',
      "a clip fraction above target tightens the range", tuple(CLIP_TESTS)),
    M("clip_ppo_kl_direction", "algos/clip_control.py",
      'DIRECTIONS: dict[str, float] = {"clipfrac": 1.0, "ppo_kl": -1.0}',
      'DIRECTIONS: dict[str, float] = {"clipfrac": 1.0, "ppo_kl": 1.0}',
      "a ppo_kl above target widens the range", tuple(CLIP_TESTS)),
    M("clip_schedule_end_factor", "algos/clip_control.py",
      "return 1.0 + (cfg.end_factor - 1.0) * progress", "return 1.0 + (1.0 - cfg.end_factor) * progress",
      "the schedule moves away from end_factor", tuple(CLIP_TESTS)),
    M("clip_schedule_not_held", "algos/clip_control.py",
      "progress = min(max(int(iteration), 0) / cfg.iterations, 1.0)", "progress = max(int(iteration), 0) / cfg.iterations",
      "the schedule keeps moving past its iterations", tuple(CLIP_TESTS)),
    M("clip_step_unclamped", "algos/clip_control.py",
      "step = min(max(step, 1.0 - cfg.max_step), 1.0 + cfg.max_step)", "step = step",
      "the controller's step is not kept within max_step", tuple(CLIP_TESTS)),
    M("clip_factor_unbounded", "algos/clip_control.py",
      "return min(max(factor * step, cfg.min_factor), cfg.max_factor)", "return factor * step",
      "the adaptive factor leaves [min_factor, max_factor]", tuple(CLIP_TESTS)),
    M("clip_fixed_scheduled", "algos/clip_control.py",
      '        if self.cfg.mode == "fixed":\n            return algo\n        factor = self.factor_at(iteration)',
      '        factor = self.factor_at(iteration) if self.cfg.mode != "fixed" else scheduled_factor(iteration, self.cfg)',
      "fixed mode follows the default schedule instead of the configured bounds", tuple(CLIP_TESTS)),
    M("clip_steps_on_policy", "algos/clip_control.py",
      'if measured is None or metrics.get("actor/old_log_probs_source") == 0.0:', "if measured is None:",
      "the controller steps on on-policy iterations, where nothing can clip", tuple(CLIP_TESTS)),
    M("clip_module_configured_bounds", "modules/rl_module.py",
      "loss, m = objective_lib.actor_loss(batch, self.update_algo, global_tokens, global_seqs)",
      "loss, m = objective_lib.actor_loss(batch, self.algo, global_tokens, global_seqs)",
      "the update ignores the clip control (the configured bounds)", tuple(CLIP_MODULE_TESTS)),
    M("clip_module_diagnostics_configured", "modules/rl_module.py",
      "self.update_algo.loss.clip_ratio_low, self.update_algo.loss.clip_ratio_high,",
      "self.algo.loss.clip_ratio_low, self.algo.loss.clip_ratio_high,",
      "the IS diagnostics count against the configured bounds, not those in force", tuple(CLIP_MODULE_TESTS)),
    M("clip_module_not_restored", "modules/rl_module.py",
      'self.clip_control.load_state_dict(state.get("clip_control", {}))', "self.clip_control.load_state_dict({})",
      "a resumed run restarts the adaptive factor at 1", tuple(CLIP_MODULE_TESTS)),
    # ---------------------------------------------------------------- aggregation, KL, objective
    M("token_mean_local", "algos/aggregation.py",
      "tokens = mask.sum() if global_tokens is None else global_tokens", "tokens = mask.sum()",
      "token-mean over the micro-batch instead of the mini-batch", (*ALGOS_TESTS, "tests/integration/test_scale_update.py")),
    M("seq_mean_no_token_mean", "algos/aggregation.py",
      "seq_values = seq_sums / seq_tokens.clamp_min(1.0)", "seq_values = seq_sums",
      "seq-mean-token-mean sums the tokens", tuple(ALGOS_TESTS)),
    M("sum_norm_padded_width", "algos/aggregation.py",
      "h = loss_mat.shape[-1] if horizon is None else horizon", "h = loss_mat.shape[-1]",
      "seq-mean-token-sum-norm divides by the padded width", (*ALGOS_TESTS, "tests/integration/test_scale_update.py")),
    M("k3_sign", "algos/kl.py",
      "x = (ref_log_prob - log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)",
      "x = (log_prob - ref_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)",
      "k3 of the reversed log-ratio", tuple(ALGOS_TESTS)),
    M("k3_no_minus_one", "algos/kl.py",
      "return (torch.exp(x) - x - 1.0).clamp(-K3_CLAMP, K3_CLAMP)", "return (torch.exp(x) - x).clamp(-K3_CLAMP, K3_CLAMP)",
      "k3 without its -1 (a constant: changes only the logged value)", tuple(ALGOS_TESTS)),
    M("kl_coef_sign", "algos/objective.py",
      "loss = loss + cfg.kl.coef * kl_loss", "loss = loss - cfg.kl.coef * kl_loss",
      "the KL term rewards moving away", tuple(ALGOS_TESTS)),
    M("entropy_sign", "algos/objective.py",
      "loss = loss - cfg.entropy_coef * entropy_value", "loss = loss + cfg.entropy_coef * entropy_value",
      "the entropy bonus becomes a penalty", tuple(ALGOS_TESTS)),
    M("seqmask_on_kl", "algos/objective.py",
      "kl_loss = aggregate(kl.kl_penalty(log_prob, ref_log_prob, cfg.kl.estimator), mask)",
      "kl_loss = aggregate(kl.kl_penalty(log_prob, ref_log_prob, cfg.kl.estimator), pg_mask)",
      "sequence masking also drops the KL term", tuple(ALGOS_TESTS)),
    # ---------------------------------------------------------------- filters
    M("dapo_keeps_constant", "algos/filters.py",
      "return _result(uniq, index, (gmax - gmin) > atol)", "return _result(uniq, index, (gmax - gmin) >= atol)",
      "DAPO keeps constant groups", (*ALGOS_TESTS, "tests/unit/datamodules/test_dynamic_sampling.py")),
    M("stage_aware_threshold", "algos/filters.py",
      "if valid_ratio is not None and valid_ratio < valid_ratio_threshold:",
      "if valid_ratio is not None and valid_ratio > valid_ratio_threshold:",
      "stage_aware keeps all-failure groups late instead of early", (*ALGOS_TESTS, "tests/unit/datamodules/test_dynamic_sampling.py")),
    # ---------------------------------------------------------------- the module
    M("module_adv_sign", "modules/rl_module.py",
      "token_advantages = turn_values_to_tokens(adv, data[\"turn_row\"]) * mask",
      "token_advantages = -turn_values_to_tokens(adv, data[\"turn_row\"]) * mask",
      "the trainer flips the advantages", tuple(MODULE_TESTS)),
    M("module_ignores_old", "modules/rl_module.py",
      "old = micro[\"old_log_probs\"] if \"old_log_probs\" in micro and not on_policy else log_prob.detach()",
      "old = log_prob.detach()",
      "ratio always 1: the stored old log-probs are ignored", tuple(MODULE_TESTS)),
    M("module_always_on_policy", "modules/rl_module.py",
      "on_policy = self.ppo_epochs == 1 and n_steps == 1", "on_policy = True",
      "every mini-batch treated as on-policy", tuple(MODULE_TESTS)),
    M("module_kl_reward_sign", "modules/rl_module.py",
      "step_rewards = step_rewards - penalty", "step_rewards = step_rewards + penalty",
      "the KL reward penalty becomes a bonus", tuple(MODULE_TESTS)),
    M("module_no_grad_clip", "modules/lanes.py",
      "norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)",
      "norm = torch.nn.utils.clip_grad_norm_(params, float(\"inf\"))",
      "the gradient is never clipped", tuple(MODULE_TESTS)),
    M("module_floor_steps", "modules/rl_module.py",
      "return max(1, -(-int(n_samples) // self.mini_batch_size))", "return max(1, int(n_samples) // self.mini_batch_size)",
      "mini-batch count rounded down", ("tests/integration/test_scale_update.py",)),
    M("module_global_tokens_local", "modules/lanes.py",
      "return self.total(mask.sum()), self.total(", "return mask.sum() * 0 + 1, self.total(",
      "the token normaliser is 1", tuple(MODULE_TESTS)),
    M("module_no_world_scale", "modules/lanes.py",
      "self.module.manual_backward(loss * self.world)", "self.module.manual_backward(loss)",
      "DDP's gradient mean is not undone (half the step on 2 ranks)", ("tests/integration/test_scale_update.py",)),
    M("module_temperature_ignored", "modules/forward.py",
      "    if temperature not in (0.0, 1.0):\n        logits = logits / temperature\n    logp = token_log_probs",
      "    logp = token_log_probs",
      "scoring ignores the sampling temperature", tuple(MODULE_TESTS)),
    M("scoring_previous_token", "modules/forward.py",
      "labels = ids[:, 1:][scored]", "labels = ids[:, :-1][scored]",
      "each position scores the token it reads, not the next one", (*MODULE_TESTS, SCORING_TESTS)),
    M("scoring_chunks_reordered", "modules/forward.py",
      "return torch.cat(parts, dim=-1)", "return torch.cat(parts[::-1], dim=-1)",
      "the chunks' scores joined in the wrong order", (SCORING_TESTS,)),
    M("module_reuse_misaligned", "modules/rl_module.py",
      "return None if data is None else data[\"rollout_log_probs\"] * data[\"response_mask\"]",
      "return None if data is None else data[\"rollout_log_probs\"].roll(1, dims=1) * data[\"response_mask\"]",
      "the rollout's log-probs reused one token off", tuple(MODULE_TESTS)),
    # ---------------------------------------------------------------- samples
    M("samples_first_turn_advantage", "agent/samples.py",
      "rows[start:end] = [first_row + k] * (end - start)", "rows[start:end] = [first_row] * (end - start)",
      "trajectory samples give every turn the first turn's advantage", tuple(SAMPLES_TESTS)),
    M("samples_mask_shifted", "agent/samples.py",
      "list(t.prompt_ids) + list(t.response_ids), [0.0] * p + [1.0] * r,",
      "list(t.prompt_ids) + list(t.response_ids), [0.0] * (p - 1) + [1.0] * r + [0.0],",
      "turn samples train one prompt token and skip the last answer token", tuple(SAMPLES_TESTS)),
    M("samples_spread_off_by_one", "datamodules/batches.py",
      "out = values[turn_row.clamp_min(0)]", "out = values[(turn_row + 1).clamp(0, values.numel() - 1)]",
      "turn values land on the next turn's tokens", tuple(SAMPLES_TESTS)),
    # ---------------------------------------------------------------- the rollout DataModule
    M("dm_fill_order", "datamodules/rollout_datamodule.py",
      "chosen = (keep_ids + fill_ids)[:need]", "chosen = (fill_ids + keep_ids)[:need]",
      "the last round fills with constant groups before the kept ones", tuple(DATA_TESTS)),
    M("dm_cold_start_off_by_one", "datamodules/rollout_datamodule.py",
      "filtering = schedule.group_filter is not None and it >= schedule.cold_start",
      "filtering = schedule.group_filter is not None and it > schedule.cold_start",
      "the filter starts one iteration late", tuple(DATA_TESTS)),
    M("dm_fill_every_round", "datamodules/rollout_datamodule.py",
      "keep_ids, fill_ids = self._filter_round(episodes, last=rounds == schedule.max_rollout_rounds)",
      "keep_ids, fill_ids = self._filter_round(episodes, last=True)",
      "every round fills the batch (no top-up)", tuple(DATA_TESTS)),
    M("dm_same_tasks_every_round", "datamodules/rollout_datamodule.py",
      "rng = np.random.default_rng([int(seed), int(iteration), int(round_)])",
      "rng = np.random.default_rng([int(seed), int(iteration), 0])",
      "re-rollout rounds replay the same tasks", tuple(DATA_TESTS)),
    M("dm_kept_groups_overcount", "datamodules/rollout_datamodule.py",
      "kept_groups += len(chosen)", "kept_groups += len(keep_ids) + len(fill_ids)",
      "the top-up counts groups it did not keep", tuple(DATA_TESTS)),
    # ---------------------------------------------------------------- metrics over ranks
    M("metrics_unweighted_mean", "utils/metrics.py",
      "weights = [part.rule(name).weight for part in having]", "weights = [1.0 for part in having]",
      "a mean over ranks ignores how many episodes, turns or tokens each rank's mean is over", tuple(METRICS_TESTS)),
    M("metrics_sum_as_mean", "utils/metrics.py",
      'elif kind == "sum":', 'elif kind == "total":',
      "totals and shares are averaged over ranks instead of added up", tuple(METRICS_TESTS)),
    M("metrics_turn_mean_by_episode", "agent/metrics.py",
      'out.mean(f"{prefix}valid_action_ratio", sum(t.valid for t in turns) / len(turns), len(turns))',
      'out.mean(f"{prefix}valid_action_ratio", sum(t.valid for t in turns) / len(turns), len(good))',
      "the valid-action ratio is weighted by episodes, not turns, over ranks", tuple(METRICS_TESTS)),
]


def copy_tree(dest: Path) -> Path:
    """The parts of the repository the tests need, copied to ``dest`` (mutants are applied there)."""
    for name in ("src", "tests", "configs"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    (dest / "docs").mkdir()
    shutil.copy2(ROOT / "docs" / "algorithms.md", dest / "docs" / "algorithms.md")  # the algo key table, checked
    return dest


def run_tests(root: Path, tests: tuple[str, ...], timeout: int) -> tuple[bool, float]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "ARL_ROOT": str(root),
           "ARL_SHARED_DATA": os.environ.get("ARL_SHARED_DATA", str(ROOT.parent / "shared" / "data")),
           "ARL_CACHE": os.environ.get("ARL_CACHE", str(ROOT / ".cache" / "arl"))}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )
    return proc.returncode == 0, time.perf_counter() - t0


def apply(m: Mutant, src: Path) -> str:
    path = src / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutant {m.name}: the text to change occurs {text.count(m.old)} times in {m.file}")
    path.write_text(text.replace(m.old, m.new))
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated mutant names")
    ap.add_argument("--write", default=None, help="write the markdown report to this file")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per test run")
    ap.add_argument("--check", action="store_true", help="only check that every mutant matches the code")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only.split(",")]
    if args.only and len(chosen) != len(args.only.split(",")):
        raise SystemExit(f"unknown mutant in --only; known: {', '.join(m.name for m in MUTANTS)}")
    for m in chosen:  # every mutant must match the code before anything runs
        if (SRC / m.file).read_text().count(m.old) != 1:
            raise SystemExit(f"mutant {m.name}: the text to change is not found exactly once in {m.file}")
    if args.check:
        print(f"{len(chosen)} mutants match the code")
        return
    with tempfile.TemporaryDirectory(prefix="arl-mutation-") as tmp:
        rows = mutate_all(chosen, copy_tree(Path(tmp)), args.timeout)
    report(rows, args.write)


def mutate_all(chosen: list[Mutant], root: Path, timeout: int) -> list[tuple[Mutant, str, float]]:
    suites = sorted({t for m in chosen for t in m.tests})
    ok, secs = run_tests(root, tuple(suites), timeout)
    if not ok:
        raise SystemExit("the tests fail without any mutant: fix them first")
    print(f"unmutated: the {len(suites)} test files pass ({secs:.0f}s)", flush=True)
    rows = []
    for i, m in enumerate(chosen, 1):
        original = apply(m, root / "src" / "arl")
        try:
            try:
                passed, secs = run_tests(root, m.tests, timeout)
            except subprocess.TimeoutExpired:
                passed, secs = False, float(timeout)  # a hang counts as detected
        finally:
            (root / "src" / "arl" / m.file).write_text(original)
        verdict = "survived" if passed else "killed"
        rows.append((m, verdict, secs))
        print(f"[{i}/{len(chosen)}] {m.name}: {verdict} ({secs:.0f}s)", flush=True)
    return rows


def report(rows: list[tuple[Mutant, str, float]], write: str | None) -> None:
    killed = sum(v == "killed" for _, v, _ in rows)
    lines = [
        f"{killed} of {len(rows)} semantic mutants killed ({100 * killed / max(len(rows), 1):.0f} %).",
        "",
        "| mutant | file | what it changes | tests run | result |",
        "|---|---|---|---|---|",
    ]
    for m, verdict, secs in rows:
        lines.append(f"| `{m.name}` | `src/arl/{m.file}` | {m.what} | {', '.join(f'`{t}`' for t in m.tests)} | "
                     f"{'**survived**' if verdict == 'survived' else 'killed'} ({secs:.0f} s) |")
    table = "\n".join(lines)
    print(table)
    if write:
        path = ROOT / write
        text = path.read_text() if path.exists() else ""
        start, end = "<!-- mutation:start -->", "<!-- mutation:end -->"
        block = f"{start}\n{table}\n{end}"
        if start in text and end in text:
            text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        path.write_text(text)
    if killed < len(rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
