"""report.py shopping: where WebShop episodes break, on episodes played in the real env."""

from __future__ import annotations

import json

from arl.analysis.shopping import shopping_table, summarise
from arl.envs.base import VAL_SEED_BASE
from arl.envs.webshop import WebShopEnv, expert_response
from arl.envs.webshop.expert import expert_action

KWARGS = {"prompt_style": "compact"}


def _play(seed: int, actions=None) -> dict:
    """An episode row as validation writes it; the expert plays unless ``actions`` are given."""
    env = WebShopEnv(**KWARGS)
    obs, _ = env.reset(seed)
    turns, done, result = [], False, None
    for i in range(env.max_steps):
        if actions is None:
            response = expert_response(env)
            action = expert_action(env)[1]
        elif i < len(actions):
            action = actions[i]
            response = f"<think>x</think><action>{action}</action>"
        else:
            break
        result = env.step(action)
        turns.append({"observation": obs, "response": response, "action": action, "valid": True, "reward": result.reward})
        obs, done = result.observation, result.done
        if done:
            break
    info = result.info
    return {"seed": seed, "won": bool(info["won"]), "score": float(info["score"]), "turns": len(turns),
            "valid_turns": len(turns), "turn_log": turns}


def test_the_shopper_itself_scores_every_link(tmp_path):
    seed = VAL_SEED_BASE + 3
    row = _play(seed)
    assert row["won"]  # the scripted shopper wins this goal
    file = tmp_path / "val_episodes.jsonl"
    file.write_text(json.dumps(row) + "\n")
    s = summarise(file, KWARGS)
    assert (s.episodes, s.won, s.searched, s.query_exact, s.won_exact) == (1, 1, 1, 1, 1)
    assert s.query_recall == 1.0 and s.query_precision == 1.0
    assert (s.clicked, s.click_on_page, s.click_shopper, s.not_on_page, s.bought) == (1, 1, 1, 0, 1)


def test_a_wrong_query_and_a_miscopied_id_repeated(tmp_path):
    seed = VAL_SEED_BASE + 3
    env = WebShopEnv(**KWARGS)
    env.reset(seed)
    from arl.envs.webshop import goal_query

    wanted = goal_query(env.goal).split()
    typed = " ".join(wanted[:2] + ["zebra"])  # two of the shopper's words and one of its own
    env.step(f"search[{typed}]")
    first = env.results_page_asins()[0]
    wrong = first[:-1] + ("Z" if first[-1] != "Z" else "Y")
    row = _play(seed, [f"search[{typed}]", f"click[{wrong}]", f"click[{wrong}]", f"click[{first}]"])
    file = tmp_path / "episodes.jsonl"
    file.write_text(json.dumps(row) + "\n")
    s = summarise(file, KWARGS)
    assert (s.searched, s.query_exact, s.won_exact) == (1, 0, 0)
    assert abs(s.query_recall - 2 / len(set(wanted))) < 1e-9 and abs(s.query_precision - 2 / 3) < 1e-9
    # the first product click named an id the page does not show; the same click came next
    assert (s.clicked, s.click_on_page, s.click_first, s.click_shopper) == (1, 0, 0, 0)
    assert (s.not_on_page, s.repeated_not_on_page, s.bought, s.won) == (1, 1, 0, 0)
    table = shopping_table({"policy": s})
    assert "| query = the shopper's | 0.000 (0) |" in table
    assert "| ... clicked again at once | 1.000 (1) |" in table


def test_a_run_of_another_env_is_refused(tmp_path):
    import pytest

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("env:\n  name: sokoban\n  kwargs: {}\n")
    (run / "val_episodes.jsonl").write_text(json.dumps({"seed": 1, "won": False, "turn_log": [{}]}) + "\n")
    with pytest.raises(ValueError, match="not webshop"):
        summarise(run)


def test_the_command_line_prints_one_column_per_input(tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    import report

    row = _play(VAL_SEED_BASE + 3)
    file = tmp_path / "val_episodes.jsonl"
    file.write_text(json.dumps(row) + "\n")
    config = tmp_path / ".hydra" / "config.yaml"
    config.parent.mkdir()
    config.write_text("env:\n  name: webshop\n  kwargs:\n    prompt_style: compact\n")
    assert report.main(["shopping", str(file), str(file), "--name", "a", "--name", "b"]) == 0
    out = capsys.readouterr().out
    assert "| | a | b |" in out and "| query = the shopper's | 1.000 (1) | 1.000 (1) |" in out
    assert report.main(["shopping", str(file), "--name", "a", "--name", "b"]) == 2  # one name per input
