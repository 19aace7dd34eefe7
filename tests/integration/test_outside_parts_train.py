"""Algorithm parts from outside ARL train through the real entry point: ``src/train.py`` with
``PYTHONPATH=examples`` and ``algo.loss.name=custom_policy_loss:soft_clip`` (or the rank advantage) runs
RL iterations on the tiny model and Sokoban, its losses finite and the part's own metric logged with
the values its kwargs give; a part whose signature does not fit stops the run at start-up."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from arl_testing import ROOT

#: two RL iterations of two groups of two on the untrained tiny model (no BC), metrics to csv
SHORT = ["debug=smoke", "algo=grpo", "bc.enabled=false", "rl.iterations=2", "rl.val_every=2", "rollout.val_episodes=2",
         "rollout.tasks_per_iteration=2", "rollout.group_size=2", "rollout.max_new_tokens=12", "logger=csv",
         "callbacks.model_checkpoint=null", "callbacks.last_checkpoint=null", "rl.ckpt_every=0"]


def _train(tmp_path: Path, overrides: list[str], task: str, pythonpath: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([pythonpath, str(ROOT / "src")]), "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *SHORT, *overrides, f"task_name={task}",
                           f"paths.log_dir={tmp_path}"], capture_output=True, text=True, timeout=600, env=env)


def _rl_metrics(tmp_path: Path, task: str) -> dict[str, list[float]]:
    """Every column of the RL stage's metrics.csv: its logged (non-empty) values, in order."""
    (run_dir,) = (tmp_path / task / "runs").iterdir()
    with (run_dir / "csv" / "rl" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    return {key: [float(r[key]) for r in rows if r[key] != ""] for key in rows[0]}


@pytest.mark.long  # over a minute of a worker: make test-long, run by CI after make test
def test_an_outside_policy_loss_trains_with_its_kwargs(tmp_path):
    done = _train(tmp_path, ["algo.loss.name=custom_policy_loss:soft_clip", "+algo.loss.kwargs.positive_weight=0.5"],
                  "soft_clip", str(ROOT / "examples"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    metrics = _rl_metrics(tmp_path, "soft_clip")
    assert len(metrics["actor/pg_loss"]) == 2 and all(math.isfinite(v) for v in metrics["actor/pg_loss"])
    assert all(math.isfinite(v) for v in metrics["actor/grad_norm"])
    # only soft_clip logs token_weight: the mean weight of the response tokens, 0.5 where A > 0 and 1 elsewhere
    weights = metrics["actor/token_weight"]
    assert len(weights) == 2 and all(0.5 - 1e-6 <= w <= 1.0 + 1e-6 for w in weights), weights


@pytest.mark.long  # over a minute of a worker: make test-long, run by CI after make test
def test_an_outside_advantage_estimator_trains_with_its_kwargs(tmp_path):
    done = _train(tmp_path, ["algo.advantage.name=custom_advantage:rank_advantage", "+algo.advantage.kwargs.spread=1.0"],
                  "rank", str(ROOT / "examples"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    metrics = _rl_metrics(tmp_path, "rank")
    assert len(metrics["actor/pg_loss"]) == 2 and all(math.isfinite(v) for v in metrics["actor/pg_loss"])
    # only rank_advantage logs tied_frac; its advantages lie within spread / 2 of 0, plus the -0.1 penalty
    assert len(metrics["adv/tied_frac"]) == 2 and all(0.0 <= v <= 1.0 for v in metrics["adv/tied_frac"])
    assert all(abs(v) <= 0.5 + 0.1 + 1e-6 for v in metrics["adv/mean"])


def test_a_part_of_the_wrong_signature_stops_train_at_start_up(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "outside_wrong_loss.py").write_text(textwrap.dedent("""
        def my_loss(*, log_prob, old_log_prob, advantages, cfg):
            return log_prob, {}
    """))
    done = _train(tmp_path / "logs", ["algo.loss.name=outside_wrong_loss:my_loss"], "wrong", str(tmp_path / "parts"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-4000:]
    assert "config error: invalid config:" in done.stderr, done.stderr[-3000:]
    assert ("  - algo.loss.name=outside_wrong_loss:my_loss: the policy loss is called with log_prob, old_log_prob, "
            "advantages, response_mask, cfg (keywords); my_loss lacks 'response_mask'" in done.stderr), done.stderr[-3000:]
    # nothing was built: no stage wrote its metrics, no checkpoint, no model
    assert not any(p.name in ("csv", "checkpoints", "policy_hf", "bc_policy_hf") for p in (tmp_path / "logs").rglob("*"))
