"""SokobanEnv: the TextEnv contract, exact rewards, hostile actions, expert episodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.envs.base import INFO_KEYS, StepResult, TextEnv
from arl.envs.registry import make_env
from arl.envs.sokoban import Level, SokobanEnv, expert_actions, expert_think, render_grid
from arl.envs.sokoban.level import ACTIONS

EXTRA_KEYS = ("deadlock", "steps", "action_is_effective")


def _level(*rows: str) -> Level:
    return Level.from_text("\n".join(rows))


def _env_at(level: Level, **kwargs) -> SokobanEnv:
    env = SokobanEnv(**kwargs)
    env.reset_to_level(level)
    return env


def _check_info(info: dict) -> None:
    for key in INFO_KEYS + EXTRA_KEYS:
        assert key in info, key
    assert info["task_type"] == "sokoban"
    assert info["admissible_actions"] == list(ACTIONS)
    assert isinstance(info["won"], bool) and isinstance(info["deadlock"], bool)
    assert 0.0 <= info["score"] <= 1.0


def test_contract_and_registry():
    env = make_env("sokoban")
    assert isinstance(env, SokobanEnv) and isinstance(env, TextEnv)
    assert env.spec.name == "sokoban"
    assert env.spec.invalid_action == "noop" and env.spec.check_admissible
    assert env.spec.max_turns == env.max_steps == 10
    obs, info = env.reset(0)
    _check_info(info)
    assert info["anchor"] == obs == render_grid(env.level)
    assert info["steps"] == 0 and not info["won"]
    prompt = env.spec.render_prompt(obs, "", info)
    assert prompt.endswith("Current state:\n" + obs)
    assert "<think>" in prompt and "<action>" in prompt
    assert len(prompt.split("Current state:")[0].split()) < 80
    with_history = env.spec.render_prompt(obs, "Turn 1: up", info)
    assert "Turn 1: up\nCurrent state:" in with_history
    result = env.step("up")
    assert isinstance(result, StepResult)
    _check_info(result.info)
    env.close()


def test_reset_is_deterministic():
    a, b = SokobanEnv(), SokobanEnv()
    for seed in range(30):
        assert a.reset(seed)[0] == b.reset(seed)[0]
    env = SokobanEnv()
    distinct = {env.reset(seed)[0] for seed in range(100)}
    assert len(distinct) >= 50
    # resetting again restores the start state after moves
    obs, _ = env.reset(7)
    for action in ACTIONS:
        env.step(action)
    assert env.reset(7)[0] == obs


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError):
        SokobanEnv().step("up")


def test_wall_bump_and_noop():
    env = _env_at(_level("######", "#@$. #", "#    #", "######"))
    obs = render_grid(env.level)
    for action in ["up", "left", "noop"]:
        result = env.step(action)
        assert result.reward == pytest.approx(-0.1)
        assert not result.done and result.observation == obs
        assert not result.info["action_is_effective"]
    assert result.info["steps"] == 3


def test_push_last_box_onto_target_wins():
    env = _env_at(_level("######", "#@$. #", "#    #", "######"))
    result = env.step("right")
    assert result.reward == pytest.approx(-0.1 + 1 + 10)
    assert result.done and result.info["won"] and result.info["score"] == 1.0
    assert result.info["action_is_effective"]
    assert "√" in result.observation
    after = env.step("left")  # stepping after the end changes nothing
    assert after.done and after.reward == 0.0 and after.observation == result.observation


def test_push_box_off_target_and_back_on():
    level = _level("#######", "#@*  .#", "#  $  #", "#######")
    env = _env_at(level, max_steps=50)
    off = env.step("right")  # from target to floor
    assert off.reward == pytest.approx(-1 - 0.1)
    assert off.info["score"] == 0.0 and not off.done
    assert env.step("right").reward == pytest.approx(-0.1)
    on = env.step("right")  # onto the far target, but one box is still off
    assert on.reward == pytest.approx(1 - 0.1)
    assert on.info["score"] == 0.5 and not on.done


def test_push_from_target_to_target_is_neutral():
    env = _env_at(_level("######", "#@*.$#", "#    #", "######"))
    result = env.step("right")
    assert result.reward == pytest.approx(-0.1)
    assert result.info["score"] == 0.5 and result.info["action_is_effective"]


def test_max_steps_ends_episode():
    env = _env_at(_level("######", "#@$. #", "#    #", "######"), max_steps=3)
    results = [env.step("down") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert not results[-1].info["won"] and results[-1].info["steps"] == 3


def test_deadlock_flag_and_end_on_deadlock():
    level = _level("######", "#   .#", "#    #", "# $@ #", "#    #", "######")
    for end in (False, True):
        env = _env_at(level, end_on_deadlock=end, max_steps=20)
        assert not env.step("noop").info["deadlock"]
        result = env.step("left")  # box against the left wall, no target on that wall
        assert result.info["deadlock"]
        assert result.done is end
        assert result.reward == pytest.approx(-0.1)


HOSTILE = [
    "",
    " ",
    "\n",
    "noop",
    "NOOP",
    "None",
    "null",
    "nan",
    "x" * 100_000,
    "\x00\x07\x1b[2J",
    "<action>up</action>",
    "up up",
    "up || left",
    "u p",
    "ｕｐ",
    "√",
    "\udcff",
    "up\x00",
]


@pytest.mark.parametrize("multi_action", [False, True])
def test_hostile_actions_are_noops(multi_action):
    env = _env_at(
        _level("######", "#@$. #", "#    #", "######"), max_steps=1000, multi_action=multi_action
    )
    obs = render_grid(env.level)
    hostile = (
        HOSTILE if not multi_action else [a for a in HOSTILE if "||" not in a] + ["||", " || "]
    )
    for action in hostile + [None, 3, b"up", ["up"]]:
        result = env.step(action)
        assert result.observation == obs and not result.done
        assert result.reward < 0
        _check_info(result.info)


def test_actions_are_case_insensitive_and_stripped():
    for action in ["RIGHT", " Right\n", "\tright "]:
        env = _env_at(_level("######", "#@$. #", "#    #", "######"))
        assert env.step(action).info["won"]


def test_multi_action_turns():
    level = _level("#######", "#@ $ .#", "#     #", "#######")
    env = _env_at(level, multi_action=True, max_steps=10)
    assert not env.spec.check_admissible
    assert env.spec.render_prompt("grid", "", env.reset_to_level(level)[1]).count("||") >= 1
    result = env.step("right || right || right || right")  # capped at 3 moves
    assert (
        result.reward == pytest.approx(-0.3 + 1 + 10) and result.done and result.info["steps"] == 3
    )
    env = _env_at(level, multi_action=True, max_steps=10)
    result = env.step("up || jump || down")  # wall, no-op, move: three steps
    assert result.reward == pytest.approx(-0.3) and result.info["steps"] == 3
    assert result.info["action_is_effective"]


def test_expert_episodes_always_win():
    """200 seeds: the expert plan wins within max_steps and its return matches the formula."""
    env = SokobanEnv()
    for seed in range(200):
        env.reset(seed)
        start = env.level
        plan = expert_actions(env)
        assert 1 <= len(plan) <= env.max_steps
        total, done = 0.0, False
        for i, action in enumerate(plan):
            assert not done
            assert expert_think(plan[i:]).startswith("plan: " + action)
            result = env.step(action)
            total += result.reward
            done = result.done
        assert done and result.info["won"], seed
        expected = 10 + (start.num_boxes - start.boxes_on_targets) - 0.1 * len(plan)
        assert total == pytest.approx(expected), seed


def test_expert_multi_box_and_multi_action():
    env = SokobanEnv(dim_room=(7, 7), num_boxes=2, max_steps=30, multi_action=True)
    for seed in range(50):
        env.reset(seed)
        plan = expert_actions(env)
        for i in range(0, len(plan), 3):
            result = env.step(" || ".join(plan[i : i + 3]))
        assert result.done and result.info["won"], seed


def test_fit_max_steps():
    tight = SokobanEnv(dim_room=(7, 7), num_boxes=2, max_steps=4)
    loose = SokobanEnv(dim_room=(7, 7), num_boxes=2, max_steps=4, fit_max_steps=False)
    replaced = 0
    for seed in range(100):
        tight.reset(seed)
        assert len(expert_actions(tight)) <= 4
        replaced += tight.level != loose.level_for_seed(seed)
    assert replaced > 0


def test_expert_think():
    assert expert_think(["up", "right", "right", "down"]) == "plan: up right right"
    assert expert_think(["left"]) == "plan: left"
    assert expert_think([]) == "plan: done"


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    actions=st.lists(st.sampled_from(list(ACTIONS) + ["noop"]), max_size=40),
)
def test_random_play_invariants(seed, actions):
    env = SokobanEnv(dim_room=(7, 7), num_boxes=2, internal_walls=2, max_steps=40)
    env.reset(seed)
    start = env.level
    total, steps = 0.0, 0
    for action in actions:
        result = env.step(action)
        total += result.reward
        steps += 1
        level = env.level
        assert len(level.boxes) == 2 and level.player not in level.boxes
        assert not (level.boxes & level.walls) and level.player not in level.walls
        assert result.observation.count("P") + result.observation.count("S") == 1
        if result.done:
            break
    expected = -0.1 * steps + (env.level.boxes_on_targets - start.boxes_on_targets)
    expected += 10 * env.level.solved
    assert total == pytest.approx(expected)


def test_compact_prompt_style_is_short_and_keeps_format_and_grid():
    from arl.envs.sokoban import SokobanEnv

    full, compact = SokobanEnv(), SokobanEnv(prompt_style="compact")
    obs, info = compact.reset(3)
    text = compact.spec.render_prompt(obs, "Previous actions: up", info)
    assert "<action>up|down|left|right</action>" in text and text.endswith(obs)
    assert "Previous actions: up" in text
    assert len(text) < len(full.spec.render_prompt(obs, "Previous actions: up", info)) / 2
    import pytest

    with pytest.raises(ValueError, match="prompt_style"):
        SokobanEnv(prompt_style="nope")
