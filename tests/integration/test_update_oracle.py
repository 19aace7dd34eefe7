"""The trainer checked against an independent oracle (``tests/update_oracle.py``).

On hand-made episodes (tokens, rewards, validity, anchors, stored old log-probs) one RL iteration
of the real ``AgenticRLModule``, fitted by a real Lightning Trainer, must end with the weights the
oracle computes in plain PyTorch from the formulas: advantages, ratios against the stored old
log-probs, clips, aggregation, KL k3, the entropy bonus, gradient clipping and AdamW, over
several mini-batches, in turn and trajectory sample modes. A planted bug in any of those (an
advantage sign, the old log-probs ignored, a clip bound, a coefficient, the normaliser, the
sample-to-token mapping) moves the weights by far more than the tolerance.

A behavioural check completes it: after updates, responses with positive advantage are more
likely and responses with negative advantage less likely.
"""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

import scale_helpers as sh
import update_oracle as oracle
from arl_testing import compose

TOL = 1e-6
PERM_SEED = 1234
# Adam divides by sqrt(v) + eps: a gradient entry at float noise level (|g| ~ 1e-9, computed from
# differently shaped batches by the two sides) would become a full lr-sized step of random sign
# at the default eps 1e-8. Both sides use this eps; the update rule under test is the same.
ADAM_EPS = 1e-5


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with sh.one_thread():
        yield


def _cfg(algo: str, mode: str, steps: int, extra: list[str] = ()):
    return compose([
        "bc.enabled=false", f"algo={algo}", "algo.filter.name=none", f"rollout.sample_mode={mode}",
        "rl.ppo_epochs=1", f"rl.mini_batches={steps}", "rl.old_log_probs=rollout", "rl.warmup_steps=0",
        "rl.optimizer.lr=1e-3", "rl.optimizer.weight_decay=0.01", f"+rl.optimizer.eps={ADAM_EPS}", "rl.grad_clip=0.5", *extra,
    ])


CASES = [
    # (algo preset, sample mode, optimiser steps, extra overrides)
    ("grpo", "turn", 3, []),                                   # token-level PPO clip + dual clip, GRPO
    ("sampo", "turn", 2, []),                                  # GSPO sequence clip + GiGPO (mean_norm)
    ("sampo", "trajectory", 2, []),
    ("grpo", "trajectory", 2, ["algo.loss.agg=seq-mean-token-mean"]),
    ("sampo", "turn", 2, ["algo.advantage.norm=mean_std_norm", "algo.loss.agg=seq-mean-token-mean"]),
    ("cispo_seqmask", "turn", 2, []),                          # CISPO weight + sequence masking
    ("sapo", "turn", 2, ["algo.entropy_coef=0.01"]),
    ("gigpo", "turn", 2, ["algo.kl.in_loss=false", "algo.kl.coef=0.5"]),  # KL as a per-turn reward penalty
    ("grpo", "turn", 2, ["rollout.temperature=0.7"]),                       # scoring at the sampling temperature
    ("grpo", "turn", 2, ["algo.loss.clip_ratio_low=0.1", "algo.loss.clip_ratio_high=0.3"]),  # asymmetric clip
    ("sampo", "turn", 2, ["algo.loss.seq_ratio=outlier_weighted"]),         # GSPO's ratio weighted to the outliers
    ("sampo", "trajectory", 2, ["algo.loss.seq_ratio=outlier_weighted", "algo.loss.outlier_beta=3.0",
                                "algo.loss.token_bound=0.3", "algo.loss.clip_ratio_high=0.2"]),  # and the token bound
]


@pytest.mark.parametrize("algo,mode,steps,extra", CASES, ids=[f"{a}-{m}-{s}steps" + ("-" + "-".join(e) if e else "") for a, m, s, e in CASES])
def test_one_iteration_equals_the_oracle(algo, mode, steps, extra):
    model, tok = sh.default_model()
    episodes = oracle.make_episodes(len(tok), mode)
    oracle.store_old_log_probs(model, episodes)
    cfg = _cfg(algo, mode, steps, extra)
    c = OmegaConf.to_container(cfg, resolve=True)
    res = sh.run_update(cfg, episodes, callbacks=[sh.SeedBeforeUpdate(PERM_SEED)])
    assert res["skipped_steps"] == 0
    assert res["metrics"]["actor/optimizer_steps"] == steps
    want, norms = oracle.oracle_update(
        model, episodes, c["algo"], mode, steps, lr=1e-3, weight_decay=0.01, grad_clip=0.5, perm_seed=PERM_SEED,
        adam_eps=ADAM_EPS, temperature=float(c["rollout"]["temperature"]),
    )
    got = res["weights"]
    moved = max(float((want[k] - dict(model.state_dict())[k]).abs().max()) for k in want)
    worst = max(float((want[k] - got[k]).abs().max()) for k in want)
    print(f"{algo} {mode} {extra}: oracle moved the weights by up to {moved:.2e}; module vs oracle {worst:.2e}; "
          f"grad norms {[round(n, 4) for n in norms]}")
    assert moved > 100 * TOL  # the step is far larger than the tolerance
    assert worst <= TOL
    assert res["metrics"]["actor/grad_norm"] == pytest.approx(sum(norms) / len(norms), rel=1e-5)


