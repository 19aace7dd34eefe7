"""Official-layout games: discovery with the reference filters, the data source choice, and the
env playing a ``json_2.1.1`` tree pointed at by ``$ALFWORLD_DATA``.

The tree is built from generated games (the official ones cannot be downloaded here), laid out as
``alfworld-download`` does, plus decoys that the reference filters must skip.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arl.agent.parsing import parse_response
from arl.envs.alfworld.data import (
    canonical_split,
    discover_games,
    is_solvable,
    resolve_source,
)
from arl.envs.alfworld.env import AlfWorldEnv
from arl.envs.alfworld.expert import expert_response
from arl.envs.alfworld.gen.games import ensure_game


def _copy_trial(game: Path, dest_split: Path, task_dir: str | None = None) -> Path:
    trial = game.parent
    target = dest_split / (task_dir or trial.parent.name) / trial.name
    shutil.copytree(trial, target)
    return target / "game.tw-pddl"


@pytest.fixture(scope="module")
def official_tree(tmp_path_factory):
    """``<root>/json_2.1.1/{train,valid_seen}``: 6 train games (one per type), 2 valid_seen games
    (the split ARLArena validates on), and decoys in train (movable, Sliced, unsolvable, no game
    file, unsupported type)."""
    root = tmp_path_factory.mktemp("alfworld_data")
    train, seen = root / "json_2.1.1" / "train", root / "json_2.1.1" / "valid_seen"
    kept = [_copy_trial(ensure_game("train", i), train) for i in range(6)]
    seven = ensure_game("train", 7)
    _copy_trial(seven, train, "pick_and_place_with_movable_recep-Pen-Mug-Desk-301")
    _copy_trial(seven, train, "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-1")
    unsolvable = _copy_trial(ensure_game("train", 8), train)
    data = json.loads(unsolvable.read_text())
    data["solvable"] = False
    unsolvable.write_text(json.dumps(data))
    no_game = _copy_trial(ensure_game("train", 9), train)
    no_game.unlink()
    other_type = _copy_trial(ensure_game("train", 10), train, "pick_and_place_simple-Mug-None-Desk-9")
    traj = json.loads((other_type.parent / "traj_data.json").read_text())
    traj["task_type"] = "pick_and_place_with_movable_recep"
    (other_type.parent / "traj_data.json").write_text(json.dumps(traj))
    val = [_copy_trial(ensure_game("train", i), seen) for i in (6, 11)]
    return root, sorted(kept), sorted(val)


def test_discovery_applies_the_reference_filters(official_tree):
    root, kept, val = official_tree
    assert discover_games(root, "train") == tuple(kept)
    assert discover_games(root / "json_2.1.1", "train") == tuple(kept)
    assert discover_games(root, "eval_in_distribution") == tuple(val)
    only = discover_games(root, "train", ["look_at_obj_in_light", "pick_two_obj_and_place"])
    assert [json.loads((g.parent / "traj_data.json").read_text())["task_type"] for g in only] == [
        "look_at_obj_in_light",
        "pick_two_obj_and_place",
    ]
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        discover_games(root, "valid_unseen")


def test_solvable_flag_and_split_names(tmp_path):
    path = tmp_path / "game.tw-pddl"
    for text, expected in [
        ('{"pddl_problem": "x", "solvable": true, "walkthrough": []}', True),
        ('{"solvable":false}', False),
        ('{"solvable": null}', False),
        ('{"pddl_problem": "x"}', False),
    ]:
        path.write_text(text)
        assert is_solvable(path) is expected, text
    assert canonical_split("eval_in_distribution") == "valid_seen"
    assert canonical_split("valid_unseen") == "valid_unseen"
    with pytest.raises(ValueError, match="unknown ALFWorld split"):
        canonical_split("test")


def test_data_source_choice(monkeypatch, tmp_path):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    assert resolve_source("auto") == ("generated", None)
    assert resolve_source("generated", str(tmp_path)) == ("generated", None)
    assert resolve_source("auto", str(tmp_path)) == ("official", tmp_path)
    with pytest.raises(ValueError, match="alfworld-download"):
        resolve_source("official")
    with pytest.raises(ValueError, match="data_source"):
        resolve_source("web")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert resolve_source("auto") == ("official", tmp_path)
    assert resolve_source("official") == ("official", tmp_path)
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        AlfWorldEnv()  # $ALFWORLD_DATA set, but no json_2.1.1 under it
    assert AlfWorldEnv(data_source="generated").source == "generated"


def test_env_plays_the_official_layout(monkeypatch, official_tree):
    root, kept, val = official_tree
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    env = AlfWorldEnv()  # data_source=auto: $ALFWORLD_DATA is set
    assert env.source == "official" and env.data_root == root
    assert env.official_games("train") == tuple(kept)
    for seed in (0, 4, 6 + 2):  # seeds wrap around the six train games
        assert env.game_for_seed(seed) == str(kept[seed % 6])
    assert env.game_for_seed(2**30 + 1) == str(val[1])
    for seed in range(6):
        _, info = env.reset(seed)
        assert info["gamefile"] == str(kept[seed])
        for _ in range(env.max_steps):
            parsed = parse_response(expert_response(env), info["admissible_actions"])
            assert parsed.valid
            result = env.step(parsed.action)
            info = result.info
            if result.done:
                break
        assert info["won"] and result.reward == 10.0, seed
    env.close()
    capped = AlfWorldEnv(num_games=2)
    assert capped.official_games("train") == tuple(kept[:2])
    capped.close()
