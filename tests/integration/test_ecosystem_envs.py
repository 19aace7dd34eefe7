"""Environments from the ecosystem (arl.envs.adapters), each on a real environment of its kind:

- ``env=gym``: a gymnasium text env the test registers (``tests/ecosystem_envs.py``);
- ``env=textarena``: TextArena's single-player GuessTheNumber, offline.

Each plays real episodes through the agent loop with the tiny model and a real tokenizer, the mapping
checked by hand where the outcome is known (a right guess wins, a rejected action is an invalid turn
that keeps the state, the same seed gives the same game), and ``src/train.py env=<kind>`` runs BC-free RL
iterations whose validation episodes the viewer's page reads. The packages are the ``ecosystem`` extra:
without it these tests skip, and a run stops at start-up naming the extra.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import scale_helpers as sh
from arl_testing import ROOT, compose

pytest.importorskip("gymnasium", reason="the ecosystem extra: pip install -e '.[ecosystem]'")
pytest.importorskip("textarena", reason="the ecosystem extra: pip install -e '.[ecosystem]'")

GYM_ID = "ecosystem_envs:GuessDigit-v0"


def _loop(tiny, env: str, kwargs: dict):
    from arl.agent.loop import AgentLoop, LoopOptions
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    return AgentLoop(HFEngine(model, tok), tok, env, kwargs, LoopOptions(history_window=1, max_turns=3))


def test_the_gym_adapter_maps_a_gymnasium_env():
    from arl.envs.registry import make_env

    env = make_env("gym", id=GYM_ID)
    obs, info = env.reset(seed=3)
    target = env.env.unwrapped.target
    assert info["task_type"] == "guess_digit" and info["task"].startswith("Guess the hidden digit")
    rejected = env.step("x")  # not in the action space: an invalid turn, the state kept
    assert rejected.info["invalid_action"] and not rejected.done and rejected.reward == 0.0
    assert rejected.observation == obs and env.env.unwrapped.guesses == 0
    wrong = env.step(str(target % 9 + 1))
    assert wrong.reward == pytest.approx(-0.1) and not wrong.done and not wrong.info["won"]
    assert wrong.info["anchor"].startswith("guesses=1")
    right = env.step(str(target))
    assert right.done and right.reward == 1.0 and right.info["won"]
    assert make_env("gym", id=GYM_ID).reset(seed=3) == (obs, info)  # the same seed, the same game
    env.close()


def test_the_textarena_adapter_plays_a_single_player_game():
    from arl.envs.registry import make_env

    env = make_env("textarena", id="GuessTheNumber-v0")
    _, info = env.reset(seed=5)
    number = env.env.state.game_state["game_number"]
    assert info["task_type"] == "GuessTheNumber-v0" and "Guess The Number" in info["task"]
    assert f'"game_number": {number}' in info["anchor"]  # the game's state, not its message text
    invalid = env.step("")  # an answer that did not parse: the game's own invalid-move rule, not an ended run
    assert not invalid.done and "invalid move" in invalid.observation
    low = env.step(f"[{max(1, number - 1)}]") if number > 1 else env.step("[2]")
    assert not low.done and low.info["anchor"] != info["anchor"]
    won = env.step(f"[{number}]")
    assert won.done and won.reward == 1.0 and won.info["won"] and won.info["score"] == 1.0
    again = make_env("textarena", id="GuessTheNumber-v0")
    again.reset(seed=5)
    assert again.env.state.game_state["game_number"] == number
    env.close()
    again.close()


@pytest.mark.parametrize("env, kwargs", [("gym", {"id": GYM_ID}), ("textarena", {"id": "GuessTheNumber-v0"})])
def test_real_episodes_through_the_agent_loop(tiny, env, kwargs):
    """The untrained tiny model mostly fails the answer format: its turns are invalid, the episodes run
    to the turn cap, and the group's members, sharing a seed, start from the same game."""
    from arl.agent.loop import Task
    from arl.agent.records import episode_record
    from arl.rollout.engine import SamplingParams

    loop = _loop(tiny, env, kwargs)
    episodes = loop.run([Task(0, 11), Task(1, 12)], 2, SamplingParams(temperature=1.0, max_new_tokens=16))
    loop.close()
    assert len(episodes) == 4 and all(1 <= e.num_turns <= 3 for e in episodes) and not any(e.env_error for e in episodes)
    for group in (0, 1):
        first = [e.turns[0].observation for e in episodes if e.group_id == group]
        assert len(set(first)) == 1  # both members started from the seed's game
    assert {e.task_type for e in episodes} == {"guess_digit" if env == "gym" else "GuessTheNumber-v0"}
    record = episode_record(episodes[0])
    assert record["turn_log"] and all("response" in t and "anchor" in t for t in record["turn_log"])


@pytest.mark.parametrize("env, overrides", [
    ("gym", [f"env.kwargs.id={GYM_ID}"]),
    ("textarena", ["env.kwargs.id=GuessTheNumber-v0"]),
])
def test_train_runs_rl_on_an_adapted_env_and_the_viewer_reads_it(env, overrides, tmp_path):
    from arl.analysis.viewer import page_data, write_viewer

    args = [f"env={env}", *overrides, "debug=smoke", "bc.enabled=false", "rl.iterations=2", "rl.val_every=2",
            "rollout.val_episodes=2", "rollout.max_new_tokens=16", "env.max_turns=3", "algo.filter.name=none",
            "env.kwargs.max_turns=3", f"paths.log_dir={tmp_path}", f"task_name={env}"]
    done = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *args], capture_output=True, text=True,
                          timeout=600, env=sh.subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / env / "runs").iterdir()
    data = page_data(run_dir)
    assert [v["iteration"] for v in data["validations"]] == [0, 2]
    html = write_viewer(run_dir, run_dir / "viewer.html")
    assert html.exists() and html.stat().st_size > 1000


@pytest.mark.parametrize("env, package", [("textarena", "textarena"), ("verifiers", "verifiers")])
def test_a_missing_package_stops_the_run_naming_the_extra(monkeypatch, env, package):
    import importlib.util

    from arl.run.checks import validate_config
    from arl.utils.config import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(ConfigError, match=rf"env={env} needs the '{package}' package: pip install -e '.\[ecosystem\]'"):
        validate_config(compose([f"env={env}", "bc.enabled=false"]))
