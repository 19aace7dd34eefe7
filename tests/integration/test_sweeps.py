"""Grids that leave the laptop: jobs in parallel with joblib (real runs), and the SLURM launcher and
the Optuna sweeper configs composed as Hydra builds them (needs the ``sweeps`` extra)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from arl_testing import ROOT, compose

pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install -e '.[sweeps]'")

TINY = ["debug=smoke", "bc.episodes=24", "bc.epochs=1", "rl.iterations=1", "rl.val_every=1", "rollout.val_episodes=2",
        "rollout.max_new_tokens=12", "algo.filter.name=none"]


@pytest.mark.long  # over a minute: make test-long, run by CI after make test
def test_joblib_runs_two_jobs_at_once_then_the_report(tmp_path):
    """``hydra/launcher=joblib_local``: the two jobs of a two-point multirun overlap in time (each
    writes its config when it starts and its exported policy when it ends), and the report reads
    the sweep folder."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), "-m", "hydra/launcher=joblib_local", "seed=1,2", *TINY],
        capture_output=True, text=True, timeout=900, env={**os.environ, "ARL_ROOT": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "multiruns").iterdir()
    runs = sorted(p for p in sweep.iterdir() if (p / ".hydra").is_dir())
    assert [p.name.split(",")[-1] for p in runs] == ["seed=1", "seed=2"]
    starts = [(p / ".hydra" / "config.yaml").stat().st_mtime for p in runs]
    ends = [(p / "policy_hf" / "config.json").stat().st_mtime for p in runs]
    assert max(starts) < min(ends), f"the jobs ran one after the other: starts {starts}, ends {ends}"
    report = subprocess.run([sys.executable, str(ROOT / "src" / "report.py"), str(sweep)], capture_output=True, text=True,
                            timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    text = (sweep / "report" / "report.md").read_text()
    assert "seed=1" in text and "seed=2" in text


def test_the_slurm_launcher_config_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[sweeps]'")
    cfg = compose(["experiment=alfworld", "algo=grpo", "hydra/launcher=slurm_gpu_node", "hydra.launcher.partition=gpu"],
                  keep_hydra=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.partition, launcher.gpus_per_node, launcher.tasks_per_node) == ("gpu", 8, 8)
    assert cfg.trainer.devices in ("auto", -1, 8)  # one rank per task: the node's GPUs


def test_the_optuna_search_composes_over_the_clip_range_and_the_learning_rate():
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="pip install -e '.[sweeps]'")
    cfg = compose(["experiment=sokoban", "algo=grpo", "debug=cpu_small", "hparams_search=optuna_clip_lr"], keep_hydra=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"algo.loss.clip_ratio_low", "algo.loss.clip_ratio_high", "rl.optimizer.lr"}
    assert cfg.optimized_metric == "val/success_rate"
