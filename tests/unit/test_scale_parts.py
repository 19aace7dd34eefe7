"""Parts of training at scale that need no Trainer run: seed stream and RNG state of the rollout
DataModule, rank shares, global metric reduction, ckpt_path=last, strategy configs, the collapse
detector's rules."""

from __future__ import annotations

import os
import random
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from arl.config import validate_config
from arl.datamodules.rollout_datamodule import RolloutDataModule, rank_share, rollout_reduce_spec
from arl.rollout.engine import SamplingParams
from arl.utils.config import ConfigError
from arl_testing import CONFIG_DIR, compose


# --------------------------------------------------------------------------- rollout DataModule
class _FakeLoop:
    """Records the tasks it is asked for; 'samples' with the global RNGs like the HF engine does."""

    sample_mode = "turn"

    def __init__(self):
        self.calls = []
        self.last_stats = SimpleNamespace(generated_tokens=1, env_steps=1, generate_seconds=1.0, env_seconds=1.0)
        self.pool = SimpleNamespace(restarts=0)

    def run(self, tasks, group_size, params, first_episode_id=0):
        draws = (torch.rand(1).item(), random.random(), float(np.random.rand()))
        self.calls.append(([(t.group_id, t.seed) for t in tasks], first_episode_id, draws))
        return []


def _dm(loop, **kw):
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, stop=())
    return RolloutDataModule(loop, iterations=5, groups_per_step=4, group_size=2, sampling=params, val_sampling=params, seed=7, **kw)


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
    from arl.modules.rl_module import AgenticRLModule

    def ep(won, valid_turns):
        turns = [SimpleNamespace(valid=v, response_ids=[1, 2], truncated=False, reward=0.0) for v in valid_turns]
        return SimpleNamespace(env_error=False, won=won, ret=1.0 if won else 0.0, num_turns=len(turns), turns=turns, task_type="t")

    from arl.agent.metrics import episode_metrics

    rank0 = [ep(True, [1, 1]), ep(False, [0, 1, 0, 0])]
    rank1 = [ep(True, [1])]
    per_rank = []
    for eps in (rank0, rank1):
        m = episode_metrics(eps, "rollout/")
        m["rollout/episodes"] = float(len(eps))
        per_rank.append((m, rollout_reduce_spec(eps, m)))
    module = AgenticRLModule.__new__(AgenticRLModule)
    monkeypatch.setattr(AgenticRLModule, "_world_size", lambda self: 2)
    monkeypatch.setattr("arl.utils.distributed.all_gather_object", lambda obj: per_rank)
    out = module._reduce_metrics(*per_rank[0])
    everything = episode_metrics(rank0 + rank1, "rollout/")
    for key in ("rollout/success_rate", "rollout/return_mean", "rollout/valid_action_ratio", "rollout/episode_len"):
        assert out[key] == pytest.approx(everything[key]), key
    assert out["rollout/episodes"] == 3.0


# --------------------------------------------------------------------------- resume paths
def test_ckpt_path_last_finds_the_newest_run(tmp_path):
    from arl.resume import find_last_checkpoint, resolve_ckpt_path

    with pytest.raises(ConfigError, match="no checkpoint of task 'job'"):
        find_last_checkpoint(tmp_path, "job")
    paths = []
    for name in ("2026-01-01_00-00-00", "2026-01-02_00-00-00"):
        ck = tmp_path / "job" / "runs" / name / "checkpoints" / "last.ckpt"
        ck.parent.mkdir(parents=True)
        ck.write_bytes(b"x")
        paths.append(ck)
    now = time.time()
    os.utime(paths[0], (now, now))
    os.utime(paths[1], (now - 100, now - 100))
    assert find_last_checkpoint(tmp_path, "job") == paths[0]
    c = {"ckpt_path": "last", "paths": {"log_dir": str(tmp_path)}, "task_name": "job"}
    assert resolve_ckpt_path(c) == paths[0]
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_ckpt_path({**c, "ckpt_path": str(tmp_path / "nope.ckpt")})


def test_kl_coef_zero_builds_no_reference(tiny):
    from arl.builders import build_rl_module

    model, tok = tiny
    assert build_rl_module(compose(["algo.kl.coef=0"]), model, tok).reference is None
    assert build_rl_module(compose([]), model, tok).reference is not None


# --------------------------------------------------------------------------- strategies
@pytest.mark.parametrize("trainer", sorted(p.stem for p in (CONFIG_DIR / "trainer").glob("*.yaml")))
def test_every_trainer_config_validates(trainer):
    validate_config(compose([f"trainer={trainer}"]))


def test_sharded_trainer_needs_layer_classes():
    with pytest.raises(ConfigError, match="trainer.sharding.layer_cls"):
        validate_config(compose(["trainer=fsdp", "trainer.sharding.layer_cls=[]"]))
    with pytest.raises(ConfigError, match="callbacks.collapse.action"):
        validate_config(compose(["callbacks.collapse.action=explode"]))


def test_fsdp_strategy_gets_block_classes_by_name(tiny):
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    from arl.builders import build_strategy, container
    from arl.utils.fsdp import ShardingConfigError

    model, _ = tiny
    c = container(compose(["trainer=fsdp"]).trainer)
    strategy = build_strategy(c, model)
    assert isinstance(strategy, FSDPStrategy)
    assert Qwen3DecoderLayer in strategy.kwargs["auto_wrap_policy"]._module_classes
    with pytest.raises(ShardingConfigError, match="Qwen3DecoderLayer"):  # the message lists what the model has
        build_strategy({**c, "sharding": {"layer_cls": ["LlamaDecoderLayer"]}}, model)
    mp = build_strategy({**container(compose(["trainer=fsdp2_cpu"]).trainer)})
    assert isinstance(mp, ModelParallelStrategy) and mp._data_parallel_size == 2 and mp._tensor_parallel_size == 1


# --------------------------------------------------------------------------- collapse rules
def test_collapse_detector_rules():
    from arl.callbacks.collapse import CollapseDetector

    det = CollapseDetector(grad_norm_factor=5.0, min_history=3, kl_threshold=0.5, valid_drop=0.5, valid_min_peak=0.2)
    for g in (1.0, 1.2, 0.9):
        assert det.check({"actor/grad_norm": g}) == []
        det.observe({"actor/grad_norm": g, "rollout/valid_action_ratio": 0.6})
    assert [k for k, _ in det.check({"actor/grad_norm": 6.0})] == ["grad_norm"]
    assert det.check({"actor/grad_norm": 4.0}) == []
    assert [k for k, _ in det.check({"actor/kl_loss": 0.7})] == ["kl"]
    assert [k for k, _ in det.check({"rollout/valid_action_ratio": 0.25})] == ["valid_action"]
    assert [k for k, _ in det.check({"actor/grad_norm": float("nan")})] == ["grad_norm"]
    off = CollapseDetector(grad_norm_factor=None, kl_threshold=None, valid_drop=None)
    off.observe({"actor/grad_norm": 1.0, "rollout/valid_action_ratio": 0.9})
    assert off.check({"actor/grad_norm": 1e9, "actor/kl_loss": 1e9, "rollout/valid_action_ratio": 0.0}) == []
    # a drop from a low peak is noise, not a collapse
    low = CollapseDetector(valid_drop=0.5, valid_min_peak=0.2)
    low.observe({"rollout/valid_action_ratio": 0.1})
    assert low.check({"rollout/valid_action_ratio": 0.0}) == []
    with pytest.raises(ValueError, match="log, stop, rollback"):
        CollapseDetector(action="panic")
