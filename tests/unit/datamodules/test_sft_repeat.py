"""bc.repeat_turns: the turns whose answer a pattern finds are trained more than once an epoch."""

from __future__ import annotations

import pytest

from arl.agent.records import Episode, Turn
from arl.datamodules.sft_datamodule import SFTDataModule, repeated_turns
from arl.run.settings import run_settings
from arl.utils.config import ConfigError, container
from arl_testing import compose


def _turn(answer: str, k: int) -> Turn:
    return Turn(prompt_ids=[1, 2, k + 3], response_ids=[5, 6], rollout_log_probs=[0.0, 0.0], response_text=answer,
                action=answer, valid=True, reason="", reward=0.0, done=False, anchor_key=k)


def _episode(i: int, answers: list[str], env_error: bool = False) -> Episode:
    return Episode(group_id=i, episode_id=i, seed=i, env_name="webshop", task_type="t",
                   turns=[_turn(a, k) for k, a in enumerate(answers)], won=True, env_error=env_error)


EPISODES = [
    _episode(0, ["search[red mug]", "click[B0AAAABBBB]", "click[buy now]"]),
    _episode(1, ["search[lamp]", "click[B0ZZZZ1234]", "click[next >]", "click[B0QQQQ0000]"], env_error=True),
    _episode(2, ["search[tea]", "click[next >]", "click[B0CCCCDDDD]", "click[large]", "click[buy now]"]),
]
PRODUCT_CLICK = r"click\[B0[A-Z0-9]{8}\]"


def test_the_matching_turns_are_found_in_turn_order_and_env_errors_are_skipped():
    dm = SFTDataModule(EPISODES, pad_id=0, val_fraction=0.0)
    assert len(dm.train_samples) == 8 and dm.repeated == 0  # 3 + 5 turns: the env-error episode plays no part
    found = repeated_turns(dm.train_samples, EPISODES, PRODUCT_CLICK)
    assert [(s.episode_id, s.input_ids[2]) for s in found] == [(0, 4), (2, 5)]  # turn 1 of episode 0, turn 2 of 2


def test_repeated_turns_are_trained_times_an_epoch_and_held_out_ones_once():
    dm = SFTDataModule(EPISODES, pad_id=0, val_fraction=0.0, repeat_pattern=PRODUCT_CLICK, repeat_times=4)
    assert dm.repeated == 2 and len(dm.train_samples) == 8 + 2 * 3
    assert sum(s.episode_id == 0 and s.input_ids[2] == 4 for s in dm.train_samples) == 4
    assert dm.steps_per_epoch == -(-14 // dm.batch_size)
    held = SFTDataModule(EPISODES, pad_id=0, val_fraction=0.5, repeat_pattern=PRODUCT_CLICK, repeat_times=4)
    assert len(held.val_samples) == 3  # the first episode, held out once
    assert held.repeated == 1 and len(held.train_samples) == 5 + 3
    once = SFTDataModule(EPISODES, pad_id=0, val_fraction=0.0, repeat_pattern=PRODUCT_CLICK, repeat_times=1)
    assert len(once.train_samples) == 8


def test_trajectory_samples_cannot_be_repeated_by_turn():
    with pytest.raises(ValueError, match="repeat_turns"):
        SFTDataModule(EPISODES, pad_id=0, sample_mode="trajectory", repeat_pattern=PRODUCT_CLICK, repeat_times=2)


def test_a_bad_pattern_is_a_config_error():
    assert run_settings(container(compose([]))).bc.repeat_turns.pattern is None
    with pytest.raises(ConfigError) as err:
        run_settings(container(compose(["bc.repeat_turns.pattern='click['", "bc.repeat_turns.times=0"])))
    assert "bc.repeat_turns.pattern" in str(err.value) and "bc.repeat_turns.times" in str(err.value)
