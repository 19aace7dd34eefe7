"""Failed episodes in validation are losses, counted, never dropped: the RL module's validation on the real
tiny model and a real Lightning Trainer, over episodes of an env that raises on one seed and returns a NaN
reward on another (tests/faulty_env.py); the same rule in ``run_validation``'s metrics (src/eval.py, BC)."""

import copy
import math

import lightning as L
import pytest
from torch.utils.data import DataLoader

from arl.agent.loop import AgentLoop, LoopOptions, Task
from arl.agent.metrics import episode_metrics
from arl.agent.samples import episode_table
from arl.datamodules.batches import ValidationBatch
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine
from arl_testing import compose

SEEDS = [1, 3, 4, 11]  # healthy, raises at its second step, NaN reward at its second step, healthy


@pytest.fixture(scope="module")
def episodes(tiny):
    model, tok = tiny
    loop = AgentLoop(HFEngine(model, tok), tok, "faulty_env:FaultyEnv", {"length": 3},
                     LoopOptions(history_window=1, max_turns=3, n_workers=0))
    try:
        return loop.run([Task(i, s) for i, s in enumerate(SEEDS)], group_size=1,
                        params=SamplingParams(temperature=1.0, max_new_tokens=4))
    finally:
        loop.close()


def test_a_nan_reward_fails_its_episode(episodes):
    by_seed = {e.seed: e for e in episodes}
    assert by_seed[4].env_error and by_seed[3].env_error
    assert all(math.isfinite(t.reward) for e in episodes for t in e.turns)  # no NaN kept in a turn
    assert by_seed[1].won and by_seed[11].won and not by_seed[4].won


def test_validation_counts_failed_episodes_as_losses(episodes, tiny):
    from arl.run.builders import build_rl_module
    from arl.run.settings import run_settings

    model, tok = tiny
    module = build_rl_module(run_settings(compose(["debug=smoke", "bc.enabled=false"])), copy.deepcopy(model), tok)
    batch = ValidationBatch(episode_table(episodes), 0, 0.0, "val_sampled", tuple(e.task_type for e in episodes),
                            tuple(e.seed for e in episodes))
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    loader = DataLoader([batch], batch_size=None, collate_fn=lambda b: b)  # the datamodule's batches, as it yields them
    trainer.validate(module, dataloaders=loader, verbose=False)
    # 2 of 4 won: 0.5, not the 1.0 of the two that did not fail; the failures counted
    assert module.last_val["val/success_rate"] == pytest.approx(0.5)
    assert module.last_val["val/env_errors"] == 2.0
    assert module.last_val["val/return_mean"] == pytest.approx(6.0)  # over the episodes that ran: 1 + 2 + 3


def test_run_validation_metrics_count_failed_episodes_as_losses(episodes):
    m = dict(episode_metrics(episodes, "val/", failed_lose=True))
    assert m["val/success_rate"] == pytest.approx(0.5) and m["val/env_errors"] == 2
    training = dict(episode_metrics(episodes, "rollout/"))  # training's rates: over what it trains on
    assert training["rollout/success_rate"] == pytest.approx(1.0) and training["rollout/env_errors"] == 2
