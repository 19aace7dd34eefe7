"""Load a policy and its tokenizer from the embedded model, an HF folder, a hub id or a GGUF file.

Every source ends in the same place: a ``PreTrainedModel`` in training dtype and a fast tokenizer
with a chat template and a padding token. Hub ids work wherever the hub is reachable (on this
project's CI machines it is not, so tests use local folders).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(model_cfg: dict[str, Any]) -> tuple[str, str | None]:
    """(folder or hub id, gguf file name or None) of a ``model`` config."""
    if model_cfg.get("name") == "tiny" and not model_cfg.get("path"):
        from arl.models.tiny import TinyConfig, ensure_tiny

        tiny_cfg = TinyConfig(**dict(model_cfg.get("tiny") or {}))
        return str(ensure_tiny(tiny_cfg, model_cfg.get("cache_dir"))), None
    path = model_cfg.get("path")
    if not path:
        raise ValueError(f"model.path must be set for model.name={model_cfg.get('name')!r}")
    return str(path), model_cfg.get("gguf_file")


def check_tokenizer(tokenizer) -> None:
    """A usable chat tokenizer: chat template present, a padding token (EOS if none)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; the agent prompts need one")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"


def load_policy(path: str | Path, dtype: str = "float32", gguf_file: str | None = None, gradient_checkpointing: bool = False):
    """Load (model, tokenizer) from an HF folder or hub id (optionally a GGUF file in it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
    check_tokenizer(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype], **kwargs)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model, tokenizer


def load_from_config(model_cfg: dict[str, Any]):
    """(model, tokenizer, source path) for a ``model`` config; ``init_from`` overrides the source."""
    init_from = model_cfg.get("init_from")
    if init_from:
        path, gguf = str(init_from), None
    else:
        path, gguf = resolve_model_path(model_cfg)
    model, tokenizer = load_policy(path, model_cfg.get("dtype", "float32"), gguf, model_cfg.get("gradient_checkpointing", False))
    return model, tokenizer, path


def save_hf(model, tokenizer, out_dir: str | Path) -> Path:
    """Save an HF folder that ``AutoModelForCausalLM.from_pretrained`` loads."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
