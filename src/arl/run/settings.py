"""The run's config groups as typed sections: ``env``, ``rollout``, ``rl``, ``bc`` and ``model``.

Each key's value, default included, is set once, in the yaml (``configs/env/<env>.yaml``,
``configs/rollout/base.yaml`` and its engine files, the ``rl`` and ``bc`` blocks of
``configs/train.yaml``, ``configs/model/<source>.yaml``), where its comment says what it means.
The sections say what each key must be: :func:`run_settings` checks the five groups (every
missing, unknown or invalid key, in one error) and returns them typed, so the builders read ``run.rl.ppo_epochs`` as an ``int``
without casting or defaulting anything. A key only some variants of a group have (``hf_cache``
of the transformers engine, the ``vllm`` block of vLLM's) is None where the variant lacks it.

The ``model`` group's section is :class:`arl.models.config.ModelSettings` (the loaders read it too);
the ``algo`` group has its own schema, which also holds the defaults (:mod:`arl.algos.schema`); the ``trainer``,
``logger`` and ``callbacks`` groups name their classes (``_target_``) and are instantiated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arl.agent.loop import SCHEDULES
from arl.agent.samples import SAMPLE_MODES
from arl.models.config import ModelSettings, without_missing_path
from arl.plan.memory import ENGINES
from arl.rollout.hf_engine import HF_CACHES
from arl.rollout.vllm_config import VLLM_BLOCK, VLLMSettings
from arl.utils.config import ConfigError, container, typed_section
from arl.utils.schema import (
    BOOLEAN,
    INSTANTIABLE,
    MAPPING,
    NON_EMPTY,
    STRINGS,
    Check,
    absent_or,
    build,
    integer,
    number,
    one_of,
    optional,
    problems,
    required,
    section,
)

OLD_LOG_PROBS = ("auto", "rollout", "recompute")


def _device_problem(value: Any) -> str | None:
    ok = value is None or value in ("auto", "cpu") or (isinstance(value, str) and re.fullmatch(r"cuda(:\d+)?", value))
    return None if ok else "is not valid; valid: auto, cpu, cuda, cuda:N"


DEVICE = Check("`auto` \\| `cpu` \\| `cuda[:N]`", _device_problem)
PROBABILITY = number(0.0, 1.0, low_open=True)  # top-p: (0, 1]
COUNT = integer(1)


@dataclass(frozen=True, kw_only=True)
class EnvSettings:
    """``env``: the environment and how its history reaches the prompt (configs/env/<env>.yaml)."""

    name: str = required(NON_EMPTY)  # a registered env, or "package.module:Class" (checked in arl.run.checks)
    history_window: int = required(integer(0))
    show_observations: bool = required(BOOLEAN)
    max_turns: int | None = required(optional(COUNT))
    kwargs: dict = required(MAPPING)


@dataclass(frozen=True, kw_only=True)
class RolloutSettings:
    """``rollout``: sampling, batch sizes, validation and the engine (configs/rollout/)."""

    engine: str = required(one_of(ENGINES))
    groups_per_step: int = required(COUNT)
    group_size: int = required(COUNT)
    temperature: float = required(number(0.0))
    top_p: float = required(PROBABILITY)
    top_k: int = required(integer(0))
    max_new_tokens: int = required(COUNT)
    stop: tuple = required(STRINGS)
    val_temperature: float = required(number(0.0))
    val_top_p: float = required(PROBABILITY)
    val_top_k: int = required(integer(0))
    val_episodes: int = required(COUNT)
    val_batch_size: int = required(COUNT)
    max_batch_size: int = required(COUNT)
    device: str | None = required(DEVICE)
    max_prompt_tokens: int = required(COUNT)
    sample_mode: str = required(one_of(SAMPLE_MODES))
    schedule: str = required(one_of(SCHEDULES))
    n_workers: int = required(integer(0))
    step_timeout: float = required(number(0.0, low_open=True))
    hf_cache: str | None = absent_or(one_of(HF_CACHES))  # rollout=hf
    vllm: VLLMSettings | None = absent_or(VLLM_BLOCK)  # rollout=vllm: arguments of vllm.LLM (an open section)


REFERENCE_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, kw_only=True)
class RLSettings:
    """``rl``: the RL stage's size, its optimiser and its checkpoints (configs/train.yaml)."""

    enabled: bool = required(BOOLEAN)
    iterations: int = required(COUNT)
    ppo_epochs: int = required(COUNT)
    mini_batches: int = required(COUNT)
    mini_batch_size: int | None = required(optional(COUNT))
    micro_token_budget: int = required(COUNT)
    balance_tokens: bool = required(BOOLEAN)
    old_log_probs: str = required(one_of(OLD_LOG_PROBS))
    grad_clip: float = required(number(0.0, low_open=True))
    reference_dtype: str | None = required(optional(one_of(REFERENCE_DTYPES)))
    warmup_steps: int = required(integer(0))
    val_every: int = required(COUNT)
    ckpt_every: int = required(integer(0))
    resume_in_place: bool = required(BOOLEAN)
    start_validation_cache: str | None = required(optional(NON_EMPTY))
    optimizer: dict = required(INSTANTIABLE)


