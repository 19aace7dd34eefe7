"""One smoke run's numbers, pinned: refactoring the house must not change what a run computes.

A short run through the real pipeline (BC on expert episodes, two RL iterations of SAMPO with its
DAPO filter, validation, export), one thread, fixed seed: its per-iteration metrics, the
validation results and a checksum of the exported weights must equal
``tests/data/pinned_smoke.json`` (floats to a relative 1e-5). The file was written by this test
with ``ARL_UPDATE_PINNED=1`` on the tree of December 2026 before the layering refactor; rewrite it
only for a change that is meant to change results, and say so in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lightning import Callback

import scale_helpers as sh
from arl_testing import compose

PINNED = Path(__file__).resolve().parents[1] / "data" / "pinned_smoke.json"
KEYS = ("train/samples", "rollout/episodes", "rollout/return_mean", "rollout/valid_action_ratio", "filter/kept_groups",
        "filter/filled_groups", "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm",
        "actor/optimizer_steps", "adv/std")


class Keep(Callback):
    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.rows.append({k: float(pl_module.last_metrics[k]) for k in KEYS if k in pl_module.last_metrics})


def _run(tmp_path) -> dict:
    from arl.models.loading import load_policy
    from arl.run.pipeline import train

    keep = Keep()
    cfg = compose(["debug=smoke", "seed=3", "bc.episodes=120", "bc.epochs=2", "env.kwargs.prompt_style=compact", "rl.iterations=2", "rl.val_every=2",
                   "rollout.val_episodes=4", "rollout.tasks_per_iteration=2", "rollout.group_size=4",
                   "rollout.max_new_tokens=12", "algo.filter.max_rollout_rounds=2"], output_dir=str(tmp_path))
    with sh.one_thread():
        results = train(cfg, callbacks=[keep])
    model, _ = load_policy(results["policy_hf"])
    checksum = float(sum(p.detach().double().abs().sum() for p in model.parameters()))
    return {
        "iterations": keep.rows,
        "val_before_rl": results["val_before_rl"],
        "val_after_rl": results["val_after_rl"],
        "weights_abs_sum": checksum,
        "bc_samples": results.get("bc/samples"),
    }


def _close(a, b, path="") -> list[str]:
    if isinstance(a, dict):
        keys = set(a) | set(b)
        return [e for k in sorted(keys) for e in (_close(a.get(k), b.get(k), f"{path}.{k}"))]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} != {len(b)} entries"]
        return [e for i, (x, y) in enumerate(zip(a, b)) for e in _close(x, y, f"{path}[{i}]")]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return [] if abs(a - b) <= 1e-5 * max(abs(a), abs(b), 1e-3) else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_a_smoke_run_computes_what_it_computed(tmp_path):
    got = _run(tmp_path)
    if os.environ.get("ARL_UPDATE_PINNED"):
        PINNED.parent.mkdir(parents=True, exist_ok=True)
        PINNED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {PINNED}")
    want = json.loads(PINNED.read_text())
    assert len(got["iterations"]) == 2 and got["iterations"][0]["actor/optimizer_steps"] > 0
    diffs = _close(want, got)
    assert not diffs, "\n".join(diffs[:20])
    # debug=smoke with the default recipe updates, and TensorBoard says how often (cumulative counts)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard" / "rl"), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.value for e in acc.Scalars("train/optimizer_steps")]
    assert steps == [sum(r["actor/optimizer_steps"] for r in got["iterations"][: i + 1]) for i in range(2)] and steps[-1] >= 1
    assert [e.value for e in acc.Scalars("train/updates_skipped")] == [0.0, 0.0]
