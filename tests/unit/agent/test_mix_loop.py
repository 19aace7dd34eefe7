"""The mix's member draw (deterministic in the task seed and the weights) and :class:`MixLoop` over real
Sokoban and math_tool envs: task order, the caller's episode ids, one member per group, the members' names."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from arl.agent.experts import expert_episodes
from arl.agent.loop import AgentLoop, LoopOptions, Task
from arl.agent.mix import DRAW_SALT, Member, MixLoop, choose_members
from arl.rollout.engine import SamplingParams
from arl_testing import ScriptedEngine

NAMES = ["sokoban", "math_tool"]
PARAMS = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=16, stop=())


def test_a_weight_of_zero_is_never_drawn():
    seeds = list(range(500))
    assert set(choose_members(seeds, NAMES, {"sokoban": 1.0, "math_tool": 0.0})) == {"sokoban"}
    assert set(choose_members(seeds, NAMES, {"sokoban": 0.0, "math_tool": 3.0})) == {"math_tool"}
    assert set(choose_members(seeds, NAMES, {"math_tool": 1.0})) == {"math_tool"}  # a member left out weighs 0


def test_the_draw_is_a_uniform_of_the_seed_against_the_cumulative_weights():
    weights = {"sokoban": 0.25, "math_tool": 0.75}
    seeds = [0, 1, 2, 3, 4, 5, 6, 7, 123456789]
    uniforms = [np.random.default_rng([s, DRAW_SALT]).random() for s in seeds]
    expected = ["sokoban" if u < 0.25 else "math_tool" for u in uniforms]
    assert choose_members(seeds, NAMES, weights) == expected
    assert choose_members(seeds, NAMES, {"sokoban": 1, "math_tool": 3}) == expected  # normalised
    # the exact draw of these seeds, so that a change of the stream shows (a resumed run must draw the same)
    assert expected == ["math_tool"] * 6 + ["sokoban", "sokoban", "math_tool"]
    shares = Counter(choose_members(range(4000), NAMES, weights))
    assert abs(shares["sokoban"] / 4000 - 0.25) < 0.03


def test_weights_that_draw_nothing_are_refused():
    for bad in ({"sokoban": 0.0, "math_tool": 0.0}, {"sokoban": -1.0, "math_tool": 2.0}, {}):
        with pytest.raises(ValueError, match="must be >= 0 and not all 0"):
            choose_members([1], NAMES, bad)


@pytest.fixture()
def mix(tiny):
    _, tokenizer = tiny
    engine = ScriptedEngine(tokenizer, ["<think>go</think><action>up</action>"])
    loops = [
        AgentLoop(engine, tokenizer, "sokoban", {"prompt_style": "compact"}, LoopOptions(history_window=1, max_turns=2)),
        AgentLoop(engine, tokenizer, "math_tool", {"prompt_style": "compact"}, LoopOptions(history_window=1, max_turns=2)),
    ]
    loop = MixLoop([Member(name, lp) for name, lp in zip(NAMES, loops)], {"sokoban": 0.5, "math_tool": 0.5})
    yield loop
    loop.close()


def test_each_task_plays_its_drawn_member_in_task_order_with_the_callers_ids(mix):
    tasks = [Task(group_id=10 + g, seed=s) for g, s in enumerate([0, 4, 7, 5, 1])]
    drawn = mix.choose([t.seed for t in tasks])
    assert drawn == ["sokoban", "math_tool", "sokoban", "math_tool", "sokoban"]
    episodes = mix.run(tasks, 2, PARAMS, first_episode_id=100)
    assert [e.episode_id for e in episodes] == list(range(100, 110))
    assert [(e.group_id, e.seed) for e in episodes] == [(t.group_id, t.seed) for t in tasks for _ in range(2)]
    assert [e.env_name for e in episodes] == [name for name in drawn for _ in range(2)]
    by_group: dict[int, set[str]] = {}
    for e in episodes:
        by_group.setdefault(e.group_id, set()).add(e.env_name)
    assert all(len(names) == 1 for names in by_group.values())  # a group never crosses members
    assert all(e.turns for e in episodes) and mix.last_stats.env_steps == sum(len(e.turns) for e in episodes)
    assert mix.pool.restarts == 0 and not mix.spec.graded and mix.sample_mode == "turn"


def test_new_weights_draw_anew_and_a_teacher_is_refused(mix):
    tasks = [Task(group_id=g, seed=g) for g in range(6)]
    mix.set_weights({"sokoban": 0.0, "math_tool": 1.0})
    assert {e.env_name for e in mix.run(tasks, 1, PARAMS)} == {"math_tool"}
    with pytest.raises(ValueError, match="not members"):
        mix.set_weights({"sokobn": 1.0})
    with pytest.raises(ValueError, match="teacher"):
        mix.run(tasks, 1, PARAMS, teacher="arl.envs.sokoban.expert:expert_response")


def test_expert_episodes_of_a_mix_follow_the_draw_with_each_members_expert(mix):
    seeds = [3, 4, 7, 5]
    episodes = expert_episodes(mix, seeds, group_offset=20)
    assert [e.env_name for e in episodes] == mix.choose(seeds) == ["sokoban", "math_tool", "sokoban", "math_tool"]
    assert [(e.group_id, e.episode_id, e.seed) for e in episodes] == [(20 + i, 20 + i, s) for i, s in enumerate(seeds)]
    for e in episodes:  # each member's own expert answered (a move, a python block), every answer valid
        assert e.turns and all(t.valid for t in e.turns)
        moves = {t.action in ("up", "down", "left", "right") for t in e.turns}
        assert moves == ({True} if e.env_name == "sokoban" else {False}), [t.action for t in e.turns]


def test_members_must_share_one_sample_mode():
    from types import SimpleNamespace

    def loop(mode):
        return SimpleNamespace(sample_mode=mode, engine=None, tokenizer=None, label="", pool=None, spec=None)

    with pytest.raises(ValueError, match="share one sample mode"):
        MixLoop([Member("a", loop("turn")), Member("b", loop("trajectory"))], {"a": 1.0})
    with pytest.raises(ValueError, match="repeat"):
        MixLoop([Member("a", loop("turn")), Member("a", loop("turn"))], {"a": 1.0})
