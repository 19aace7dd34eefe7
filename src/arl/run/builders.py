"""Builders: the parts of a run made from the composed config (docs/design.md section 3).

Engine, agent loop, sampling parameters, strategy and Trainer (its loggers: ``arl.run.loggers``), the RL module and its
rollout DataModule. Training (:mod:`arl.run.pipeline`, :mod:`arl.run.bc_stage`) and evaluation
(:mod:`arl.run.evaluation`) both build from here; nothing here runs a stage.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate

from arl.agent.corpus import corpus_texts
from arl.agent.loop import AgentLoop, LoopOptions
from arl.agent.mix import Member, MixLoop
from arl.algos import filters
from arl.callbacks import ThreadRebalance, WeightPush, WeightSync
from arl.datamodules.curriculum import Curriculum
from arl.datamodules.rollout_datamodule import FilterSchedule, IterationPlan, RolloutDataModule, ValidationPlan
from arl.distributed.fsdp import is_sharded, mark_weights_from_rank0, strategy_kwargs, strategy_name
from arl.distributed.placement import resolve_placement, trainer_processes
from arl.envs.registry import GATEWAY_ENVS, gateway_loop_class
from arl.models.config import ModelSettings, model_settings
from arl.models.loading import load_from_config
from arl.models.lora import is_peft_model
from arl.models.tiny import TinyConfig, ensure_tiny
from arl.modules.rl_module import AgenticRLModule, UpdateSettings
from arl.rollout.engine import LazyEngine, SamplingParams
from arl.rollout.hf_engine import HFEngine
from arl.rollout.vllm_engine import VLLMEngine  # the module, not vllm: that extra loads when an engine is made
from arl.run.loggers import build_loggers, log_hyperparameters
from arl.run.settings import EnvSettings, MixSettings, RolloutSettings, RunSettings, rollout_settings
from arl.utils.config import ConfigError


def load_model(model_cfg: Mapping[str, Any] | ModelSettings, trainer_cfg: dict[str, Any] | None = None,
               from_rank0: bool = False):
    """(model, tokenizer, source) of a ``model`` config (or its typed section); the embedded model's
    tokenizer corpus is played by :func:`arl.agent.corpus.corpus_texts`.

    Activation checkpointing is applied once: when the sharded trainer of ``trainer_cfg`` wraps
    every block itself (``trainer.sharding.activation_checkpointing``), the model's own
    (``model.gradient_checkpointing``) is left off. ``from_rank0`` (:func:`arl.distributed.fsdp.loads_on_rank0`): the
    global rank 0 loads the weights, every other rank builds the model on the meta device, and
    the model is marked so that sharding it and building an engine from it broadcast rank 0's
    weights (:func:`arl.distributed.fsdp.mark_weights_from_rank0`).
    """
    model = model_settings(model_cfg)
    if trainer_cfg and is_sharded(trainer_cfg) and (trainer_cfg.get("sharding") or {}).get("activation_checkpointing"):
        model = dataclasses.replace(model, gradient_checkpointing=False)
    if not from_rank0:
        return load_from_config(model, corpus_texts=corpus_texts)
    policy, tokenizer, source = load_from_config(model, corpus_texts=corpus_texts,
                                                 weights=resolve_placement().global_rank == 0)
    return mark_weights_from_rank0(policy), tokenizer, source


def tiny_model(cfg=None, cache_dir=None) -> Path:
    """The HF folder of the embedded model for ``cfg`` (a :class:`arl.models.tiny.TinyConfig`),
    its tokenizer trained on :func:`arl.agent.corpus.corpus_texts` of ``cfg.corpus_envs``; built
    once, cached under ``cache_dir`` (default ``$ARL_CACHE``)."""
    cfg = cfg or TinyConfig()
    return ensure_tiny(cfg, cache_dir, corpus=corpus_texts(list(cfg.corpus_envs), cfg.corpus_seeds))


def sampling_params(rollout: Mapping[str, Any] | RolloutSettings, validation: bool = False) -> SamplingParams:
    """Sampling parameters of the ``rollout`` group (greedy when the temperature is 0); with
    ``validation`` the ``val_*`` keys (the paper's T 0.6, top-p 0.95, top-k 20 by default)."""
    r = rollout_settings(rollout)
    return SamplingParams(
        temperature=r.val_temperature if validation else r.temperature,
        top_p=r.val_top_p if validation else r.top_p,
        top_k=r.val_top_k if validation else r.top_k,
        max_new_tokens=r.max_new_tokens,
        stop=r.stop,
    )


def validation_plan(rollout: Mapping[str, Any] | RolloutSettings) -> ValidationPlan:
    """How validation runs under the ``rollout`` group: the ``val_*`` sampling, ``val_episodes``
    held-out episodes, ``val_batch_size`` per engine batch."""
    r = rollout_settings(rollout)
    return ValidationPlan(sampling_params(r, validation=True), r.val_episodes, r.val_batch_size)


def build_engine(rollout: Mapping[str, Any] | RolloutSettings, model, tokenizer):
    """The rollout engine of ``rollout.engine``.

    vLLM's comes as a :class:`~arl.rollout.engine.LazyEngine`: it is built when the first trainer
    sets up (the weight-sync callback starts it), after the process group exists, so that under
    DDP/FSDP each rank builds its own engine inside it (or at its first use, outside a trainer).
    """
    r = rollout_settings(rollout)
    if r.engine == "hf":
        return HFEngine(model, tokenizer, max_batch_size=r.max_batch_size, device=r.device, cache=r.hf_cache)

    def build():
        return VLLMEngine.from_config({**dataclasses.asdict(r), "vllm": r.vllm}, model, tokenizer)

    return LazyEngine(build)


def build_agent_loop(env: EnvSettings | MixSettings, r: RolloutSettings, engine, tokenizer):
    """The agent loop of the ``env`` and ``rollout`` sections around ``engine`` (``env=program``: the
    user's agent program plays the episodes through the recording gateway; ``env=verifiers``: a verifiers
    environment does; ``env=mix``: one loop per member, :func:`build_mix_loop`)."""
    if isinstance(env, MixSettings):
        return build_mix_loop(env, r, engine, tokenizer)
    if env.name in GATEWAY_ENVS:  # the ecosystem extra's packages, imported only here
        loop = gateway_loop_class(env.name)(engine, tokenizer, **env.kwargs)
        loop.max_prompt_tokens = r.max_prompt_tokens
        loop.tool_parser = r.tool_parser
        if r.sample_mode == "trajectory":
            loop.use_trajectory_samples()
        return loop
    return AgentLoop(
        engine,
        tokenizer,
        env.name,
        env.kwargs,
        LoopOptions(
            history_window=env.history_window,
            show_observations=env.show_observations,
            max_turns=env.max_turns,
            max_prompt_tokens=r.max_prompt_tokens,
            sample_mode=r.sample_mode,
            schedule=r.schedule,
            n_workers=r.n_workers,
            step_timeout=r.step_timeout,
            tool_parser=r.tool_parser,
        ),
    )


def build_mix_loop(mix: MixSettings, r: RolloutSettings, engine, tokenizer) -> MixLoop:
    """``env=mix``: an :class:`AgentLoop` per member around the one ``engine`` (each its own env pool, prompts
    and turns), drawn by the weights in force at the start (:meth:`MixSettings.start_weights`). A curriculum
    metric on a member's ``score`` needs that member to grade its episodes (its env's spec)."""
    loops: dict[str, AgentLoop] = {}
    try:
        for name, section in mix.sections().items():
            loops[name] = build_agent_loop(section, r, engine, tokenizer)
        for stage in mix.curriculum or ():
            parts = (stage.metric or "").split("/")
            if len(parts) == 3 and parts[2] == "score" and not loops[parts[1]].spec.graded:
                raise ConfigError(f"env.curriculum: {stage.metric} is the score of member {parts[1]}, whose env "
                                  f"({mix.members[parts[1]].name}) does not grade its episodes; use its success_rate")
        members = [Member(name, loop, mix.members[name].val_episodes) for name, loop in loops.items()]
        return MixLoop(members, mix.start_weights())
    except BaseException:
        for loop in loops.values():
            loop.close()
        raise


def build_strategy(trainer_cfg: dict[str, Any], model=None):
    """``trainer.strategy`` as an object (or its string/None), completed from ``trainer.sharding``.

    ``FSDPStrategy`` gets ``auto_wrap_policy`` / ``activation_checkpointing_policy`` from the block
    class names (resolved against ``model``); ``ModelParallelStrategy`` gets a data-parallel size
    of all processes when it is left null (the module's ``configure_model`` shards).
    """
    strategy = trainer_cfg.get("strategy")
    if not isinstance(strategy, dict) or "_target_" not in strategy:
        return strategy
    strategy = dict(strategy)
    name = strategy_name(trainer_cfg)
    sharding = trainer_cfg.get("sharding") or {}
    if name == "FSDPStrategy":
        if model is None:
            raise ValueError("FSDPStrategy needs the model to resolve trainer.sharding.layer_cls")
        return instantiate(strategy, **strategy_kwargs(strategy, sharding, model))
    if name == "ModelParallelStrategy":
        if strategy.get("data_parallel_size") in (None, "auto"):
            strategy["data_parallel_size"] = trainer_processes(trainer_cfg)
        strategy.setdefault("tensor_parallel_size", 1)
        if strategy.get("tensor_parallel_size") in (None, "auto"):
            strategy["tensor_parallel_size"] = 1
    return instantiate(strategy)


def build_trainer(run: RunSettings, stage: str, callbacks: list, model=None, purge_step: int | None = None,
                  extra_callbacks: list | None = None, **overrides) -> L.Trainer:
    """A Trainer of ``run.trainer`` for ``stage``, with the loggers of ``run.logger``.

    The RL stage's callbacks are the ``callbacks`` config group, instantiated from their
    ``_target_`` (thread share, progress lines, checkpoints, collapse detector); the BC stage gets
    the thread share and the ``callbacks`` given. The order is: ``callbacks`` minus the weight sync
    and push, ``extra_callbacks`` (programmatic use, tests), the config's callbacks, then the weight
    sync and push (so they load whatever the others left, e.g. after a rollback); Lightning moves
    checkpoint callbacks to the end.
    """
    configured = run.callbacks.values() if stage == "rl" else ()
    extra = [instantiate(cb) for cb in configured if cb is not None and "_target_" in cb]
    last = (WeightSync, WeightPush)
    head = ([] if stage == "rl" else [ThreadRebalance()]) + [cb for cb in callbacks if not isinstance(cb, last)]
    tail = [cb for cb in callbacks if isinstance(cb, last)]
    tcfg = copy.deepcopy(run.trainer)
    strategy = build_strategy(tcfg, model)
    tcfg.pop("sharding", None)
    tcfg.pop("strategy", None)
    kwargs = dict(overrides)
    if strategy is not None:
        kwargs["strategy"] = strategy
    trainer = instantiate(
        tcfg, logger=build_loggers(run, stage, purge_step), callbacks=head + list(extra_callbacks or []) + extra + tail,
        **kwargs,
    )
    log_hyperparameters(trainer.loggers, run.config)
    return trainer


def old_log_probs_source(run: RunSettings) -> str:
    """``rl.old_log_probs`` resolved: ``rollout`` (pi_old is the rollout's own log-probs) or ``recompute``.

    ``auto`` takes the rollout's where they are what a trainer pass would compute: the transformers
    engine (it generates with the policy module itself, or a copy synced after every update)
    in fp32 with fp32 training (neither ``trainer.precision`` nor FSDP2's
    ``trainer.sharding.mixed_precision`` computing in half precision), and no rollout
    correction (which measures exactly that gap). In asynchronous mode (``rl.max_staleness``)
    without the correction, ``auto`` is always the rollout's: a stale turn's ratio must be taken
    against the behaviour policy that sampled it (AReaL's plain PPO), never against the learner's
    current weights (a trainer pass), which would train it as on-policy; with the correction on,
    the recomputed pi_old is decoupled PPO's proximal policy.
    """
    if run.rl.old_log_probs != "auto":
        return run.rl.old_log_probs
    if run.rl.max_staleness is not None and not run.algo.rollout_correction.enabled:
        return "rollout"
    precision = str(run.trainer.get("precision", "32-true"))
    sharded_half = is_sharded(run.trainer) and bool((run.trainer.get("sharding") or {}).get("mixed_precision"))
    exact = (
        run.rollout.engine == "hf"
        and run.model.dtype == "float32"
        and precision in ("32", "32-true")
        and not sharded_half
        and not run.algo.rollout_correction.enabled
    )
    return "rollout" if exact else "recompute"


def reference_copy(model, dtype: str | None = None):
    """A frozen copy of ``model`` for the KL term, its floating-point parameters in ``dtype``
    (``rl.reference_dtype``; None keeps the policy's). Parameters are cast one at a time as they are
    copied, so a bf16 copy never holds a second full-precision model; tied weights stay one tensor,
    nothing is shared with the policy, and buffers (rotary ``inv_freq``) and the modules the model
    keeps in fp32 (``_keep_in_fp32_modules``) keep their dtype: bf16 angles would be off by radians
    at a few thousand positions."""
    if dtype is None or all(p.dtype == getattr(torch, dtype) for p in model.parameters() if p.is_floating_point()):
        return copy.deepcopy(model)
    target = getattr(torch, dtype)
    keep = tuple(getattr(model, "_keep_in_fp32_modules", None) or ())
    memo = {}
    for name, param in model.named_parameters(remove_duplicate=True):  # a tied weight: one entry
        if param.is_floating_point() and not any(k in name.split(".") for k in keep):
            memo[id(param)] = torch.nn.Parameter(param.detach().to(target, copy=True), requires_grad=param.requires_grad)
    return copy.deepcopy(model, memo)


def build_rl_module(run: RunSettings, model, tokenizer) -> AgenticRLModule:
    """The RL LightningModule of ``run``; the frozen reference copy exists only when
    ``algo.kl.coef > 0`` and the policy has no LoRA adapters (a LoRA policy's reference is itself
    with the adapters off, which needs no copy), in ``rl.reference_dtype`` when set."""
    algo, rl = run.algo, run.rl
    reference = None
    if algo.kl.coef > 0 and not is_peft_model(model):
        reference = reference_copy(model, rl.reference_dtype)
    update = UpdateSettings(
        ppo_epochs=rl.ppo_epochs,
        mini_batches=rl.mini_batches,
        mini_batch_size=rl.mini_batch_size,
        micro_token_budget=rl.micro_token_budget,
        grad_clip=rl.grad_clip,
        warmup_steps=rl.warmup_steps,
        temperature=run.rollout.temperature or 1.0,
        old_log_probs=old_log_probs_source(run),
        logit_chunk_tokens=run.model.logit_chunk_tokens,
        balance_tokens=rl.balance_tokens,
        sharding=run.trainer.get("sharding"),
        asynchronous=run.rl.max_staleness is not None,
    )
    return AgenticRLModule(model, reference, tokenizer, algo, instantiate(rl.optimizer), update)


def build_rollout_datamodule(run: RunSettings, loop: AgentLoop, pad_id: int) -> RolloutDataModule:
    """The online DataModule of the RL stage: rollout budgets, the filter (its settings bound) and
    its re-rollout schedule, validation; batches padded with ``pad_id`` (the policy tokenizer's)."""
    r, dynamic = run.rollout, run.algo.filter
    dm = RolloutDataModule(
        loop,
        IterationPlan(run.rl.iterations, r.tasks_per_iteration, r.group_size, sampling_params(r)),
        validation_plan(r),
        FilterSchedule(filters.group_filter(dynamic), dynamic.max_rollout_rounds, dynamic.cold_start,
                       dynamic.fill_last_round),
        seed=run.seed,
        pad_id=pad_id,
    )
    if isinstance(run.env, MixSettings) and run.env.curriculum is not None:
        dm.use_curriculum(Curriculum(run.env.curriculum))
    return dm
