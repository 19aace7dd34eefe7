"""A training config as one typed object, :class:`RunSettings`, made once by the entry point.

``src/train.py`` composes the config with Hydra and turns it into :class:`RunSettings` once
(:func:`arl.run.checks.validate_config` calls :func:`run_settings`); everything below reads the typed
object it is handed, never the composed config. Each key's value, default included, is set once, in
the yaml (``configs/env/<env>.yaml``, ``configs/rollout/base.yaml`` and its engine files, the ``rl``
and ``bc`` blocks of ``configs/train.yaml``, ``configs/model/<source>.yaml``, ``configs/paths/``), where
its comment says what it means. The sections say what each key must be: :func:`run_settings` checks
the groups (every missing, unknown or invalid key, in one error) and returns them typed, so the
builders read ``run.rl.ppo_epochs`` as an ``int`` without casting or defaulting anything. A key only
some variants of a group have (``hf_cache`` of the transformers engine, the ``vllm`` block of vLLM's)
is None where the variant lacks it.

The ``model`` group's section is :class:`arl.models.config.ModelSettings` (the loaders read it too);
the ``algo`` group's is :class:`arl.algos.schema.AlgoConfig`, whose schema also holds the defaults;
the ``trainer``, ``logger`` and ``callbacks`` groups name their classes (``_target_``) and are kept
as the mappings they are instantiated from. ``RunSettings.config`` is the composed config as plain
containers: what was run, for the records (hyperparameter logs, the start-validation key), not
read for decisions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from arl.agent.loop import SCHEDULES
from arl.agent.mix import MIX_NAME
from arl.agent.samples import SAMPLE_MODES
from arl.agent.tool_calls import parser_names
from arl.algos import schema as algo_schema
from arl.algos.schema import AlgoConfig
from arl.datamodules.curriculum import Stage, build_stages, curriculum_problems
from arl.models.config import ModelSettings, without_missing_path
from arl.plan.memory import ENGINES
from arl.rollout.hf_engine import HF_CACHES
from arl.rollout.vllm_config import VLLM_BLOCK, VLLMSettings
from arl.utils.config import ConfigError, container, renamed_key_problems, typed_section
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
    is_mapping,
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
class MemberSettings(EnvSettings):
    """``env.members.<name>`` of a mix: a member env's own section (``configs/env/<env>.yaml``), its weight and
    the held-out episodes it validates on."""

    weight: float | None = absent_or(optional(number(0.0)))  # unread under a curriculum (its stages weigh)
    val_episodes: int | None = absent_or(optional(COUNT))  # null or absent: rollout.val_episodes


def _members_problem(value: Any) -> str | None:
    ok = is_mapping(value) and len(value) > 0 and all(isinstance(k, str) and k for k in value)
    return None if ok else "must be a non-empty mapping of member names to env sections"


MEMBERS = Check("mapping of member names to env sections", _members_problem,
                lambda value: {str(k): build(MemberSettings, v) for k, v in value.items()})


def _curriculum_problem(value: Any) -> str | None:
    return None if value is None or is_mapping(value) else "must be a mapping (stages) or null"


CURRICULUM = Check("`null` or a mapping with `stages`", _curriculum_problem,
                   lambda value: None if value is None else build_stages(value))


@dataclass(frozen=True, kw_only=True)
class MixSettings:
    """``env`` of ``env=mix``: several member envs, one policy (configs/env/mix.yaml, docs/mixtures.md).

    ``kwargs`` are values for every member that has the key among its own kwargs (``debug=cpu_small`` sets
    ``prompt_style`` here); ``curriculum`` (None: the members' fixed weights) is the stages of member weights."""

    name: str = required(one_of((MIX_NAME,)))
    kwargs: dict = required(MAPPING)
    members: dict[str, MemberSettings] = required(MEMBERS)
    curriculum: tuple[Stage, ...] | None = required(CURRICULUM)

    @classmethod
    def section_problems(cls, node: Mapping[str, Any], path: str) -> list[str]:
        """The members' own sections, their weights, and the curriculum against the members."""
        members = node["members"]
        errors = [e for name, m in members.items() for e in problems(m, MemberSettings, f"{path}.members.{name}")]
        if errors:
            return errors
        curriculum = node["curriculum"]
        if curriculum is not None:
            # whether a member grades its episodes (val/<member>/score) is its env's spec: checked when its loop is built
            return curriculum_problems(curriculum, list(members), list(members), f"{path}.curriculum")
        missing = [n for n, m in members.items() if m.get("weight") is None]
        if missing:
            return [f"{path}.members.{n}.weight is missing (a number >= 0; +{path}.members.{n}.weight=... adds it), or "
                    f"give {path}.curriculum" for n in missing]
        if sum(float(m["weight"]) for m in members.values()) <= 0:
            return [f"{path}.members.*.weight are all 0: some member must be played"]
        return []

    @property
    def max_turns(self) -> int | None:
        """The longest member's turns per episode (None when a member has no bound of its own)."""
        turns = [m.max_turns for m in self.members.values()]
        return None if any(t is None for t in turns) else max(turns)

    def sections(self) -> dict[str, EnvSettings]:
        """Each member's env section as its loop plays it: its own kwargs, with the mix's ``kwargs`` for the keys
        it has."""
        out = {}
        for name, m in self.members.items():
            kwargs = {**m.kwargs, **{k: v for k, v in self.kwargs.items() if k in m.kwargs}}
            out[name] = EnvSettings(name=m.name, history_window=m.history_window, show_observations=m.show_observations,
                                    max_turns=m.max_turns, kwargs=kwargs)
        return out

    def start_weights(self) -> dict[str, float]:
        """The weights in force at the start: the curriculum's first stage, else the members' weights."""
        if self.curriculum is not None:
            return dict(self.curriculum[0].weights)
        return {name: float(m.weight or 0.0) for name, m in self.members.items()}


@dataclass(frozen=True, kw_only=True)
class RolloutSettings:
    """``rollout``: sampling, batch sizes, validation and the engine (configs/rollout/)."""

    engine: str = required(one_of(ENGINES))
    tasks_per_iteration: int = required(COUNT)
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
    tool_parser: str = required(one_of(parser_names))
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
    mini_batches: int | None = required(optional(COUNT))
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
    max_staleness: int | None = required(optional(integer(0)))
    rollout_watchdog_s: float = required(number(0.0))
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
class PathSettings:
    """``paths``: where a run reads and writes (configs/paths/default.yaml)."""

    root_dir: str = required(NON_EMPTY)
    log_dir: str = required(NON_EMPTY)
    data_dir: str = required(NON_EMPTY)
    output_dir: str = required(NON_EMPTY)


INSTANTIATED = ("trainer", "logger", "callbacks")  # groups kept as the mappings Hydra instantiates


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """A training config, checked and typed (:func:`run_settings`).

    ``algo.loss.horizon`` is resolved (:func:`loss_horizon`); ``trainer``, ``logger`` and
    ``callbacks`` are their groups' mappings (``_target_`` blocks); ``config`` is the whole composed
    config as plain containers, for records only."""

    env: EnvSettings | MixSettings
    rollout: RolloutSettings
    rl: RLSettings
    bc: BCSettings
    model: ModelSettings
    algo: AlgoConfig
    paths: PathSettings
    trainer: dict
    logger: dict
    callbacks: dict
    seed: int
    task_name: str
    ckpt_path: str | None
    optimized_metric: str | None
    config: dict = field(repr=False, compare=False)

    def relocated(self, output_dir: str) -> RunSettings:
        """The same run writing into ``output_dir`` (a resume in place): every value that named a
        path under the old ``paths.output_dir`` (the logger's ``save_dir``, the checkpoints' folder)
        now names it under the new one."""
        return run_settings(_rerooted(self.config, self.paths.output_dir.rstrip("/"), output_dir.rstrip("/")))


def _rerooted(value: Any, old: str, new: str) -> Any:
    if isinstance(value, Mapping):
        return {k: _rerooted(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rerooted(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old):]
    return value


def env_schema(env: Any) -> type:
    """The section an ``env`` group is checked against: :class:`MixSettings` for ``name: mix``, else
    :class:`EnvSettings`."""
    return MixSettings if is_mapping(env) and env.get("name") == MIX_NAME else EnvSettings


def env_settings(env: Mapping[str, Any] | EnvSettings | MixSettings) -> EnvSettings | MixSettings:
    """The checked, typed ``env`` group (:class:`ConfigError` names every bad key)."""
    if isinstance(env, (EnvSettings, MixSettings)):
        return env
    return typed_section(env_schema(env), env, "env")


def rollout_settings(rollout: Mapping[str, Any] | RolloutSettings) -> RolloutSettings:
    """The checked, typed ``rollout`` group (:class:`ConfigError` names every bad key)."""
    return typed_section(RolloutSettings, rollout, "rollout")


def loss_horizon(algo: AlgoConfig, env: EnvSettings, rollout: RolloutSettings) -> int:
    """H of ``seq-mean-token-sum-norm``: ``algo.loss.horizon``, else the generation budget of one
    sample (``rollout.max_new_tokens``; times ``env.max_turns`` for a whole-episode sample)."""
    if algo.loss.horizon is not None:
        return algo.loss.horizon
    if rollout.sample_mode == "trajectory":
        if env.max_turns is None and algo.loss.agg == "seq-mean-token-sum-norm":
            raise ConfigError(f"algo.loss.agg=seq-mean-token-sum-norm with trajectory samples needs algo.loss.horizon: "
                              f"env={env.name} has no env.max_turns to size a whole episode by (its episodes end "
                              "when the program or environment says)")
        return rollout.max_new_tokens * (env.max_turns or 1)
    return rollout.max_new_tokens


def _seed_problems(c: Mapping[str, Any]) -> list[str]:
    seed = c.get("seed")
    return [] if isinstance(seed, int) and not isinstance(seed, bool) else [f"seed={seed!r} must be an integer"]


def _top_level_problems(c: Mapping[str, Any]) -> list[str]:
    errors = _seed_problems(c)
    if not isinstance(c.get("task_name"), str) or not c.get("task_name"):
        errors.append(f"task_name={c.get('task_name')!r} must be a non-empty string")
    for key in ("ckpt_path", "optimized_metric"):
        if c.get(key) is not None and not isinstance(c.get(key), str):
            errors.append(f"{key}={c.get(key)!r} must be a string or null")
    for key in INSTANTIATED:
        if c.get(key) is not None and not isinstance(c.get(key), Mapping):
            errors.append(f"{key} must be a mapping (its config group), got {c.get(key)!r}")
    return errors


def _typed_sections(c: dict[str, Any], typed: dict[str, type], other_problems: list[str]) -> dict[str, Any]:
    """The sections ``typed`` (name -> schema) of the config ``c``, built; one :class:`ConfigError`
    lists every key given by its old name, every missing, unknown or invalid key of the sections and
    the ``other_problems``."""
    node = {**c, "model": without_missing_path(c.get("model"))}
    if "env" in typed:
        typed = {**typed, "env": env_schema(node.get("env"))}
    errors = renamed_key_problems(c)
    errors += [e for name, cls in typed.items() for e in problems(node.get(name), cls, name)]
    errors += other_problems
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))
    return {name: build(cls, node[name]) for name, cls in typed.items()}


