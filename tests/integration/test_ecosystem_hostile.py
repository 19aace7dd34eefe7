"""The ecosystem adapters under hostile use (arl.envs.adapters), each on a real environment:

- ``env=gym`` on gymnasium envs of ``tests/ecosystem_envs.py``: a ``Text`` action space with gymnasium's
  default charset takes a multi-word action; a ``Discrete`` one maps an integer answer (with its
  ``start``), a ``Box`` one is refused at start-up; a step that hangs past the pool's timeout fails its
  episode, not the rollout nor the next episode; an env's ``info["invalid_action"]`` makes the turn invalid
  (the valid-action ratio, the samples the format penalty reads);
- ``env=textarena``: ids without a raw variant play; a lost 2048 (a completion reward above 0) is no win,
  a solved one is; the game's refused moves are invalid turns; two episodes of one seed play the same game
  however they are interleaved, and Python's global ``random`` is left as it was.

The policy is a scripted engine (fixed answers, the tiny model's tokenizer), so each answer is known; the
adapters and the envs are the real ones.
"""

from __future__ import annotations

import random

import pytest

from arl_testing import ScriptedEngine, action_answer

pytest.importorskip("gymnasium", reason="the ecosystem extra: pip install -e '.[ecosystem]'")
pytest.importorskip("textarena", reason="the ecosystem extra: pip install -e '.[ecosystem]'")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # gymnasium's passive checker on text spaces


def _loop(tiny, env: str, kwargs: dict, actions: list[str], max_turns: int = 3, n_workers: int = 0,
          step_timeout: float = 60.0):
    """An agent loop on ``env`` whose policy answers ``actions`` (:class:`ScriptedEngine`)."""
    from arl.agent.loop import AgentLoop, LoopOptions

    _, tok = tiny
    options = LoopOptions(history_window=1, max_turns=max_turns, n_workers=n_workers, step_timeout=step_timeout,
                          progress_every=None)
    return AgentLoop(ScriptedEngine(tok, [action_answer(a) for a in actions]), tok, env, kwargs, options)


def _run(loop, tasks, group_size: int = 1):
    """The episodes of ``tasks`` (``(group, seed)`` pairs), the scripted answers starting afresh."""
    from arl.agent.loop import Task
    from arl.rollout.engine import SamplingParams

    loop.engine.restart(loop.engine.texts)
    return loop.run([Task(g, s) for g, s in tasks], group_size, SamplingParams(max_new_tokens=32))


def _play(tiny, env: str, kwargs: dict, actions: list[str], tasks, group_size: int = 1, max_turns: int = 3):
    """The episodes of ``tasks`` played by a loop of their own (in this process)."""
    loop = _loop(tiny, env, kwargs, actions, max_turns)
    try:
        return _run(loop, tasks, group_size)
    finally:
        loop.close()


# ------------------------------------------------------------------------------------------- gymnasium
def test_a_default_charset_text_space_takes_a_multi_word_action(tiny):
    """gymnasium's default Text charset has no space; the env author set none, so the adapter checks only
    the length: "open the door" reaches the env and wins; an action past max_length is still refused."""
    from arl.envs.registry import make_env

    env = make_env("gym", id="ecosystem_envs:Notebook-v0")
    env.reset(seed=0)
    too_long = env.step("x" * 41)
    assert too_long.info["invalid_action"] and "41 characters" in too_long.info["error"]
    assert env.env.unwrapped.notes == []
    wrote = env.step("open the door")
    assert not wrote.info["invalid_action"] and wrote.done and wrote.reward == 1.0 and wrote.info["won"]
    env.close()
    (episode,) = _play(tiny, "gym", {"id": "ecosystem_envs:Notebook-v0"}, ["open the door"], [(0, 1)])
    assert episode.won and episode.num_turns == 1 and episode.turns[0].valid and not episode.env_error


def test_a_discrete_space_maps_an_integer_answer_and_a_box_space_is_refused(tiny):
    """Discrete(3, start=1): "3" is the env's 3, "0" (below start), "4" and "three" are refused, state kept;
    the prompt says which integers; a Box action space stops at start-up naming what the adapter needs."""
    from arl.envs.registry import make_env

    env = make_env("gym", id="ecosystem_envs:PickDoor-v0")
    env.reset(seed=4)
    prize = env.env.unwrapped.prize
    for bad in ("0", "4", "three", ""):
        refused = env.step(bad)
        assert refused.info["invalid_action"] and not refused.done and env.env.unwrapped.picked == []
    picked = env.step(f" {prize} ")
    assert env.env.unwrapped.picked == [prize] and isinstance(env.env.unwrapped.picked[0], int)
    assert picked.done and picked.info["won"] and not picked.info["invalid_action"]
    assert "an integer from 1 to 3" in env.spec.render_prompt("Three doors.", "", {})
    env.close()
    (episode,) = _play(tiny, "gym", {"id": "ecosystem_envs:PickDoor-v0"}, [str(prize)], [(0, 4)])
    assert episode.won and episode.turns[0].valid
    with pytest.raises(ValueError, match=r"Joystick-v0 has action space Box.*needs a gymnasium.spaces.Text .*or a Discrete"):
        make_env("gym", id="ecosystem_envs:Joystick-v0")


def test_a_space_class_of_the_envs_own_decides_by_its_contains():
    """A text space that is not gymnasium's (a package's own Space subclass): its contains() decides, and
    one that raises on a string does not contain it."""
    import gymnasium

    from arl.envs.adapters.gym_text import RejectedAction, action_converter

    class Words(gymnasium.Space):
        def contains(self, x):
            return len(x.split()) == 2  # raises on anything but a string

    convert = action_converter(Words())
    assert convert("go north") == "go north"
    for bad in ("north", 3):
        with pytest.raises(RejectedAction):
            convert(bad)


