"""The collapse detector through a real run: a constructed grad-norm spike at iteration 3 rolls
the policy and the optimiser back to the last good iteration's state, exactly, and training goes on."""

from __future__ import annotations

import torch
from lightning import Callback

from arl_testing import compose
from scale_helpers import one_thread


def _weights(module):
    return {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


class SpikeAt(Callback):
    """Before the detector runs: record what iteration ``at`` produced, then fake a grad-norm spike."""

    def __init__(self, at: int):
        self.at = at
        self.collapsed_weights = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.iteration == self.at:
            self.collapsed_weights = _weights(pl_module)
            pl_module.last_metrics["actor/grad_norm"] = 1.0e6


class Record(Callback):
    """The weights and Adam step count at the start of every iteration (= end of the previous)."""

    def __init__(self):
        self.at_start = {}

    def _record(self, trainer, pl_module, key):
        opt = trainer.optimizers[0]
        steps = [float(s["step"]) for s in opt.state.values()] if opt.state else [0.0]
        self.at_start[key] = (_weights(pl_module), max(steps))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._record(trainer, pl_module, pl_module.iteration + 1)

    def on_train_end(self, trainer, pl_module):
        self._record(trainer, pl_module, "end")


def test_rollback_restores_the_last_good_state_and_continues(tmp_path, tiny_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from arl.run.pipeline import train

    cfg = compose(
        ["debug=smoke", "bc.enabled=false", "rl.iterations=4", "rl.val_every=4", "rollout.val_episodes=2",
         "rollout.max_new_tokens=8", "env.max_turns=2", "algo.filter.name=none",
         "callbacks.collapse.action=rollback", "callbacks.collapse.min_history=2", "callbacks.collapse.kl_threshold=null",
         "callbacks.collapse.valid_drop=null"],
        output_dir=str(tmp_path),
    )
    spike, record = SpikeAt(3), Record()
    with one_thread():
        results = train(cfg, callbacks=[spike, record])
    assert results["iterations_done"] == 4  # rolled back, then went on

    good_w, good_steps = record.at_start[3]  # after iteration 2: the last good state
    back_w, back_steps = record.at_start[4]  # after iteration 3 and its rollback
    assert any(not torch.equal(spike.collapsed_weights[k], good_w[k]) for k in good_w)  # iteration 3 did move
    assert all(torch.equal(back_w[k], good_w[k]) for k in good_w)  # bitwise the last good weights
    assert back_steps == good_steps  # and the optimiser state (Adam step counts) of then
    end_w, _ = record.at_start["end"]
    assert any(not torch.equal(end_w[k], good_w[k]) for k in good_w)  # iteration 4 trained on

    acc = EventAccumulator(str(tmp_path / "tensorboard" / "rl"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("collapse/events")] == [(3, 1.0)]
    assert [e.step for e in acc.Scalars("collapse/grad_norm")] == [3]
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    detector = next(v for k, v in ckpt["callbacks"].items() if k.startswith("CollapseDetector"))
    assert detector["events"] == 1 and detector["history"][0]["action"] == "rollback"


def test_stop_action_and_rollback_without_snapshot_stop_the_trainer():
    """``stop`` sets trainer.should_stop; ``rollback`` with nothing to roll back to stops too."""
    from types import SimpleNamespace

    from arl.callbacks import CollapseDetector

    for action in ("stop", "rollback"):
        det = CollapseDetector(action=action, min_history=1, grad_norm_factor=2.0)
        det.observe({"actor/grad_norm": 1.0})
        trainer = SimpleNamespace(should_stop=False, is_global_zero=True, loggers=[], global_step=0)
        module = SimpleNamespace(iteration=5, last_metrics={"actor/grad_norm": 3.0})
        det.on_train_batch_end(trainer, module, None, None, 0)
        assert trainer.should_stop and det.events == 1 and det.history[0]["action"] == "stop"