@pytest.mark.parametrize("norm", ["mean_norm", "mean_std_norm"])
def test_step_part_std_equals_the_oracle(norm):
    """``adv/step_std`` (docs/design.md section 8's "step-part std") is the std over the turns of w x A_S, with A_S
    from the oracle's own GiGPO: its advantage at w minus its advantage at w = 0."""
    import statistics

    model, tok = sh.default_model()
    episodes = oracle.make_episodes(len(tok), "turn")
    oracle.store_old_log_probs(model, episodes)
    cfg = _cfg("gigpo", "turn", 1, [f"algo.advantage.norm={norm}", "algo.advantage.step_weight=0.5"])
    advantage = OmegaConf.to_container(cfg.algo, resolve=True)["advantage"]
    res = sh.run_update(cfg, episodes)
    full = oracle.turn_advantages(episodes, advantage)
    episode_only = oracle.turn_advantages(episodes, {**advantage, "step_weight": 0.0})
    want = statistics.stdev(full[k] - episode_only[k] for k in full)
    assert want > 0.01  # the hand-made episodes share anchor states: the step part is not all zero
    assert res["last_metrics"]["adv/step_std"] == pytest.approx(want, rel=1e-6)
    grpo = sh.run_update(_cfg("grpo", "turn", 1), episodes)
    assert "adv/step_std" not in grpo["last_metrics"]  # logged for the GiGPO estimator only


def test_the_oracle_sees_clipping_act():
    """The stored old log-probs put ratios on both sides of every clip range, so a clip bound
    that is off changes the step: the oracle itself differs between clip settings."""
    model, tok = sh.default_model()
    episodes = oracle.make_episodes(len(tok), "turn")
    oracle.store_old_log_probs(model, episodes)
    algo = OmegaConf.to_container(_cfg("grpo", "turn", 2).algo, resolve=True)
    base, _ = oracle.oracle_update(model, episodes, algo, "turn", 2, 1e-3, 0.01, 0.5, PERM_SEED, ADAM_EPS)
    wide = {**algo, "loss": {**algo["loss"], "clip_ratio_high": 0.5}}
    other, _ = oracle.oracle_update(model, episodes, wide, "turn", 2, 1e-3, 0.01, 0.5, PERM_SEED, ADAM_EPS)
    assert max(float((base[k] - other[k]).abs().max()) for k in base) > 100 * TOL


@pytest.mark.parametrize("mode,extra", [("turn", {"seq_ratio": "outlier_weighted"}),
                                        ("trajectory", {"seq_ratio": "outlier_weighted", "outlier_beta": 3.0}),
                                        ("trajectory", {"token_bound": 0.3, "clip_ratio_high": 0.2})])
def test_the_oracle_sees_the_sequence_ratio_settings(mode, extra):
    """The outlier-weighted ratio and the token bound change the oracle's step on these episodes (their
    shifted old log-probs give a row outliers), so the cases above that set them test something."""
    model, tok = sh.default_model()
    episodes = oracle.make_episodes(len(tok), mode)
    oracle.store_old_log_probs(model, episodes)
    algo = OmegaConf.to_container(_cfg("sampo", mode, 2).algo, resolve=True)
    changed = {**algo, "loss": {**algo["loss"], **extra}}
    unchanged = {**algo, "loss": {**algo["loss"], **{k: v for k, v in extra.items() if k == "clip_ratio_high"}}}
    base, _ = oracle.oracle_update(model, episodes, unchanged, mode, 2, 1e-3, 0.01, 0.5, PERM_SEED, ADAM_EPS)
    other, _ = oracle.oracle_update(model, episodes, changed, mode, 2, 1e-3, 0.01, 0.5, PERM_SEED, ADAM_EPS)
    assert max(float((base[k] - other[k]).abs().max()) for k in base) > 100 * TOL


@pytest.mark.parametrize("mode", ["turn", "trajectory"])
def test_updates_raise_rewarded_responses_and_lower_the_others(mode):
    """Three on-policy iterations of GRPO: the responses of turns with a positive advantage gain
    log-probability, those with a negative one lose it (summed per sign)."""
    model, tok = sh.default_model()
    episodes = oracle.make_episodes(len(tok), mode)
    oracle.store_old_log_probs(model, episodes, shifts=(0.0,))
    cfg = compose([
        "bc.enabled=false", "algo=grpo", "algo.filter.name=none", f"rollout.sample_mode={mode}", "rl.ppo_epochs=1",
        "rl.mini_batches=1", "rl.optimizer.lr=3e-3", "algo.kl.coef=0", "algo.entropy_coef=0",
    ])
    res = sh.run_update(cfg, episodes, iterations=3)
    trained = oracle.copy.deepcopy(model)
    trained.load_state_dict(res["final_weights"])
    adv = oracle.turn_advantages(episodes, OmegaConf.to_container(cfg.algo, resolve=True)["advantage"])
    change = {1: 0.0, -1: 0.0}
    for ep in episodes:
        for k, t in enumerate(ep.turns):
            a = adv[(ep.episode_id, k)]
            if abs(a) < 1e-6:
                continue
            with torch.no_grad():
                before = oracle.token_log_probs(model, t.prompt_ids, t.response_ids).sum()
                after = oracle.token_log_probs(trained, t.prompt_ids, t.response_ids).sum()
            change[1 if a > 0 else -1] += float(after - before)
    print(f"{mode}: log-prob change of positive-advantage responses {change[1]:+.3f}, negative {change[-1]:+.3f}")
    assert change[1] > 0.05 and change[-1] < -0.05
