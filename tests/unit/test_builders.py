"""Builders that need no Trainer run: the RL module's reference model, strategies from the trainer
configs."""

from __future__ import annotations

import pytest

from arl.run.checks import validate_config
from arl.run.settings import run_settings
from arl.utils.config import ConfigError
from arl_testing import CONFIG_DIR, compose


def test_kl_coef_zero_builds_no_reference(tiny):
    from arl.run.builders import build_rl_module

    model, tok = tiny
    assert build_rl_module(run_settings(compose(["algo.kl.coef=0"])), model, tok).reference is None
    assert build_rl_module(run_settings(compose([])), model, tok).reference is not None


def _scoring_batch(vocab: int):
    """Two random 12-token rows whose last 6 tokens are the response: (data, response mask)."""
    import torch

    ids = torch.randint(3, vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    response = torch.zeros(2, 12)
    response[:, 6:] = 1
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": response,
            "position_ids": torch.arange(12).repeat(2, 1)}
    return data, response


def test_a_bf16_reference_is_a_tied_half_size_copy_scoring_within_bf16_rounding(tiny):
    """rl.reference_dtype=bfloat16: every weight of the reference is the policy's rounded to bf16
    (tied embeddings stay one tensor, nothing shared with the policy), and its log-probs are the
    fp32 reference's within bf16 rounding."""
    import torch

    from arl.modules.forward import forward_log_probs
    from arl.run.builders import build_rl_module

    model, tok = tiny
    module = build_rl_module(run_settings(compose(["rl.reference_dtype=bfloat16"])), model, tok)
    ref = module.reference
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the policy untouched
    assert ref.get_output_embeddings().weight is ref.get_input_embeddings().weight
    policy_ptrs = {p.data_ptr() for p in model.parameters()}
    assert not any(p.data_ptr() in policy_ptrs for p in ref.parameters())
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(p.detach().to(torch.bfloat16), q), name
    # buffers keep their dtype: rotary frequencies rounded to bf16 would turn long prompts' angles by radians
    assert [(n, b.dtype) for n, b in ref.named_buffers()] == [(n, b.dtype) for n, b in model.named_buffers()]
    # the policy's own dtype asked for: a full copy, still sharing nothing
    same = build_rl_module(run_settings(compose(["rl.reference_dtype=float32"])), model, tok).reference
    assert not any(p.data_ptr() in policy_ptrs for p in same.parameters())
    data, response = _scoring_batch(len(tok))
    ref_log_probs = module._ref_log_probs(data)
    with torch.no_grad():
        full, _ = forward_log_probs(model.eval(), data, module.temperature)
    gap = ((ref_log_probs - full * response).abs() * response).max()
    assert 0 < gap < 0.1  # bf16 rounding moves the log-probs, a little
    with pytest.raises(ConfigError, match=r"rl\.reference_dtype='int8'"):
        validate_config(compose(["rl.reference_dtype=int8"]))


def test_a_lora_policy_is_its_own_reference_with_the_adapters_off(tiny_path):
    """No copy of a LoRA policy: the KL term's log-probs are the policy's with its adapters off, the
    base model's, also after the adapters have moved."""
    import torch

    from arl.models.config import LoraSettings
    from arl.models.loading import load_policy
    from arl.modules.forward import forward_log_probs
    from arl.run.builders import build_rl_module

    lora = LoraSettings(enabled=True, r=4, alpha=8.0, dropout=0.0, target_modules=("q_proj", "v_proj"))
    policy, tok = load_policy(tiny_path, lora=lora)
    base, _ = load_policy(tiny_path)
    module = build_rl_module(run_settings(compose([])), policy, tok)
    assert module.reference is None and module.algo.kl.coef > 0
    # no second copy of the base weights anywhere in the module: its parameter storages are the policy's
    storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
    assert storages == {p.untyped_storage().data_ptr() for p in policy.parameters()}
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)  # the adapters moved: the policy is no longer the base
    data, response = _scoring_batch(len(tok))
    ref_log_probs = module._ref_log_probs(data)
    with torch.no_grad():
        want, _ = forward_log_probs(base.eval(), data, module.temperature)
        moved, _ = forward_log_probs(policy.eval(), data, module.temperature)
    torch.testing.assert_close(ref_log_probs, want * response, atol=1e-5, rtol=0)
    assert (moved - want).abs().max() > 1e-3  # the adapters were on outside the reference


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

    from arl.distributed.fsdp import ShardingConfigError
    from arl.run.builders import build_strategy
    from arl.utils.config import container

    model, _ = tiny
    c = container(compose(["trainer=fsdp"]).trainer)
    strategy = build_strategy(c, model)
    assert isinstance(strategy, FSDPStrategy)
    assert Qwen3DecoderLayer in strategy.kwargs["auto_wrap_policy"]._module_classes
    with pytest.raises(ShardingConfigError, match="Qwen3DecoderLayer"):  # the message lists what the model has
        build_strategy({**c, "sharding": {"layer_cls": ["LlamaDecoderLayer"]}}, model)
    mp = build_strategy({**container(compose(["trainer=fsdp2_cpu"]).trainer)})
    assert isinstance(mp, ModelParallelStrategy) and mp._data_parallel_size == 2 and mp._tensor_parallel_size == 1


def test_rank0_loading_is_chosen_where_it_holds_and_refused_elsewhere():
    """trainer.sharding.load: auto picks rank 0 under FSDP2 on several processes with vLLM; an
    explicit rank0 where the transformers engine needs a copy on every rank, or on one process,
    stops the run at start-up naming the key."""
    from arl.distributed.fsdp import loads_on_rank0
    from arl.run.settings import run_settings

    def rank0(overrides):
        run = run_settings(compose(overrides))
        return loads_on_rank0(run.trainer, run.rollout.engine)

    fsdp2_vllm = ["trainer=fsdp2_cpu", "rollout=vllm"]
    assert rank0(fsdp2_vllm)
    assert not rank0([*fsdp2_vllm, "trainer.sharding.load=every_rank"])
    assert not rank0(["trainer=fsdp2_cpu"])  # the transformers engine
    assert not rank0([*fsdp2_vllm, "trainer.devices=1"])
    assert not rank0(["trainer=ddp", "rollout=vllm"])
    validate_config(compose([*fsdp2_vllm, "trainer.sharding.load=rank0"]))
    for overrides in (["trainer=fsdp2_cpu", "trainer.sharding.load=rank0"],
                      [*fsdp2_vllm, "trainer.devices=1", "trainer.sharding.load=rank0"]):
        with pytest.raises(ConfigError, match="trainer.sharding.load=rank0 needs FSDP2"):
            validate_config(compose(overrides))
    with pytest.raises(ConfigError, match="trainer.sharding.load='node'"):
        validate_config(compose([*fsdp2_vllm, "trainer.sharding.load=node"]))
