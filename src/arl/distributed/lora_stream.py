"""LoRA adapters merged into a stream of weights, for rollout engines that load plain models (vLLM).

The trainer's policy under ``model.lora.enabled`` is a peft model whose state dict holds each
adapted layer as three tensors (the frozen base weight and the two factors); vLLM loads plain
checkpoints. :func:`merge_lora_stream` turns the policy's ``(name, tensor)`` stream into the
adapted layers' effective weights on the way to the engine, without touching the live model, and
works the same on a plain state dict, a gathered FSDP1 state dict or FSDP2's per-tensor gathered
stream. :func:`lora_scalings` reads the per-layer scale from the peft model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Wrapper segments that sharding, compile and checkpointing insert into parameter names.
WRAPPER_SEGMENTS = ("_fsdp_wrapped_module", "_orig_mod", "_checkpoint_wrapped_module")


def _plain_name(name: str) -> str:
    return ".".join(p for p in name.split(".") if p not in WRAPPER_SEGMENTS)


def lora_scalings(model) -> dict[str, float]:
    """``{prefix: scaling}`` of every LoRA layer of ``model`` with an active adapter.

    ``prefix`` is the layer's name as its state-dict entries start (``base_model.model.model.layers.0
    .self_attn.q_proj``, wrapper segments removed) and ``scaling`` peft's ``alpha / r`` (or
    ``alpha / sqrt(r)`` with rsLoRA) of the active adapter. Empty for a model without adapters.
    One active adapter per layer is supported (what :func:`arl.models.lora.apply_lora` makes); DoRA is refused.
    """
    if not any(cls.__name__ == "PeftModel" for cls in type(model).__mro__):
        return {}
    from peft.tuners.lora import LoraLayer  # optional: peft (lora extra); a PeftModel means it is installed

    out: dict[str, float] = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        active = [a for a in module.active_adapters if a in module.lora_A]
        if not active:
            continue
        if len(active) > 1:
            raise ValueError(f"{name}: {len(active)} active LoRA adapters; the weight sync merges one")
        if getattr(module, "use_dora", {}).get(active[0]):
            raise ValueError(f"{name}: DoRA adapters are not supported by the weight sync")
        if getattr(module, "fan_in_fan_out", False):
            raise ValueError(f"{name}: fan_in_fan_out LoRA layers (Conv1D) are not supported by the weight sync")
        out[_plain_name(name)] = float(module.scaling[active[0]])
    return out


def merge_lora_stream(pairs, scalings: Mapping[str, float]):
    """``(name, tensor)`` pairs of a policy's state dict with its LoRA factors merged in.

    For every LoRA layer ``p`` of ``scalings`` (:func:`lora_scalings`) the pairs
    ``p.base_layer.weight`` (W, shape ``(out, in)``), ``p.lora_A.<adapter>.weight`` (A, ``(r, in)``)
    and ``p.lora_B.<adapter>.weight`` (B, ``(out, r)``) become one pair ``p.base_layer.weight`` =
    W + scaling * B @ A (computed in fp32, returned in W's dtype): what the adapted layer computes.
    Every other pair passes through unchanged, in order. A layer's pairs may come in any order; the
    base weight waits until both factors have come, so at most a layer's worth of tensors is held
    beyond the stream (a streamed, gathered sync stays one tensor at a time in spirit). The live
    model is never touched: unlike peft's ``merge_adapter`` / ``unmerge_adapter``, which add and
    subtract B @ A in place and leave the base weights off by rounding after every sync.

    Raises:
        ValueError: the stream ended with a layer still missing a part.
    """
    if not scalings:
        yield from pairs
        return
    pending: dict[str, dict[str, Any]] = {}
    for name, tensor in pairs:
        plain = _plain_name(name)
        prefix, part = _lora_part(plain, scalings)
        if prefix is None:
            yield name, tensor
            continue
        parts = pending.setdefault(prefix, {})
        parts[part] = (name, tensor) if part == "W" else tensor
        if len(parts) == 3:
            del pending[prefix]
            base_name, weight = parts["W"]
            delta = parts["B"].float() @ parts["A"].float()
            yield base_name, (weight.float() + scalings[prefix] * delta.to(weight.device)).to(weight.dtype)
    if pending:
        prefix, parts = next(iter(pending.items()))
        raise ValueError(f"merge_lora_stream: LoRA layer {prefix} ended with only {sorted(parts)} of W, A, B")


def _lora_part(plain: str, scalings: Mapping[str, float]) -> tuple[str | None, str]:
    """(layer prefix, 'W' | 'A' | 'B') when ``plain`` is a part of a LoRA layer to merge, else (None, '')."""
    head, sep, tail = plain.partition(".base_layer.")
    if sep and head in scalings and tail == "weight":
        return head, "W"
    for factor in ("A", "B"):
        head, sep, tail = plain.partition(f".lora_{factor}.")
        if sep and head in scalings and tail.endswith(".weight"):
            return head, factor
    return None, ""
