"""Every recipe trains, end to end: the real pipeline (``arl.run.pipeline.train``), the real Sokoban env
and agent loop, the tiny model cloned on expert play, the rollout DataModule with its filter, a
real Lightning Trainer. Each run is one or two RL iterations on a few groups (seconds each).

- every preset of ``configs/algo/`` makes counted optimiser steps with the DAPO filter on and
  changes the policy;
- SAMPO's filter with several rollout rounds: top-up rounds run and every kept group has a
  spread of returns (and the last-round fill, when on, completes the batch); stage_aware keeps
  the all-failure groups while the valid ratio is low;
- KL as a reward penalty, and LoRA with gradient checkpointing, each train.
"""

from __future__ import annotations

import pytest
import torch
from lightning import Callback

import scale_helpers as sh
from arl_testing import CONFIG_DIR, compose, episode_returns

ALGOS = sorted(p.stem for p in (CONFIG_DIR / "algo").glob("*.yaml") if p.stem != "base")
RUN = ["debug=cpu_small", "rl.iterations=1", "rl.val_every=1", "rollout.val_episodes=2", "rollout.tasks_per_iteration=4",
       "rollout.group_size=4", "env.max_turns=4", "env.kwargs.max_steps=4", "rollout.max_new_tokens=16",
       "callbacks.model_checkpoint=null", "callbacks.last_checkpoint=null"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with sh.one_thread():
        yield


@pytest.fixture(scope="module")
def cloned(tmp_path_factory):
    """A Sokoban policy cloned on 160 expert episodes: it answers in the format and solves some
    levels, so groups of 4 have both outcomes (about 15 s)."""
    from arl.run.pipeline import train

    out = tmp_path_factory.mktemp("bc")
    cfg = compose(["experiment=bc_sokoban", "debug=cpu_small", "bc.episodes=160", "bc.epochs=2", "bc.val_untrained=false",
                   "bc.bootstrap.enabled=false", "bc.dagger.enabled=false", "rollout.val_episodes=4",
                   "rollout.max_new_tokens=16"], output_dir=str(out))
    train(cfg)
    return out / "bc_policy_hf"


class Record(Callback):
    """Every RL iteration's batch (the kept episodes) and the module's metrics after it."""

    def __init__(self):
        self.batches, self.metrics = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append(batch)
        self.metrics.append(dict(pl_module.last_metrics))


def _train(cloned, tmp_path, overrides):
    from arl.run.pipeline import train

    rec = Record()
    cfg = compose([*RUN, f"model.init_from={cloned}", *overrides], output_dir=str(tmp_path))
    results = train(cfg, callbacks=[rec])
    return results, rec


def _weights(path):
    from arl.models.loading import load_policy

    model, _ = load_policy(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _spreads(batch) -> dict[int, float]:
    return {g: max(v.values()) - min(v.values()) for g, v in episode_returns(batch).items()}


@pytest.mark.parametrize("algo", ALGOS)
def test_every_recipe_makes_counted_updates_with_the_filter_on(algo, cloned, tmp_path):
    results, rec = _train(cloned, tmp_path, [f"algo={algo}", "algo.filter.name=dapo", "algo.filter.max_rollout_rounds=2"])
    m = rec.metrics[0]
    assert results["iterations_done"] == 1 and m["actor/skipped_steps"] == 0
    assert m["actor/optimizer_steps"] == 2 and m["train/samples"] > 0  # cpu_small: 2 steps a rollout
    assert m["filter/active"] == 1.0 and m["filter/kept_groups"] + m["filter/filled_groups"] == 4
    before, after = _weights(cloned), _weights(results["policy_hf"])
    moved = max(float((before[k] - after[k]).abs().max()) for k in before)
    assert moved > 1e-6, f"{algo}: the policy did not change"


@pytest.mark.parametrize("filter_name", ["dapo", "stage_aware"])
def test_sampo_filter_tops_up_with_groups_that_have_a_spread(filter_name, cloned, tmp_path):
    """Up to three rounds, no fill: the batch holds only what the filter kept. dapo: every kept
    group has a spread of returns, and the cloned policy's all-failure groups make top-up rounds
    run. stage_aware with a threshold above every valid ratio (early training) also keeps the
    all-failure groups (constant, return <= 0), and only those of the constant ones."""
    extra = ["algo.filter.valid_ratio_threshold=1.0"] if filter_name == "stage_aware" else []
    results, rec = _train(cloned, tmp_path, ["algo=sampo", f"algo.filter.name={filter_name}", "algo.filter.max_rollout_rounds=3",
                                              "algo.filter.fill_last_round=false", "rl.iterations=2", *extra])
    assert results["iterations_done"] == 2
    kept_failures = 0
    for batch, m in zip(rec.batches, rec.metrics):
        spreads = _spreads(batch)
        assert len(spreads) == m["filter/kept_groups"] and m["filter/filled_groups"] == 0
        assert {g // 4 for g in spreads} <= set(range(int(m["filter/rounds"])))  # group ids tell the round
        for g, spread in spreads.items():
            if spread == 0:  # only stage_aware keeps a constant group, and only an all-failure one
                assert filter_name == "stage_aware" and max(episode_returns(batch)[g].values()) <= 0
                kept_failures += 1
    if filter_name == "dapo":
        assert max(m["filter/rounds"] for m in rec.metrics) > 1  # some iteration needed a top-up round
    else:
        assert kept_failures > 0  # the stage rule acted


def test_the_last_round_fills_the_batch(cloned, tmp_path):
    _results, rec = _train(cloned, tmp_path, ["algo=sampo", "algo.filter.max_rollout_rounds=1"])
    m, batch = rec.metrics[0], rec.batches[0]
    assert m["filter/rounds"] == 1 and m["filter/kept_groups"] + m["filter/filled_groups"] == 4
    assert len(_spreads(batch)) == 4
    assert m["filter/kept_groups"] == sum(s > 0 for s in _spreads(batch).values())


def test_kl_in_the_reward_trains(cloned, tmp_path):
    """algo.kl.in_loss=false: the k3 penalty is subtracted from each turn's reward (after a first
    update the policy differs from the reference, so the second iteration pays a penalty); the
    loss has no KL term. The exact arithmetic is the oracle's (test_update_oracle.py)."""
    _results, rec = _train(cloned, tmp_path, ["algo=grpo", "algo.kl.in_loss=false", "algo.kl.coef=0.1",
                                               "rl.iterations=2", "algo.filter.name=none",
                                               "rl.old_log_probs=recompute"])
    first, second = rec.metrics
    assert first["actor/kl_reward"] == pytest.approx(0.0, abs=1e-6)  # the policy is the reference
    assert second["actor/kl_reward"] > 0 and second["actor/kl_loss"] == 0.0
    assert second["actor/optimizer_steps"] == 2


def test_lora_with_gradient_checkpointing_trains_the_adapters(cloned, tmp_path):
    """A LoRA policy with activation checkpointing: the adapters train, the export is a plain
    Qwen3 holding the merged weights (different from the start)."""
    from transformers import AutoModelForCausalLM

    results, rec = _train(cloned, tmp_path, ["algo=sampo", "model.lora.enabled=true", "model.lora.r=4",
                                              "model.gradient_checkpointing=true", "algo.filter.name=none"])
    assert rec.metrics[0]["actor/optimizer_steps"] == 2 and rec.metrics[0]["actor/skipped_steps"] == 0
    plain = AutoModelForCausalLM.from_pretrained(results["policy_hf"])
    assert type(plain).__name__ == "Qwen3ForCausalLM" and not any("lora" in k for k in plain.state_dict())
    before, after = _weights(cloned), {k: v for k, v in plain.state_dict().items()}
    changed = [k for k in before if float((before[k] - after[k]).abs().max()) > 1e-7]
    assert changed and all("proj" in k for k in changed)  # only the adapted projections moved
    assert torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])


def test_lora_through_bc_and_rl_keeps_the_bc_policy_as_reference(tmp_path):
    """BC trains LoRA adapters, the pipeline folds them into the base before RL, and the RL reference
    is the policy with its fresh adapters off: at the first update (one step, before it moves) the
    KL to the reference is 0, as with a full copy. Without the fold the reference would be the
    untrained base, far from the cloned policy."""
    from arl.run.pipeline import train

    rec = Record()
    cfg = compose([*RUN, "model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=32", "bc.episodes=40",
                   "bc.epochs=1", "bc.optimizer.lr=1e-2", "bc.val_untrained=false", "bc.bootstrap.enabled=false",
                   "bc.dagger.enabled=false", "algo=sampo", "algo.filter.name=none", "rl.mini_batches=1",
                   "rl.mini_batch_size=null"], output_dir=str(tmp_path))
    results = train(cfg, callbacks=[rec])
    assert results["bc/samples"] > 0 and rec.metrics[0]["actor/optimizer_steps"] == 1
    assert abs(rec.metrics[0]["actor/kl_loss"]) < 1e-6, rec.metrics[0]["actor/kl_loss"]
