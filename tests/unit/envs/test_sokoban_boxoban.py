"""Boxoban files: parsing, the env on them, and the solver's solve rate."""

from __future__ import annotations

import time

import pytest

from arl.envs.sokoban import Level, SokobanEnv, load_boxoban, solve
from arl.envs.sokoban.boxoban import parse_boxoban
from arl.envs.sokoban.solver import DEFAULT_MAX_STATES, replay

FILES = ["medium/valid/000.txt", "medium/valid/001.txt", "unfiltered/test/000.txt"]

SAMPLE = """; 0
##########
#       ##
# $    ###
#. ## . ##
# ####  ##
#   #   ##
#$$ #. ###
# # # $@##
# .    ###
##########

; 1
##########
#+*      #
#  $     #
#   .  $ #
#     $  #
#      . #
#        #
#        #
#        #
##########
"""


def test_parse_sample_text():
    levels = parse_boxoban(SAMPLE, source="sample")
    assert len(levels) == 2
    first, second = levels
    assert first.name == "sample:0" and first.dims == (10, 10)
    assert first.player == (7, 7) and len(first.boxes) == 4
    assert second.player == (1, 1) and (1, 1) in second.targets
    assert (1, 2) in second.boxes and (1, 2) in second.targets
    assert first.to_text() == SAMPLE.split("\n\n")[0].split("\n", 1)[1]


@pytest.mark.parametrize("name", FILES)
def test_files_parse(boxoban_dir, name):
    path = boxoban_dir / name
    if not path.exists():
        pytest.skip(f"{path} missing")
    levels = load_boxoban(path)
    assert len(levels) == 1000
    for level in levels:
        assert level.dims == (10, 10)
        assert len(level.boxes) == len(level.targets) == 4
        assert not level.solved
        assert Level.from_text(level.to_text()) == level
    assert len({level.to_text() for level in levels}) == 1000


def test_folder_loads_all_files(boxoban_dir):
    levels = load_boxoban(boxoban_dir / "medium")
    assert len(levels) == 1000 * len(list((boxoban_dir / "medium").rglob("*.txt")))


def test_missing_path_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_boxoban(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        load_boxoban(tmp_path)


def test_env_on_boxoban(boxoban_dir):
    path = boxoban_dir / "medium" / "valid" / "000.txt"
    env = SokobanEnv(boxoban_path=str(path), max_steps=200)
    levels = load_boxoban(path)
    obs, info = env.reset(3)
    assert env.level == levels[3] and len(obs.split("\n")) == 10
    assert env.reset(1003)[0] == obs  # seed % n
    assert info["score"] == env.level.boxes_on_targets / 4


def _solve_rate(levels: list[Level]) -> tuple[float, float]:
    start = time.perf_counter()
    solved = 0
    for level in levels:
        plan = solve(level)  # budget: DEFAULT_MAX_STATES expanded states per level
        if plan is not None:
            assert replay(level, plan).solved
            solved += 1
    return solved / len(levels), time.perf_counter() - start


def test_solver_on_first_boxoban_levels(boxoban_dir):
    levels = load_boxoban(boxoban_dir / "medium" / "valid" / "000.txt")[:20]
    rate, _ = _solve_rate(levels)
    assert rate >= 0.9


def test_expert_episode_on_boxoban(boxoban_dir):
    env = SokobanEnv(boxoban_path=str(boxoban_dir / "medium" / "valid" / "000.txt"), max_steps=500)
    env.reset(0)
    for action in solve(env.level):
        result = env.step(action)
    assert result.done and result.info["won"]


@pytest.mark.slow
def test_solver_on_boxoban_medium_file(boxoban_dir):
    """>= 90 % of medium/valid/000.txt within DEFAULT_MAX_STATES (100k) expanded states each."""
    levels = load_boxoban(boxoban_dir / "medium" / "valid" / "000.txt")
    rate, seconds = _solve_rate(levels)
    print(
        f"boxoban medium/valid/000: {rate:.1%} solved in {seconds:.1f}s "
        f"(budget {DEFAULT_MAX_STATES} states per level)"
    )
    assert rate >= 0.9
