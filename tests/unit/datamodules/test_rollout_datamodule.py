"""The rollout DataModule's seed stream and RNG state across a resume, rank shares of the seed
list, and the exact global reduction of rollout metrics."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from arl.agent.loop import RolloutStats
from arl.datamodules.rollout_datamodule import (
    IterationPlan,
    RolloutDataModule,
    ValidationPlan,
    rank_share,
)
from arl.rollout.engine import SamplingParams


class _FakeLoop:
    """Records the tasks it is asked for; 'samples' with the global RNGs like the HF engine does."""

    sample_mode = "turn"

    def __init__(self):
        self.calls = []
        self.last_stats = RolloutStats(generated_tokens=1, env_steps=1, generate_seconds=1.0, env_seconds=1.0)
        self.pool = SimpleNamespace(restarts=0)
        self.spec = SimpleNamespace(graded=False)  # an env that does not grade its episodes beyond winning

    def run(self, tasks, group_size, params, first_episode_id=0):
        draws = (torch.rand(1).item(), random.random(), float(np.random.rand()))
        self.calls.append(([(t.group_id, t.seed) for t in tasks], first_episode_id, draws))
        return []


def _dm(loop, **kw):
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, stop=())
    return RolloutDataModule(loop, IterationPlan(5, 4, 2, params), ValidationPlan(params), seed=7, **kw)


def test_resumed_datamodule_continues_the_seed_stream_and_the_rng():
    torch.manual_seed(0)
    straight = _FakeLoop()
    dm = _dm(straight)
    dm.next_train_batch()
    dm.next_train_batch()
    state = dm.state_dict()
    dm.next_train_batch()  # iteration 3 of the straight run

    torch.manual_seed(123)  # whatever a restarted process did before its first rollout
    random.seed(5)
    resumed = _FakeLoop()
    dm2 = _dm(resumed)
    dm2.load_state_dict(state)
    assert dm2.iteration == 2
    dm2.next_train_batch()
    assert resumed.calls[0] == straight.calls[2]  # same tasks, same ids, same random draws


def test_ranks_roll_out_disjoint_shares_of_the_same_seed_list():
    single = _FakeLoop()
    _dm(single).next_train_batch()
    union = []
    for rank in range(2):
        loop = _FakeLoop()
        dm = _dm(loop)
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=2)
        dm._seeded = True  # keep the RNG out of it
        dm.next_train_batch()
        union.extend(loop.calls[0][0])
    assert sorted(union) == sorted(single.calls[0][0])
    assert rank_share(5, 0, 2) == (0, 2) and rank_share(5, 1, 2) == (2, 5)


def test_rollout_metrics_reduce_to_exact_global_means(monkeypatch):
    from arl.agent.metrics import episode_metrics
    from arl.modules.rl_module import AgenticRLModule
    from arl.utils.metrics import combine

    def ep(won, valid_turns, lens=(2,), task_type="t"):
        turns = [SimpleNamespace(valid=v, response_ids=[1] * lens[i % len(lens)], truncated=False, reward=0.0)
                 for i, v in enumerate(valid_turns)]
        return SimpleNamespace(env_error=False, won=won, ret=1.0 if won else 0.0, num_turns=len(turns), turns=turns,
                               task_type=task_type)

    loop = SimpleNamespace(pool=SimpleNamespace(restarts=0), spec=SimpleNamespace(graded=False))
    dm = SimpleNamespace(agent_loop=loop)
    rank0 = [ep(True, [1, 1], (3,)), ep(False, [0, 1, 0, 0])]
    rank1 = [ep(True, [1], (7,)), SimpleNamespace(env_error=True, turns=[], task_type="t")]
    stats = RolloutStats(generate_seconds=2.0, env_seconds=1.0, generated_tokens=10, env_steps=5, decode_steps=4)
    per_rank = [RolloutDataModule._train_metrics(dm, eps, 1, 0, False, 1, stats) for eps in (rank0, rank1)]
    out = combine(per_rank)
    everything = episode_metrics(rank0 + rank1, "rollout/")
    for key in ("rollout/success_rate", "rollout/return_mean", "rollout/valid_action_ratio", "rollout/episode_len",
                "rollout/response_len_mean", "rollout/truncated_ratio"):
        assert out[key] == pytest.approx(everything[key]), key
    assert out["rollout/response_len_max"] == 7.0
    assert out["rollout/episodes"] == 4.0 and out["rollout/env_errors"] == 1.0
    assert out["filter/kept_groups"] == 2.0 and out["filter/rounds"] == 1.0 and out["filter/active"] == 0.0
    assert out["rollout/tokens_per_s"] == 10.0 and out["perf/generate_s"] == 2.0  # rates add up, times are the max
    assert out["rollout/rows_per_step"] == 2.5  # 10 rows over 4 decoding steps, the mean over ranks
    # the module combines the gathered Metrics the same way
    module = AgenticRLModule.__new__(AgenticRLModule)
    monkeypatch.setattr(AgenticRLModule, "_world_size", lambda self: 2)
    monkeypatch.setattr("arl.distributed.ranks.all_gather_object", lambda obj: per_rank)
    assert module._reduce_metrics(per_rank[0]) == out
    # the batch reaches the step with its rules: Lightning's generic transfer cannot rebuild them
    from lightning.fabric.utilities.apply_func import move_data_to_device

    from arl.datamodules.batches import RolloutBatch

    batch = RolloutBatch({}, {}, 0, metrics=per_rank[0])
    assert module.transfer_batch_to_device(batch, torch.device("cpu"), 0).metrics is per_rank[0]
    with pytest.raises(TypeError):
        move_data_to_device(batch, torch.device("cpu"))


def test_a_validation_leaves_the_training_stream_where_it_was():
    """Validating between two iterations (its loader's iterator made, its episodes sampled with every global
    RNG) leaves python's, numpy's and torch's states as they were: the next training batch draws the same."""
    from arl.distributed.ranks import capture_rng

    torch.manual_seed(0)
    loop = _FakeLoop()
    dm = _dm(loop)
    dm.next_train_batch()
    before = capture_rng()
    for _ in dm.val_dataloader():
        pass
    after = capture_rng()
    assert loop.calls[-1][1] == 0 and len(loop.calls) == 2  # the validation ran its episodes
    assert before["python"] == after["python"]
    assert torch.equal(before["torch"], after["torch"])
    assert all(torch.equal(v, after["numpy"][k]) if torch.is_tensor(v) else v == after["numpy"][k]
               for k, v in before["numpy"].items())
