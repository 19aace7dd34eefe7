"""LoRA adapters (peft) on the policy, and the merged export of an adapted model.

With ``model.lora.enabled=true`` the policy is a ``peft.PeftModel``: the base weights are frozen
and only the adapter matrices (``lora_A``, ``lora_B``) require grad, so the optimiser (which
takes ``requires_grad`` parameters only) trains the adapters. ``lora_B`` starts at zero, so at
initialisation the adapted model computes exactly the base model.

The HF export is a *merged* full model (W + scale * B A in every adapted layer, written under
the base layer's own names), so the rollout engines and ``src/eval.py`` load it as a plain
``AutoModelForCausalLM`` folder with no peft. The merge is computed into a new state dict: the
live model is not touched, so training can go on after an export (e.g. after behaviour cloning).

The cheapest KL reference under LoRA is the policy itself with the adapters switched off
(``with policy.disable_adapter(): ...``); see :func:`reference_context`.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any

import torch

from arl.models.config import LoraSettings

log = logging.getLogger(__name__)

PEFT_HINT = "model.lora.enabled=true needs peft: pip install peft"


def _peft():
    try:
        import peft  # optional: peft (lora extra)
    except ImportError as err:  # pragma: no cover - exercised only without peft
        raise ImportError(PEFT_HINT) from err
    return peft


def is_peft_model(model) -> bool:
    """True for a ``peft.PeftModel`` (without importing peft when it is not installed)."""
    return any(cls.__name__ == "PeftModel" for cls in type(model).__mro__)


def apply_lora(model, lora: LoraSettings):
    """Wrap ``model`` with LoRA adapters as the ``model.lora`` section says; returns the ``PeftModel``.

    ``lora.target_modules``: module name suffixes (those the model lacks are skipped with a
    warning), or one string peft understands (``all-linear``). The adapters have no bias.
    """
    peft = _peft()
    targets = lora.target_modules
    if isinstance(targets, str):
        target_modules: Any = targets  # e.g. "all-linear"
    else:
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        target_modules = [t for t in targets if t in present]
        missing = sorted(set(targets) - set(target_modules))
        if not target_modules:
            raise ValueError(f"model.lora.target_modules={list(targets)} match no module of {type(model).__name__}")
        if missing:
            log.warning("LoRA target modules not in %s: %s", type(model).__name__, missing)
    config = peft.LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():  # peft probes a deprecated transformers attribute
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = peft.get_peft_model(model, config)
    trainable, total = trainable_parameters(peft_model)
    log.info("LoRA r=%s on %s: %d trainable of %d parameters (%.2f%%)", config.r, target_modules, trainable, total,
             100.0 * trainable / max(total, 1))
    return peft_model


def trainable_parameters(model) -> tuple[int, int]:
    """(parameters that require grad, all parameters)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """State dict of the base architecture with every active LoRA delta merged in (new tensors).

    Keys are those of the plain model (``...q_proj.weight``), so the result loads into
    ``AutoModelForCausalLM.from_config(base.config)``. The live model is not modified.
    """
    from peft.tuners.lora import LoraLayer  # optional: peft (lora extra)

    base = model.get_base_model()
    deltas: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if not isinstance(module, LoraLayer) or getattr(module, "merged", False):
            continue
        for adapter in module.active_adapters:
            if adapter not in module.lora_A:
                continue
            delta = module.get_delta_weight(adapter).detach()
            key = f"{name}.weight"
            deltas[key] = deltas[key] + delta if key in deltas else delta
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        value = value.detach()
        ident = (value.untyped_storage().data_ptr(), tuple(value.shape))
        if ident in seen and plain not in deltas:
            continue  # a tied weight (lm_head = embeddings): written once, tied again on load
        seen.add(ident)
        if plain in deltas:
            value = (value.float() + deltas[plain].float()).to(value.dtype)
        out[plain] = value.clone()
    return out


def fold_adapters(model, lora: LoraSettings):
    """Merge the trained adapters into the base weights and start fresh ones (B = 0).

    After behaviour cloning with LoRA, this makes the BC result the new base, so the
    adapters-off reference (:func:`reference_context`) is the BC policy, as the full-weight
    reference copy would be. Returns a new ``PeftModel`` computing exactly what ``model`` did;
    ``model`` itself must not be used afterwards (its base layers were unloaded in place).
    """
    base = model.merge_and_unload()
    return apply_lora(base, lora)


def reference_context(policy):
    """Context in which ``policy`` computes its base (reference) model: adapters disabled.

    For a model without adapters it is a no-op context, so callers can use it unconditionally.
    """
    if is_peft_model(policy):
        return policy.disable_adapter()
    return contextlib.nullcontext()