def run_settings(c: Mapping[str, Any]) -> RunSettings:
    """The checked, typed training config ``c`` (plain containers or a ``DictConfig``); one
    :class:`ConfigError` lists every missing, unknown or invalid key of its typed groups (``env``,
    ``rollout``, ``rl``, ``bc``, ``model``, ``algo``, ``paths``) and top-level keys."""
    c = container(c)
    groups = _typed_sections(c, {**GROUPS, "algo": AlgoConfig, "paths": PathSettings}, _top_level_problems(c))
    groups["algo"] = algo_schema.replace(
        groups["algo"], **{"loss.horizon": loss_horizon(groups["algo"], groups["env"], groups["rollout"])}
    )
    return RunSettings(
        **groups,
        **{key: dict(c.get(key) or {}) for key in INSTANTIATED},
        seed=c["seed"],
        task_name=c["task_name"],
        ckpt_path=None if c.get("ckpt_path") is None else str(c["ckpt_path"]),
        optimized_metric=c.get("optimized_metric"),
        config=c,
    )


@dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """An evaluation config (``configs/eval.yaml``), checked and typed (:func:`eval_settings`), after
    the run that wrote the checkpoint lent it its ``model``, ``env`` and episode-shaping rollout keys."""

    env: EnvSettings | MixSettings
    rollout: RolloutSettings
    model: ModelSettings
    paths: PathSettings
    seed: int
    save_episodes: bool


def eval_settings(c: Mapping[str, Any]) -> EvalSettings:
    """The checked, typed evaluation config ``c`` (one :class:`ConfigError` lists every bad key)."""
    c = container(c)
    others = _seed_problems(c)
    if not isinstance(c.get("save_episodes"), bool):
        others.append(f"save_episodes={c.get('save_episodes')!r} must be true or false")
    typed = {"env": EnvSettings, "rollout": RolloutSettings, "model": ModelSettings, "paths": PathSettings}
    return EvalSettings(**_typed_sections(c, typed, others), seed=c["seed"], save_episodes=c["save_episodes"])
