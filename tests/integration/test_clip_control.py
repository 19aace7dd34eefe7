"""``algo.clip_control`` through the real ``AgenticRLModule`` under a real Lightning Trainer.

- the schedule's bounds are the ones the update uses: one iteration whose factor is f equals the
  independent oracle (``tests/update_oracle.py``) run with eps_low and eps_high times f;
- ``fixed`` is the update without clip control, bit for bit;
- the adaptive factor is saved in the checkpoint and a resumed run continues with it, and the bounds in
  force are logged (``actor/clip_factor``, ``actor/clip_ratio_low``, ``actor/clip_ratio_high``).
"""

from __future__ import annotations

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

import scale_helpers as sh
import update_oracle as oracle
from arl_testing import compose

TOL = 1e-6
PERM_SEED = 1234
ADAM_EPS = 1e-5  # as the oracle test: Adam's eps kept off float noise


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with sh.one_thread():
        yield


def _cfg(algo: str, extra: list[str] = ()):
    return compose([
        "bc.enabled=false", f"algo={algo}", "algo.filter.name=none", "rollout.sample_mode=turn",
        "rl.ppo_epochs=1", "rl.mini_batches=2", "rl.old_log_probs=rollout", "rl.warmup_steps=0",
        "rl.optimizer.lr=1e-3", "rl.optimizer.weight_decay=0.01", f"+rl.optimizer.eps={ADAM_EPS}", "rl.grad_clip=0.5",
        *extra,
    ])


def _episodes():
    model, tok = sh.default_model()
    episodes = oracle.make_episodes(len(tok), "turn")
    oracle.store_old_log_probs(model, episodes)
    return model, episodes


@pytest.mark.parametrize("algo,factor", [("sampo", 50.0), ("grpo", 0.5)])
def test_the_scheduled_bounds_are_the_updates(algo, factor):
    """schedule with iterations 1: iteration 1's update uses f(1) = end_factor, so it must equal the oracle
    with the bounds scaled, which itself differs from the oracle with the configured bounds."""
    model, episodes = _episodes()
    cfg = _cfg(algo, ["algo.clip_control.mode=schedule", "algo.clip_control.iterations=1",
                      f"algo.clip_control.end_factor={factor}"])
    res = sh.run_update(cfg, episodes, callbacks=[sh.SeedBeforeUpdate(PERM_SEED)])
    algo_cfg = OmegaConf.to_container(cfg.algo, resolve=True)
    loss = algo_cfg["loss"]
    scaled = {**algo_cfg, "loss": {**loss, "clip_ratio_low": loss["clip_ratio_low"] * factor,
                                   "clip_ratio_high": loss["clip_ratio_high"] * factor}}
    want, _ = oracle.oracle_update(model, episodes, scaled, "turn", 2, 1e-3, 0.01, 0.5, PERM_SEED, ADAM_EPS)
    configured, _ = oracle.oracle_update(model, episodes, algo_cfg, "turn", 2, 1e-3, 0.01, 0.5, PERM_SEED, ADAM_EPS)
    got = res["weights"]
    assert max(float((want[k] - configured[k]).abs().max()) for k in want) > 100 * TOL  # the factor matters here
    assert max(float((want[k] - got[k]).abs().max()) for k in want) <= TOL
    m = res["metrics"]
    assert m["actor/clip_factor"] == factor
    assert (m["actor/clip_ratio_low"], m["actor/clip_ratio_high"]) == pytest.approx(
        (loss["clip_ratio_low"] * factor, loss["clip_ratio_high"] * factor))
    # the IS diagnostics count the tokens outside the bounds in force: as a fixed run with those bounds configured
    fixed = sh.run_update(_cfg(algo, [f"algo.loss.clip_ratio_low={loss['clip_ratio_low'] * factor}",
                                      f"algo.loss.clip_ratio_high={loss['clip_ratio_high'] * factor}"]),
                          episodes, callbacks=[sh.SeedBeforeUpdate(PERM_SEED)])
    diagnostics = {k: v for k, v in m.items() if k.startswith("is/tokens_")}
    assert diagnostics == pytest.approx({k: fixed["metrics"][k] for k in diagnostics}, abs=1e-9)
    unscaled = sh.run_update(_cfg(algo), episodes, callbacks=[sh.SeedBeforeUpdate(PERM_SEED)])["metrics"]
    assert any(abs(unscaled[k] - v) > 1e-3 for k, v in diagnostics.items())  # the bounds move some token across


