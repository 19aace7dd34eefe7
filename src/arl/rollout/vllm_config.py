"""The ``rollout.vllm`` block as a typed, open section (no vllm import: it is checked at start-up).

Each key's value, default included, is set once, in ``configs/rollout/vllm.yaml``, where its
comment says what it means; :class:`VLLMSettings` says what each value must be. The block is open:
a key it does not name (``max_num_seqs``, ``swap_space``...) is kept in ``passthrough`` and handed
to ``vllm.LLM`` as it is, so any vLLM argument can be set without a change here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arl.utils.config import container, typed_section
from arl.utils.schema import (
    BOOLEAN,
    Check,
    build,
    integer,
    is_mapping,
    number,
    one_of,
    optional,
    problems,
    required,
    rest,
)

VLLM_DTYPES = ("auto", "float32", "bfloat16", "float16")
LOAD_FORMATS = ("dummy", "auto", "safetensors", "pt")  # dummy: no checkpoint read (the first sync loads the weights)
SLEEP_LEVEL = Check(
    "`1` \\| `2`", lambda value: None if value in (1, 2) and not isinstance(value, bool) else "must be 1 or 2", int
)


@dataclass(frozen=True, kw_only=True)
class VLLMSettings:
    """``rollout.vllm``: the arguments of ``vllm.LLM`` this engine reads or derives, and the rest."""

    gpu_memory_utilization: float = required(number(0.0, 1.0, low_open=True))
    dtype: str = required(one_of(VLLM_DTYPES))
    enforce_eager: bool | None = required(optional(BOOLEAN))
    tensor_parallel_size: int = required(integer(1))
    enable_sleep_mode: bool = required(BOOLEAN)
    sleep_level: int = required(SLEEP_LEVEL)  # this engine's, not a vllm.LLM argument
    max_model_len: int | None = required(optional(integer(1)))
    kv_cache_memory_bytes: int | None = required(optional(integer(1)))
    seed: int = required(integer(0))
    load_format: str = required(one_of(LOAD_FORMATS))
    passthrough: dict = rest("other vllm.LLM arguments, passed as they are")


def _block_problem(value: Any) -> str | None:
    if not is_mapping(value):
        return "must be a mapping"
    errors = problems(container(value), VLLMSettings, "rollout.vllm")
    return "; ".join(errors) if errors else None


def vllm_settings(block: Mapping[str, Any] | VLLMSettings) -> VLLMSettings:
    """The typed ``rollout.vllm`` block (a ``VLLMSettings`` is returned as it is).

    Raises:
        ConfigError: naming every missing or invalid key.
    """
    return typed_section(VLLMSettings, block, "rollout.vllm")


# inside the rollout section: checked there (every problem in the rollout's error), then only built
VLLM_BLOCK = Check("the `vllm.LLM` block (configs/rollout/vllm.yaml)", _block_problem,
                   lambda block: build(VLLMSettings, container(block)))
