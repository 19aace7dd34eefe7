"""Builders: the parts of a run made from the composed config (docs/design.md section 3).

Engine, agent loop, sampling parameters, loggers, strategy and Trainer, the RL module and its
rollout DataModule. Training (:mod:`arl.run.pipeline`, :mod:`arl.run.bc_stage`) and evaluation
(:mod:`arl.run.evaluation`) both build from here; nothing here runs a stage.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig

from arl.agent.loop import AgentLoop
from arl.algos import filters, schema
from arl.algos.schema import algo_config
from arl.callbacks import ThreadRebalance, WeightSync
from arl.datamodules.rollout_datamodule import RolloutDataModule
from arl.modules.rl_module import AgenticRLModule
from arl.rollout.engine import LazyEngine, SamplingParams
from arl.rollout.hf_engine import DEFAULT_HF_CACHE, HFEngine
from arl.utils.config import container
from arl.utils.fsdp import is_sharded, strategy_kwargs, strategy_name
from arl.utils.placement import trainer_processes


def load_model(model_cfg: dict[str, Any], trainer_cfg: dict[str, Any] | None = None):
    """(model, tokenizer, source) of a ``model`` config; the embedded model's tokenizer corpus is
    played by :func:`arl.agent.corpus.corpus_texts`.

    Activation checkpointing is applied once: when the sharded trainer of ``trainer_cfg`` wraps
    every block itself (``trainer.sharding.activation_checkpointing``), the model's own
    (``model.gradient_checkpointing``) is left off.
    """
    from arl.agent.corpus import corpus_texts
    from arl.models.loading import load_from_config

    if trainer_cfg and is_sharded(trainer_cfg) and (trainer_cfg.get("sharding") or {}).get("activation_checkpointing"):
        model_cfg = {**model_cfg, "gradient_checkpointing": False}
    return load_from_config(model_cfg, corpus_texts=corpus_texts)


def tiny_model(cfg=None, cache_dir=None) -> Path:
    """The HF folder of the embedded model for ``cfg`` (a :class:`arl.models.tiny.TinyConfig`),
    its tokenizer trained on :func:`arl.agent.corpus.corpus_texts` of ``cfg.corpus_envs``; built
    once, cached under ``cache_dir`` (default ``$ARL_CACHE``)."""
    from arl.agent.corpus import corpus_texts
    from arl.models.tiny import TinyConfig, ensure_tiny

    cfg = cfg or TinyConfig()
    return ensure_tiny(cfg, cache_dir, corpus=corpus_texts(list(cfg.corpus_envs), cfg.corpus_seeds))


def sampling_params(rollout: dict[str, Any], validation: bool = False) -> SamplingParams:
    """Sampling parameters of the ``rollout`` config (greedy when the temperature is 0); with
    ``validation`` the ``val_*`` keys (the paper's T 0.6, top-p 0.95, top-k 20 by default)."""
    prefix = "val_" if validation else ""
    return SamplingParams(
        temperature=float(rollout[f"{prefix}temperature"]),
        top_p=float(rollout.get(f"{prefix}top_p", rollout["top_p"])),
        top_k=int(rollout.get(f"{prefix}top_k", rollout["top_k"])),
        max_new_tokens=int(rollout["max_new_tokens"]),
        stop=tuple(rollout.get("stop", ["</action>"])),
    )


def build_engine(rollout: dict[str, Any], model, tokenizer):
    """The rollout engine of ``rollout.engine``.

    vLLM's comes as a :class:`~arl.rollout.engine.LazyEngine`: it is built when the first trainer
    sets up (the weight-sync callback starts it), after the process group exists, so that under
    DDP/FSDP each rank builds its own engine inside it (or at its first use, outside a trainer).
    """
    if rollout["engine"] == "hf":
        return HFEngine(model, tokenizer, max_batch_size=int(rollout["max_batch_size"]), device=rollout.get("device"),
                        cache=str(rollout.get("hf_cache", DEFAULT_HF_CACHE)))

    def build():
        from arl.rollout.vllm_engine import VLLMEngine  # lazy: the vllm extra

        return VLLMEngine.from_config(rollout, model, tokenizer)

    return LazyEngine(build)


def build_agent_loop(cfg: dict[str, Any], engine, tokenizer) -> AgentLoop:
    env = cfg["env"]
    return AgentLoop(
        engine,
        tokenizer,
        env["name"],
        dict(env.get("kwargs") or {}),
        history_window=int(env.get("history_window", 0)),
        show_observations=bool(env.get("show_observations", False)),
        max_turns=env.get("max_turns"),
        max_prompt_tokens=int(cfg["rollout"]["max_prompt_tokens"]),
        sample_mode=str(cfg["rollout"].get("sample_mode", "turn")),
        n_workers=int(cfg["rollout"].get("n_workers", 0)),
        step_timeout=float(cfg["rollout"].get("step_timeout", 60.0)),
    )


def build_loggers(cfg: DictConfig, stage: str, purge_step: int | None = None) -> list:
    """Instantiate the ``logger`` group with the stage as TensorBoard version (``bc``, ``rl``).

    ``purge_step`` (resumed runs): TensorBoard drops the steps >= it that an earlier event file
    of the same version holds, so a curve has no duplicated iteration after a resume.
    """
    loggers = []
    for _, lg_cfg in (cfg.get("logger") or {}).items():
        if lg_cfg is not None and "_target_" in lg_cfg:
            kwargs: dict[str, Any] = {}
            if "TensorBoardLogger" in lg_cfg["_target_"]:
                kwargs["version"] = stage
                if purge_step is not None:
                    kwargs["purge_step"] = int(purge_step)
            loggers.append(instantiate(lg_cfg, **kwargs))
    return loggers


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


def build_trainer(cfg: DictConfig, stage: str, callbacks: list, model=None, purge_step: int | None = None,
                  extra_callbacks: list | None = None, **overrides) -> L.Trainer:
    """A Trainer of ``cfg.trainer`` for ``stage``.

    The RL stage's callbacks are the ``callbacks`` config group, instantiated from their
    ``_target_`` (thread share, progress lines, checkpoints, collapse detector); the BC stage gets
    the thread share and the ``callbacks`` given. The order is: ``callbacks`` minus the weight sync,
    ``extra_callbacks`` (programmatic use, tests), the config's callbacks, then the weight sync (so
    it loads whatever the others left, e.g. after a rollback); Lightning moves checkpoint callbacks
    to the end.
    """
    extra = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None and "_target_" in c and stage == "rl"]
    head = ([] if stage == "rl" else [ThreadRebalance()]) + [c for c in callbacks if not isinstance(c, WeightSync)]
    tail = [c for c in callbacks if isinstance(c, WeightSync)]
    tcfg = container(cfg.trainer)
    strategy = build_strategy(tcfg, model)
    tcfg.pop("sharding", None)
    tcfg.pop("strategy", None)
    kwargs = dict(overrides)
    if strategy is not None:
        kwargs["strategy"] = strategy
    return instantiate(
        tcfg, logger=build_loggers(cfg, stage, purge_step), callbacks=head + list(extra_callbacks or []) + extra + tail, **kwargs
    )


