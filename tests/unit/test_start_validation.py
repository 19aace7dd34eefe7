"""The sweep's shared start validation: its key, and storing and reading back an entry."""

from __future__ import annotations

import json

import pytest
import torch

from arl.run import start_validation as sv

CONFIG = {
    "env": {"name": "sokoban", "max_turns": 4}, "rollout": {"val_episodes": 8, "val_temperature": 0.6},
    "model": {"source": "tiny"}, "trainer": {"devices": 1}, "seed": 1, "threads": 1,
    "rl": {"optimizer": {"lr": 1e-4}}, "algo": {"name": "sampo"},
}


def _model(fill: float = 0.5) -> torch.nn.Module:
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.fill_(fill)
        model.bias.zero_()
    return model


def test_weights_digest_sees_every_byte_and_name():
    a, b = _model(), _model()
    assert sv.weights_digest(a) == sv.weights_digest(b)
    with torch.no_grad():
        b.bias[1] = 1e-30  # one element, far below any tolerance
    assert sv.weights_digest(a) != sv.weights_digest(b)
    c = torch.nn.Sequential(_model())  # the same tensors under other names
    assert sv.weights_digest(c) != sv.weights_digest(a)


def test_key_is_the_start_and_the_validation_setup_not_the_update():
    key = sv.start_key(CONFIG, "w", commit="c")
    assert sv.start_key(CONFIG, "w", commit="c", rng="other") != key  # the generator states before it
    assert len(key) == 24 and key == sv.start_key(dict(CONFIG), "w", commit="c")
    # the RL stage's own choices do not change the start's validation
    other_arm = {**CONFIG, "rl": {"optimizer": {"lr": 1e-5}}, "algo": {"name": "grpo"}}
    assert sv.start_key(other_arm, "w", commit="c") == key
    # nor does the run's own folder
    other_folder = {**CONFIG, "trainer": {"devices": 1, "default_root_dir": "/logs/run2"}}
    assert sv.start_key(other_folder, "w", commit="c") == key
    # the weights, the seed, the env, the sampling, the thread count and the source do
    changed = [
        sv.start_key(CONFIG, "w2", commit="c"),
        sv.start_key({**CONFIG, "seed": 2}, "w", commit="c"),
        sv.start_key({**CONFIG, "env": {"name": "sokoban", "max_turns": 5}}, "w", commit="c"),
        sv.start_key({**CONFIG, "rollout": {"val_episodes": 8, "val_temperature": 0.4}}, "w", commit="c"),
        sv.start_key({**CONFIG, "threads": 2}, "w", commit="c"),
        sv.start_key(CONFIG, "w", commit="d"),
    ]
    assert key not in changed and len(set(changed)) == len(changed)


def test_save_then_load_round_trip(tmp_path):
    episodes = tmp_path / "iter0.jsonl"
    episodes.write_text(json.dumps({"seed": 7, "won": True}) + "\n")
    values = {"val/success_rate": 0.25, "val/return_mean": 2.5}
    assert sv.load(tmp_path / "cache", "k") is None
    entry = sv.save(tmp_path / "cache", "k", sv.StartValidation(values, "val_sampled", "run-a", str(episodes)))
    stored = sv.load(tmp_path / "cache", "k")
    assert stored.values == values and stored.protocol == "val_sampled" and stored.written_by == "run-a"
    assert stored.entry == str(entry)
    assert (entry / sv.EPISODES).read_text() == episodes.read_text()
    assert not list((tmp_path / "cache").glob(".*.tmp"))  # the temporary folder became the entry


def test_the_first_entry_stays(tmp_path):
    sv.save(tmp_path, "k", sv.StartValidation({"val/success_rate": 0.25}, "", "first"))
    sv.save(tmp_path, "k", sv.StartValidation({"val/success_rate": 0.75}, "", "second"))
    stored = sv.load(tmp_path, "k")
    assert stored.written_by == "first" and stored.values["val/success_rate"] == 0.25
    assert stored.episodes is None  # the first run kept no episode files


def test_source_commit_is_this_checkout():
    commit = sv.source_commit()
    assert commit == "" or (len(commit) == 40 and all(ch in "0123456789abcdef" for ch in commit))


@pytest.mark.parametrize("devices", [2, -1])
def test_refused_under_data_parallelism(devices):
    from arl.run.checks import validate_config
    from arl.utils.config import ConfigError
    from arl_testing import compose

    cfg = compose(["debug=smoke", "rl.start_validation_cache=/tmp/x", f"trainer.devices={devices}"])
    with pytest.raises(ConfigError, match="one-process runs"):
        validate_config(cfg)


def test_generator_states_round_trip_and_their_digest_sees_each_stream():
    import random

    import numpy as np

    before = sv.rng_states()
    digest = sv.rng_digest(before)
    assert sv.rng_digest(sv.rng_states()) == digest  # reading the states draws nothing
    drawn = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert sv.rng_digest(sv.rng_states()) != digest
    sv.set_rng_states(before)
    assert sv.rng_digest(sv.rng_states()) == digest
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == drawn  # the same draws again
    for draw in (random.random, np.random.rand, lambda: torch.rand(1)):  # each stream alone changes the digest
        sv.set_rng_states(before)
        draw()
        assert sv.rng_digest(sv.rng_states()) != digest
    sv.set_rng_states(before)


def test_the_states_after_travel_with_the_entry(tmp_path):
    after = sv.rng_states()
    sv.save(tmp_path, "k", sv.StartValidation({"val/success_rate": 0.5}, "", "a", rng_after=after))
    stored = sv.load(tmp_path, "k")
    assert sv.rng_digest(stored.rng_after) == sv.rng_digest(after)