class _NoClipControl:
    """The module's update as it was before clip control: the configured algo, no factor."""

    def __init__(self, cfg):
        self.cfg = cfg

    def algo_at(self, algo, iteration):
        return algo

    def factor_at(self, iteration):
        return 1.0

    def observe(self, metrics):
        pass


def test_fixed_mode_is_bit_identical_to_no_clip_control(monkeypatch):
    model, episodes = _episodes()
    cfg = _cfg("sampo")
    assert cfg.algo.clip_control.mode == "fixed"
    fixed = sh.run_update(cfg, episodes, callbacks=[sh.SeedBeforeUpdate(PERM_SEED)], iterations=2)
    monkeypatch.setattr("arl.modules.rl_module.ClipControl", _NoClipControl)
    without = sh.run_update(cfg, episodes, callbacks=[sh.SeedBeforeUpdate(PERM_SEED)], iterations=2)
    moved = max(float((fixed["final_weights"][k] - model.state_dict()[k]).abs().max()) for k in fixed["final_weights"])
    assert moved > 1e-4
    assert all(torch.equal(fixed["final_weights"][k], without["final_weights"][k]) for k in fixed["final_weights"])
    assert fixed["last_metrics"]["actor/clipfrac"] == without["last_metrics"]["actor/clipfrac"]
    assert fixed["last_metrics"]["actor/clip_factor"] == 1.0
    assert fixed["last_metrics"]["actor/clip_ratio_high"] == cfg.algo.loss.clip_ratio_high


def _trainer(max_epochs: int) -> L.Trainer:
    return L.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                     callbacks=[sh.SeedBeforeUpdate(PERM_SEED)])


def test_the_adaptive_factor_is_saved_and_restored_by_a_checkpoint(tmp_path):
    """Two iterations of SAMPO with the controller on (its clip fraction against the stored log-probs is far
    above the target, so it widens the range), a checkpoint, and a resumed Trainer: the third iteration's
    update uses the factor the second left (a fresh module would start at 1)."""
    from arl.run.builders import build_rl_module, load_model
    from arl.run.settings import run_settings

    _, episodes = _episodes()
    run = run_settings(_cfg("sampo", ["algo.clip_control.mode=adaptive", "algo.clip_control.target=0.05"]))
    modules = []
    for epochs, iterations, ckpt in ((1, 2, None), (2, 1, tmp_path / "two.ckpt")):
        model, tok, _ = load_model(run.model)
        module = build_rl_module(run, model.train(), tok)
        trainer = _trainer(epochs)
        trainer.fit(module, datamodule=sh.FixedRollouts(episodes, iterations=iterations, pad_id=module.pad_id),
                    ckpt_path=ckpt)
        if ckpt is None:
            first = dict(module.last_metrics)
            trainer.save_checkpoint(tmp_path / "two.ckpt")
        modules.append(module)
    before, resumed = modules
    assert first["actor/clipfrac"] > 0.05 and first["actor/old_log_probs_source"] == 1.0
    assert before.iteration == 2 and resumed.iteration == 3
    saved = before.clip_control.factor
    # the factor the second iteration used, times the step the controller took after it (widening)
    assert saved > first["actor/clip_factor"] > 1.0
    assert torch.load(tmp_path / "two.ckpt", weights_only=False)["arl"]["clip_control"] == {"mode": "adaptive",
                                                                                           "factor": saved}
    logged = resumed.last_metrics
    assert logged["actor/clip_factor"] == saved
    assert logged["actor/clip_ratio_low"] == pytest.approx(3e-3 * saved)
    assert logged["actor/clip_ratio_high"] == pytest.approx(4e-3 * saved)
    assert resumed.clip_control.factor > saved