def loss_horizon(c: dict[str, Any]) -> int:
    """H of ``seq-mean-token-sum-norm``: ``algo.loss.horizon``, else the generation budget of one
    sample (``rollout.max_new_tokens``; times ``env.max_turns`` for a whole-episode sample)."""
    if c["algo"]["loss"].get("horizon") is not None:
        return int(c["algo"]["loss"]["horizon"])
    budget = int(c["rollout"]["max_new_tokens"])
    if c["rollout"].get("sample_mode", "turn") == "trajectory":
        budget *= int(c["env"].get("max_turns") or 1)
    return budget


def reuse_rollout_log_probs(c: dict[str, Any]) -> bool:
    """Whether ``old_log_probs`` may be the rollout's own (``rl.old_log_probs``).

    ``auto`` reuses them where they are what a trainer pass would compute: the transformers
    engine (it generates with the policy module itself, or a copy synced after every update)
    in fp32 with fp32 training (neither ``trainer.precision`` nor FSDP2's
    ``trainer.sharding.mixed_precision`` computing in half precision), and no rollout
    correction (which measures exactly that gap).
    """
    mode = str(c["rl"].get("old_log_probs", "auto"))
    if mode != "auto":
        return mode == "rollout"
    precision = str(c["trainer"].get("precision", "32-true"))
    sharded_half = is_sharded(c["trainer"]) and bool((c["trainer"].get("sharding") or {}).get("mixed_precision"))
    return (
        c["rollout"]["engine"] == "hf"
        and str(c["model"].get("dtype", "float32")) in ("float32", "fp32")
        and precision in ("32", "32-true")
        and not sharded_half
        and not c["algo"]["rollout_correction"]["enabled"]
    )


def build_rl_module(cfg: DictConfig, model, tokenizer) -> AgenticRLModule:
    """The RL LightningModule; the frozen reference exists only when ``algo.kl.coef > 0``."""
    c = container(cfg)
    rl = c["rl"]
    algo = schema.replace(algo_config(c["algo"]), **{"loss.horizon": loss_horizon(c)})
    reference = copy.deepcopy(model) if algo.kl.coef > 0 else None
    return AgenticRLModule(
        model,
        reference,
        tokenizer,
        algo,
        instantiate(cfg.rl.optimizer),
        ppo_epochs=int(rl["ppo_epochs"]),
        mini_batches=int(rl["mini_batches"]),
        mini_batch_size=rl.get("mini_batch_size"),
        micro_token_budget=int(rl["micro_token_budget"]),
        grad_clip=float(rl["grad_clip"]),
        warmup_steps=int(rl["warmup_steps"]),
        temperature=float(c["rollout"]["temperature"]) or 1.0,
        reuse_rollout_log_probs=reuse_rollout_log_probs(c),
        sharding=c["trainer"].get("sharding"),
    )


def build_rollout_datamodule(c: dict[str, Any], loop: AgentLoop, module: AgenticRLModule) -> RolloutDataModule:
    """The online DataModule of the RL stage: rollout budgets, the filter (its settings bound) and
    its re-rollout schedule, validation."""
    rl, r = c["rl"], c["rollout"]
    dynamic = module.algo.filter
    return RolloutDataModule(
        loop,
        iterations=int(rl["iterations"]),
        groups_per_step=int(r["groups_per_step"]),
        group_size=int(r["group_size"]),
        sampling=sampling_params(r),
        val_sampling=sampling_params(r, validation=True),
        val_episodes=int(r["val_episodes"]),
        val_batch_size=int(r["val_batch_size"]),
        seed=int(c["seed"]),
        group_filter=filters.group_filter(dynamic),
        max_rollout_rounds=dynamic.max_rollout_rounds,
        filter_cold_start=dynamic.cold_start,
        fill_last_round=dynamic.fill_last_round,
        pad_id=int(module.pad_id or 0),
    )
