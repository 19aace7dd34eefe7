"""Builders that need no Trainer run: the RL module's reference model, strategies from the trainer
configs."""

from __future__ import annotations

import pytest

from arl.run.checks import validate_config
from arl.utils.config import ConfigError
from arl_testing import CONFIG_DIR, compose


def test_kl_coef_zero_builds_no_reference(tiny):
    from arl.run.builders import build_rl_module

    model, tok = tiny
    assert build_rl_module(compose(["algo.kl.coef=0"]), model, tok).reference is None
    assert build_rl_module(compose([]), model, tok).reference is not None


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

    from arl.run.builders import build_strategy
    from arl.utils.config import container
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
