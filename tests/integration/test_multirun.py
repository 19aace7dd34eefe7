"""Multiruns through the real CLI: folders named by their overrides, one folder per sweep, the report.

The acceptance command of the method study, with every budget cut to seconds:
``python src/train.py -m experiment=sokoban 'algo=glob(*,exclude=base)' debug=cpu_small`` (the ten
recipes in the Sokoban setup).
"""

import os
import subprocess
import sys

import pytest
import yaml

from arl_testing import ROOT

METHODS = ["cispo", "cispo_seqmask", "dapo_gigpo", "dapo_grpo", "gigpo", "grpo", "gspo", "sampo", "sapo", "sapo_seqmask"]
TINY = ["bc.episodes=40", "bc.epochs=1", "rl.iterations=1", "rl.val_every=1", "rollout.tasks_per_iteration=2",
        "rollout.group_size=2", "rollout.val_episodes=4", "rollout.max_new_tokens=16", "algo.filter.max_rollout_rounds=1", "bc.bootstrap.episodes=4"]


def _run(args, tmp_path, timeout):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, "ARL_ROOT": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "multiruns").iterdir()
    return sweep


@pytest.mark.slow
def test_multirun_folders_named_by_overrides(tmp_path):
    sweep = _run(["-m", "debug=smoke", "seed=1,2"], tmp_path, 900)
    names = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert names == ["debug=smoke,seed=1", "debug=smoke,seed=2"]
    for name in names:
        assert (sweep / name / "policy_hf" / "config.json").exists()
        assert any((sweep / name / "tensorboard").rglob("events.out.tfevents.*"))


@pytest.mark.slow
def test_every_method_on_sokoban_then_the_report(tmp_path):
    sweep = _run(["-m", "experiment=sokoban", "algo=glob(*,exclude=base)", "debug=cpu_small", *TINY], tmp_path, 3000)
    # a folder name may be cut to fit the file system; the exact overrides are in .hydra/overrides.yaml
    algo = {p: next(o.split("=", 1)[1] for o in yaml.safe_load((p / ".hydra" / "overrides.yaml").read_text())
                    if o.startswith("algo="))
            for p in sweep.iterdir() if p.is_dir() and (p / ".hydra").is_dir()}
    assert sorted(algo.values()) == sorted(METHODS)
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "report.py"), str(sweep)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (sweep / "report" / "report.md").read_text()
    for m in METHODS:
        assert f"`algo={m}`" in text
    assert "Every run shares: " in text and "debug=cpu_small" in text and "experiment=sokoban" in text
    assert (sweep / "report" / "success.png").stat().st_size > 5000
