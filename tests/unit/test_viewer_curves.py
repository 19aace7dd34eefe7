"""The episode viewer's validation curves (``arl.analysis.viewer.validation_curves``): exact values
by hand on a small multirun folder written as the runs write it, the graded envs as their specs say,
and agreement with the values a real archived WebShop study logged."""

import json
from pathlib import Path

import pytest

from arl.analysis.viewer import GRADED_ENVS, page_data
from arl.envs.registry import make_env
from arl_testing import ROOT

WEBSHOP_ARCHIVE = ROOT / "docs" / "results" / "webshop_rl_study" / "runs"


def _row(seed: int, task_type: str, won: bool, score: float, env_error: bool = False) -> dict:
    """A validation file's row as ``arl.agent.records.episode_record`` writes it (no turns)."""
    return {"seed": seed, "task_type": task_type, "won": won, "return": 10.0 if won else 0.0, "turns": 3,
            "valid_turns": 3, "episode_id": seed, "score": score, "env_error": env_error}


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_multirun(root: Path) -> Path:
    """Two training runs and an eval run under ``root``: ``grpo_seed1`` plays WebShop (its saved config
    says so; graded) with two task types, its episode 13 an env error that says it won; ``sampo_seed2``
    (no config) one task type at iterations 0, 2 and 10; ``eval_run`` an eval file."""
    run = root / "grpo_seed1"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 1\nenv:\n  name: webshop\n  max_turns: 15\n")
    _write(run / "val_episodes" / "iter0.jsonl", [_row(10, "a", True, 1.0), _row(11, "a", False, 0.5),
                                                  _row(12, "b", False, 0.25), _row(13, "b", True, 1.0, env_error=True)])
    _write(run / "val_episodes" / "iter4.jsonl", [_row(10, "a", True, 1.0), _row(11, "a", True, 1.0),
                                                  _row(12, "b", False, 0.75), _row(13, "b", False, 0.0)])
    for k, won in ((10, [True, True]), (0, [False, False]), (2, [True, False])):
        _write(root / "sampo_seed2" / "val_episodes" / f"iter{k}.jsonl",
               [_row(20 + i, "x", w, float(w)) for i, w in enumerate(won)])
    _write(root / "eval_run" / "val_episodes.jsonl", [_row(30, "a", True, 1.0)])
    return root


def _pt(v, iteration, episodes, won, score=None):
    return {"v": v, "iteration": iteration, "episodes": episodes, "won": won, "success": won / episodes, "score": score}


def test_curves_of_a_multirun_folder_by_hand(tmp_path):
    data = page_data(write_multirun(tmp_path))
    labels = [v["label"] for v in data["validations"]]
    assert labels == ["eval_run @ eval", "grpo_seed1 @ iter 0", "grpo_seed1 @ iter 4",
                      "sampo_seed2 @ iter 0", "sampo_seed2 @ iter 2", "sampo_seed2 @ iter 10"]
    assert [v["graded"] for v in data["validations"]] == [False, True, True, False, False, False]
    grpo, sampo = data["curves"]  # the eval run has no iteration axis: no curve
    # iteration 0: episodes 10 (won, 1.0), 11 (lost, 0.5), 12 (lost, 0.25), 13 (env error: a loss scoring 0)
    assert grpo == {"run": "grpo_seed1", "graded": True, "task_types": ["a", "b"], "series": [
        {"task_type": None, "points": [_pt(1, 0, 4, 1, 100 * 1.75 / 4), _pt(2, 4, 4, 2, 100 * 2.75 / 4)]},
        {"task_type": "a", "points": [_pt(1, 0, 2, 1, 75.0), _pt(2, 4, 2, 2, 100.0)]},
        {"task_type": "b", "points": [_pt(1, 0, 2, 0, 12.5), _pt(2, 4, 2, 0, 37.5)]},
    ]}
    assert grpo["series"][0]["points"][0]["success"] == 0.25 and grpo["series"][0]["points"][0]["score"] == 43.75
    # one task type: the overall curve only, in iteration order (10 after 2), no score (not graded)
    assert sampo == {"run": "sampo_seed2", "graded": False, "task_types": [], "series": [
        {"task_type": None, "points": [_pt(3, 0, 2, 0), _pt(4, 2, 2, 1), _pt(5, 10, 2, 2)]}]}


def test_a_validation_without_episodes_has_no_point_and_eval_folders_no_curve(tmp_path):
    _write(tmp_path / "run" / "val_episodes" / "iter0.jsonl", [_row(1, "", False, 0.0), _row(2, "", True, 1.0)])
    _write(tmp_path / "run" / "val_episodes" / "iter3.jsonl", [])
    (curve,) = page_data(tmp_path / "run")["curves"]
    assert curve["series"] == [{"task_type": None, "points": [_pt(0, 0, 2, 1)]}]
    _write(tmp_path / "start" / "val_episodes.jsonl", [_row(1, "", True, 1.0)])
    _write(tmp_path / "rl" / "val_episodes.jsonl", [_row(1, "", False, 0.0)])
    assert page_data([tmp_path / "start", tmp_path / "rl"])["curves"] == []


def test_graded_envs_are_the_envs_whose_spec_grades():
    for name in ("sokoban", "math_tool", "webshop"):
        assert make_env(name).spec.graded is (name in GRADED_ENVS), name


def test_curves_agree_with_what_the_archived_webshop_runs_logged():
    """Each archived WebShop run's first and last points are its logged ``val/success_rate`` (and per
    task type) and ``val/score`` (a float32 mean: to 1e-3) before and after RL."""
    if not WEBSHOP_ARCHIVE.is_dir():
        pytest.skip("the WebShop RL study archive is not in this checkout")
    data = page_data(WEBSHOP_ARCHIVE)
    assert len(data["curves"]) == len(list(WEBSHOP_ARCHIVE.iterdir())) == 8
    for curve in data["curves"]:
        logged = json.loads((WEBSHOP_ARCHIVE / curve["run"] / "rl_results.json").read_text())
        assert curve["graded"] and len(curve["task_types"]) == 5
        overall = curve["series"][0]["points"]
        assert [p["iteration"] for p in overall] == [0, logged["iterations_done"]]
        for point, key in zip(overall, ("val_before_rl", "val_after_rl"), strict=True):
            assert point["success"] == logged[key]["val/success_rate"]
            assert point["score"] == pytest.approx(logged[key]["val/score"], abs=1e-3)
        for series in curve["series"][1:]:
            for point, key in zip(series["points"], ("val_before_rl", "val_after_rl"), strict=True):
                assert point["success"] == logged[key][f"val/success_rate/{series['task_type']}"]