def test_a_step_past_the_timeout_fails_its_episode_and_nothing_else(tiny):
    """Seed 1 hangs at its first step (after moving its state); the pool's timeout fails that episode
    (env_error, left out of the samples), the other episode of the rollout plays on to its win, and the
    next rollout, the same worker, is unaffected."""
    from arl.agent.samples import turn_samples

    loop = _loop(tiny, "gym", {"id": "ecosystem_envs:Stall-v0"}, ["go"], n_workers=1, step_timeout=1.0)
    try:
        hung, healthy = _run(loop, [(0, 1), (1, 2)])
        assert hung.env_error and not hung.won and hung.num_turns == 1
        assert not healthy.env_error and healthy.won and healthy.num_turns == 3
        assert {s.episode_id for s in turn_samples([hung, healthy])} == {healthy.episode_id}
        assert loop.pool.errors == 1 and loop.pool.restarts == 0  # the alarm interrupted the step, the worker stayed
        (after,) = _run(loop, [(0, 4)])
        assert not after.env_error and after.won and [t.valid for t in after.turns] == [True] * 3
    finally:
        loop.close()


def test_an_env_marking_invalid_action_makes_the_turn_invalid(tiny):
    """Picky refuses "hello" through info["invalid_action"]: a well-formed answer, an invalid turn (its
    reason says the env refused it), counted in the valid-action ratio and in the samples the format
    penalty reads; "please" then wins as a valid turn."""
    from arl.agent.metrics import episode_metrics
    from arl.agent.parsing import REJECTED_BY_ENV
    from arl.agent.samples import turn_samples

    (episode,) = _play(tiny, "gym", {"id": "ecosystem_envs:Picky-v0"}, ["hello", "hello", "please"], [(0, 0)])
    assert [t.valid for t in episode.turns] == [False, False, True] and episode.won
    assert episode.turns[0].reason == REJECTED_BY_ENV and episode.turns[0].reward == pytest.approx(-0.1)
    assert [s.valid for s in turn_samples([episode])] == [False, False, True]
    metrics = episode_metrics([episode])
    assert metrics["rollout/valid_action_ratio"] == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------------------- TextArena
def test_textarena_plays_an_id_without_a_raw_variant():
    """GuessTheNumber-v0-train has no -raw variant: the id is played as given (its wrappers' text)."""
    from arl.envs.adapters.textarena_env import registered_variant
    from arl.envs.registry import make_env

    assert registered_variant("GuessTheNumber-v0") == "GuessTheNumber-v0-raw"
    assert registered_variant("GuessTheNumber-v0-train") == "GuessTheNumber-v0-train"
    env = make_env("textarena", id="GuessTheNumber-v0-train")
    _, info = env.reset(seed=5)
    number = env.env.state.game_state["game_number"]
    assert "Guess The Number" in info["task"] and info["task_type"] == "GuessTheNumber-v0-train"
    won = env.step(f"[{number}]")
    assert won.done and won.info["won"] and won.reward == 1.0
    env.close()


def test_a_lost_2048_is_no_win_and_a_solved_one_is():
    """2048 scores a loss by its completion (above 0): two refused moves end the game lost, each refused
    move an invalid turn; 2048 to 32 (ultra-easy) played by a seeded random player is solved, reward 1,
    won."""
    from arl.envs.registry import make_env

    env = make_env("textarena", id="2048-v0")
    env.reset(seed=1)
    warned = env.step("")
    assert not warned.done and warned.info["invalid_action"]
    lost = env.step("[Sideways]")
    assert lost.done and 0.0 < lost.reward < 1.0 and not lost.info["won"] and lost.info["score"] == 0.0
    assert lost.info["invalid_action"] and lost.info["reason"].startswith("Invalid Move")
    env.close()

    env = make_env("textarena", id="2048-v0-ultra-easy", max_turns=500)
    env.reset(seed=1)
    player = random.Random(0)
    for _ in range(500):
        result = env.step(player.choice(["[Up]", "[Left]", "[Down]", "[Right]"]))
        if result.done:
            break
    assert result.done and result.reward == 1.0 and result.info["won"] and "reached 32" in result.info["reason"]


def test_textarena_episodes_of_one_seed_play_one_game_and_leave_the_global_random_alone(tiny):
    """2048 draws each new tile from Python's global random, which TextArena reseeds at reset: the two
    members of a group (one seed, stepped in turn by the loop, in this process) see the same boards for
    the same moves, the same as that seed played alone; and the trainer's global random state is what
    it was after reset and steps."""
    from arl.envs.registry import make_env

    moves = ["[Up]", "[Left]", "[Down]", "[Right]", "[Up]", "[Left]"]
    random.seed(1234)
    before = random.getstate()
    a, b = _play(tiny, "textarena", {"id": "2048-v0", "max_turns": 6}, moves, [(0, 7)], group_size=2, max_turns=6)
    assert random.getstate() == before
    seen_a = [t.observation for t in a.turns]
    assert len(seen_a) >= 4 and seen_a == [t.observation for t in b.turns]

    alone = make_env("textarena", id="2048-v0", max_turns=6)
    alone.reset(seed=7)
    assert random.getstate() == before
    boards = [alone.step(move).observation for move in moves[: len(seen_a) - 1]]
    assert random.getstate() == before
    assert boards == seen_a[1:]  # turn k's observation is the answer to move k - 1
    alone.close()
