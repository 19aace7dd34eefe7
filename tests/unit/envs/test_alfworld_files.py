"""ALFWorld plays a user's own games: one ``game.tw-pddl`` file, a folder of them, a glob, on the
real engine (games made by the offline generator, copied out as a user would have them)."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arl.agent.experts import get_expert
from arl.agent.parsing import parse_response
from arl.envs.alfworld.env import AlfWorldEnv
from arl.envs.alfworld.gen.games import GeneratorConfig, ensure_game
from arl.envs.base import VAL_SEED_BASE


@pytest.fixture(scope="module")
def user_games(tmp_path_factory):
    """Three generated games copied to a user's folder: <root>/<name>/{game.tw-pddl, traj_data.json}."""
    root = tmp_path_factory.mktemp("my_games")
    for i in range(3):
        trial = ensure_game("train", i, GeneratorConfig()).parent
        shutil.copytree(trial, root / f"game{i}")
    return root


def _play_expert(env: AlfWorldEnv, seed: int) -> dict:
    expert = get_expert("alfworld")
    _, info = env.reset(seed)
    for _ in range(env.max_steps):
        parsed = parse_response(expert(env), info["admissible_actions"])
        result = env.step(parsed.action)
        info = result.info
        if result.done:
            break
    return info


def test_a_single_game_file_plays_to_a_win(user_games):
    game = user_games / "game1" / "game.tw-pddl"
    env = AlfWorldEnv(games=str(game))
    try:
        assert env.source == "files" and {env.game_for_seed(s) for s in (0, 5, VAL_SEED_BASE)} == {str(game.resolve())}
        _obs, info = env.reset(0)
        assert info["task"] and info["admissible_actions"]
        assert _play_expert(env, 0)["won"]
    finally:
        env.close()


def test_a_folder_a_glob_and_separate_validation_games(user_games):
    folder = AlfWorldEnv(games=str(user_games))
    pattern = AlfWorldEnv(games=str(user_games / "game[02]" / "*.tw-pddl"), val_games=str(user_games / "game1"))
    try:
        expected = [str((user_games / f"game{i}" / "game.tw-pddl").resolve()) for i in range(3)]
        assert [folder.game_for_seed(s) for s in range(4)] == expected + expected[:1]  # sorted, wrapping
        assert [pattern.game_for_seed(s) for s in range(2)] == [expected[0], expected[2]]
        assert pattern.game_for_seed(VAL_SEED_BASE + 7) == expected[1]
        assert _play_expert(folder, 2)["won"]
    finally:
        folder.close()
        pattern.close()


def test_a_name_without_games_or_a_game_without_its_task_is_an_error(user_games, tmp_path):
    with pytest.raises(FileNotFoundError, match="names no file or folder"):
        AlfWorldEnv(games=str(tmp_path / "nothing_here"))
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(user_games / "game0" / "game.tw-pddl", lonely)
    with pytest.raises(FileNotFoundError, match="has no traj_data.json"):
        AlfWorldEnv(games=str(lonely))
    with pytest.raises(ValueError, match="val_games needs games"):
        AlfWorldEnv(val_games=str(user_games))