@dataclass(frozen=True, kw_only=True)
class BootstrapSettings:
    """``bc.bootstrap``: self-bootstrapping (rejection sampling) after the expert round."""

    enabled: bool = required(BOOLEAN)
    episodes: int = required(COUNT)
    temperature: float = required(number(0.0, low_open=True))
    min_return: float = required(number())
    epochs: int = required(COUNT)


@dataclass(frozen=True, kw_only=True)
class DaggerSettings:
    """``bc.dagger``: DAgger rounds after cloning (and bootstrapping)."""

    enabled: bool = required(BOOLEAN)
    rounds: int = required(COUNT)
    episodes: int = required(COUNT)
    temperature: float = required(number(0.0))
    epochs: int = required(COUNT)


def _regex_problem(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        return "must be a regular expression (a non-empty string) or null"
    try:
        re.compile(value)
    except re.error as err:
        return f"is not a valid regular expression ({err})"
    return None


REGEX = Check("regular expression or `null`", _regex_problem)


@dataclass(frozen=True, kw_only=True)
class RepeatTurnsSettings:
    """``bc.repeat_turns``: turns trained on more than once an epoch."""

    pattern: str | None = required(REGEX)
    times: int = required(COUNT)


@dataclass(frozen=True, kw_only=True)
class BCSettings:
    """``bc``: behaviour cloning before RL (configs/train.yaml)."""

    enabled: bool = required(BOOLEAN)
    episodes: int = required(COUNT)
    epochs: int = required(integer(0))
    batch_size: int = required(COUNT)
    val_fraction: float = required(number(0.0, 1.0, high_open=True))
    val_every: int | None = required(optional(COUNT))
    val_token_budget: int = required(COUNT)
    micro_token_budget: int = required(COUNT)
    warmup_steps: int = required(integer(0))
    dataset_path: str | None = required(optional(NON_EMPTY))
    val_untrained: bool = required(BOOLEAN)
    bootstrap: BootstrapSettings = section(BootstrapSettings)
    dagger: DaggerSettings = section(DaggerSettings)
    repeat_turns: RepeatTurnsSettings = section(RepeatTurnsSettings)
    optimizer: dict = required(INSTANTIABLE)


GROUPS = {"env": EnvSettings, "rollout": RolloutSettings, "rl": RLSettings, "bc": BCSettings, "model": ModelSettings}


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The typed groups of a training config."""

    env: EnvSettings
    rollout: RolloutSettings
    rl: RLSettings
    bc: BCSettings
    model: ModelSettings


def env_settings(env: Mapping[str, Any] | EnvSettings) -> EnvSettings:
    """The checked, typed ``env`` group (:class:`ConfigError` names every bad key)."""
    return typed_section(EnvSettings, env, "env")


def rollout_settings(rollout: Mapping[str, Any] | RolloutSettings) -> RolloutSettings:
    """The checked, typed ``rollout`` group (:class:`ConfigError` names every bad key)."""
    return typed_section(RolloutSettings, rollout, "rollout")


def run_settings(c: Mapping[str, Any]) -> RunSettings:
    """The checked, typed ``env``, ``rollout``, ``rl``, ``bc`` and ``model`` groups of a training
    config ``c`` (plain containers or a ``DictConfig``); one :class:`ConfigError` lists every
    missing, unknown or invalid key of the five."""
    c = container(c)
    c["model"] = without_missing_path(c.get("model"))
    errors = [e for name, cls in GROUPS.items() for e in problems(c.get(name), cls, name)]
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))
    return RunSettings(**{name: build(cls, c[name]) for name, cls in GROUPS.items()})
