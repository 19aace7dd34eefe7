"""A sweep's shared start validation on real runs: the second run of a start reads the first one's
validation back (same metrics, same episode file, same TensorBoard step 0) and trains to the same
weights as the run that played it; another seed plays its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import scale_helpers as sh
from arl_testing import compose

OVERRIDES = [
    "debug=smoke", "bc.enabled=false", "rl.iterations=2", "rl.val_every=2", "rollout.val_episodes=3",
    "rollout.max_new_tokens=8", "env.max_turns=2", "algo.filter.name=none",
]


def _step0(run_dir: Path) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (folder,) = {p.parent for p in run_dir.glob("tensorboard/**/events.out.tfevents.*")}
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: e.value for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag) if e.step == 0}


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "policy_hf" / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_path):
    from arl.run.pipeline import train

    cache = tmp_path_factory.mktemp("cache")
    out = {}
    with sh.one_thread():
        for name, extra in (("first", ["seed=3"]), ("second", ["seed=3", "tags=[second]"]),
                            ("other_seed", ["seed=4"])):
            run_dir = tmp_path_factory.mktemp(name)
            results = train(compose([*OVERRIDES, *extra, f"rl.start_validation_cache={cache}"], output_dir=str(run_dir)))
            out[name] = (run_dir, results)
    return cache, out


def test_the_first_run_plays_and_stores_the_second_reads_back(runs):
    cache, out = runs
    (first, r1), (second, r2) = out["first"], out["second"]
    assert r1["start_validation"].startswith("played, stored as")
    assert r2["start_validation"].startswith("read back from") and str(first) in r2["start_validation"]
    assert r2["val_before_rl"] == r1["val_before_rl"] and "val/success_rate" in r1["val_before_rl"]
    iter0 = (first / "val_episodes" / "iter0.jsonl").read_text()
    assert len(iter0.splitlines()) == 3
    assert (second / "val_episodes" / "iter0.jsonl").read_text() == iter0
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 2  # seed 3's start and seed 4's
    step0 = _step0(first)
    assert step0 and _step0(second) == step0  # the same curves' first point, protocol names included
    assert any(tag.startswith(("val_sampled/", "val_greedy/")) for tag in step0)


def test_reading_back_leaves_the_update_as_it_was(runs):
    # the second run differs only in its tags: it trains as the first did
    _, out = runs
    w1, w2 = _weights(out["first"][0]), _weights(out["second"][0])
    assert w1.keys() == w2.keys()
    for name in w1:
        assert torch.equal(w1[name], w2[name]), name


def test_another_seed_plays_its_own(runs):
    _, out = runs
    run_dir, results = out["other_seed"]
    assert results["start_validation"].startswith("played, stored as")
    rows = [json.loads(line) for line in (run_dir / "val_episodes" / "iter0.jsonl").read_text().splitlines()]
    assert len(rows) == 3
