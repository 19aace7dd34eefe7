"""``explain=<key>``: which config files and overrides set a key, in Hydra's merge order
(:mod:`arl.run.explain`), on the project's real config tree."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from arl.run.explain import explain_key, final_value, format_explanation
from arl_testing import ROOT


@pytest.fixture
def hydra_configs():
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        yield


def test_a_key_set_by_a_group_two_presets_a_budget_and_the_command_line(hydra_configs):
    overrides = ["experiment=sampo_sokoban", "debug=cpu_small", "rollout.val_episodes=7"]
    chain = explain_key("rollout.val_episodes", "train.yaml", overrides)
    assert [(s.source, s.value) for s in chain] == [
        ("configs/rollout/base.yaml (package rollout)", 64),
        ("configs/presets/paper_gpu.yaml (global)", 128),
        ("configs/presets/protocol_sokoban.yaml (global)", 128),
        ("configs/debug/budget/cpu_small_sokoban.yaml (global)", 256),
        ("command line: rollout.val_episodes=7", 7),
    ]
    assert final_value(compose("train.yaml", overrides=overrides), "rollout.val_episodes") == 7


def test_a_group_choice_changes_the_chain_and_a_parent_mapping_counts(hydra_configs):
    chain = explain_key("algo.loss.clip_ratio_high", "train.yaml", ["algo=grpo"])
    assert next(s.source for s in chain) == "configs/algo/base.yaml (package algo)"
    assert all("sampo" not in s.source for s in chain)
    parent = explain_key("rollout.max_new_tokens", "train.yaml", ["debug=smoke", "rollout={max_new_tokens: 5}"])
    assert parent[-1].source == "command line: rollout={max_new_tokens: 5}" and parent[-1].value == 5


def test_unknown_keys_and_the_text(hydra_configs):
    assert explain_key("no.such.key", "train.yaml", []) == []
    cfg = compose("train.yaml", overrides=[])
    text = format_explanation("no.such.key", [], final_value(cfg, "no.such.key"))
    assert "(no config file and no override sets it)" in text and "final value: (no such key)" in text


def test_train_py_explains_and_runs_nothing(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), "experiment=sampo_sokoban", "debug=cpu_small",
         "rl.optimizer.lr=3e-4", "explain=rl.optimizer.lr", f"paths.log_dir={tmp_path}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("explain rl.optimizer.lr: set by 4 place(s)")
    assert [line.split(":")[0].strip() for line in lines[1:5]] == [
        "1. configs/train.yaml (global)", "2. configs/presets/paper_gpu.yaml (global)",
        "3. configs/debug/budget/cpu_small_sokoban.yaml (global)", "4. command line"]
    assert lines[-1] == "  final value: 0.0003"
    assert not any((tmp_path / "sampo_sokoban" / "runs").glob("*"))  # no run folder left behind
