"""The training pipeline: behaviour cloning, then RL, then the final report.

``src/train.py`` calls :func:`train` with the composed Hydra config. This module builds the parts
from the config and wires them; the parts themselves live in their own packages.

Resuming (``ckpt_path=<file>`` or ``ckpt_path=last``) skips behaviour cloning, restores the RL
stage from the checkpoint and, by default (``rl.resume_in_place``), continues in the run folder
that wrote the checkpoint: same ``checkpoints/``, same ``tensorboard/rl`` version (the new event
file purges any step after the checkpoint's iteration, so the curves stay continuous), same
``policy_hf``. Under data parallelism every rank runs this module; rank 0 alone writes files.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict

from arl.agent.loop import AgentLoop
from arl.callbacks import IterationLog, ThreadRebalance, WeightSync
from arl.callbacks.weight_sync import sync_engine
from arl.datamodules.rollout_datamodule import RolloutDataModule
from arl.datamodules.sft_datamodule import SFTDataModule
from arl.models.loading import load_from_config, save_hf
from arl.modules.rl_module import AgenticRLModule
from arl.modules.sft_module import BehaviourCloningModule
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine
from arl.resume import checkpoint_iteration, resolve_ckpt_path
from arl.utils.config import validate_config
from arl.utils.fsdp import full_state_dict, is_sharded, strategy_kwargs, strategy_name
from arl.utils.logging import console, results_table

log = logging.getLogger(__name__)


def _container(cfg: Any) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


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
    """The rollout engine of ``rollout.engine``."""
    if rollout["engine"] == "hf":
        return HFEngine(model, tokenizer, max_batch_size=int(rollout["max_batch_size"]), device=rollout.get("device"))
    from arl.rollout.vllm_engine import VLLMEngine  # lazy: the vllm extra

    return VLLMEngine.from_config(rollout, model, tokenizer)


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
            devices = trainer_cfg.get("devices", 1)
            if devices in (-1, "auto"):
                import torch

                devices = max(torch.cuda.device_count(), 1)
            strategy["data_parallel_size"] = int(devices) * int(trainer_cfg.get("num_nodes", 1))
        strategy.setdefault("tensor_parallel_size", 1)
        if strategy.get("tensor_parallel_size") in (None, "auto"):
            strategy["tensor_parallel_size"] = 1
    return instantiate(strategy)


def build_trainer(cfg: DictConfig, stage: str, callbacks: list, model=None, purge_step: int | None = None,
                  extra_callbacks: list | None = None, **overrides) -> L.Trainer:
    """A Trainer of ``cfg.trainer`` for ``stage``; the RL stage also gets the ``callbacks`` group.

    The order of the callbacks is: ``callbacks`` minus the weight sync, ``extra_callbacks``, the
    config's callbacks, then the weight sync (so it loads whatever the others left, e.g. after a
    rollback); Lightning moves checkpoint callbacks to the end.
    """
    extra = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None and "_target_" in c and stage == "rl"]
    head = [ThreadRebalance()] + [c for c in callbacks if not isinstance(c, WeightSync)]
    tail = [c for c in callbacks if isinstance(c, WeightSync)]
    tcfg = _container(cfg.trainer)
    strategy = build_strategy(tcfg, model)
    tcfg.pop("sharding", None)
    tcfg.pop("strategy", None)
    kwargs = dict(overrides)
    if strategy is not None:
        kwargs["strategy"] = strategy
    return instantiate(
        tcfg, logger=build_loggers(cfg, stage, purge_step), callbacks=head + list(extra_callbacks or []) + extra + tail, **kwargs
    )


def _fit_bc_round(
    cfg: DictConfig, model, pad_id: int, episodes: list, sample_mode: str, epochs: int
) -> tuple[dict | None, int, dict[str, float]]:
    """One SFT fit of ``model`` on ``episodes`` (response tokens only); trains ``model`` in place.

    Returns the gathered full weights when the trainer shards the model (the sharded ``model``
    object is not usable outside its strategy any more), the number of training samples and the
    last held-out metrics (``bc/val_*``; empty without held-out episodes).
    """
    c = _container(cfg)
    bc = c["bc"]
    dm = SFTDataModule(
        episodes, pad_id, int(bc["batch_size"]),
        float(bc["val_fraction"]), int(c["seed"]), keep_failed=True, sample_mode=sample_mode,
    )
    module = BehaviourCloningModule(
        model, instantiate(cfg.bc.optimizer), warmup_steps=int(bc["warmup_steps"]), total_steps=dm.steps_per_epoch * epochs,
        sharding=c["trainer"].get("sharding"),
    )
    # held-out metrics at each epoch's end, or every `val_every` batches of an epoch (Lightning counts
    # within the epoch, so the last batch is a check only when `val_every` divides the epoch)
    every = min(int(bc["val_every"]), dm.steps_per_epoch) if bc.get("val_every") else None
    trainer = build_trainer(
        cfg, "bc", [IterationLog()], model=model, max_epochs=epochs, enable_checkpointing=False,
        num_sanity_val_steps=0, enable_progress_bar=False, val_check_interval=every or 1.0,
    )
    trainer.fit(module, datamodule=dm)
    if every and dm.val_samples and dm.steps_per_epoch % every:  # score the final policy too
        trainer.validate(module, datamodule=dm, verbose=False)
    gathered = full_state_dict(module.policy, root=trainer.strategy.model) if is_sharded(c["trainer"]) else None
    held_out = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("bc/val_")}
    return gathered, len(dm.train_samples), held_out


def run_bc(cfg: DictConfig, model, engine_model, tokenizer, loop: AgentLoop, out_dir: Path) -> tuple[dict[str, Any], Any]:
    """Behaviour cloning (the paper's first stage): data, SFT, optional self-bootstrapping and DAgger.

    The data are expert episodes (or ``bc.dataset_path``); ``bc.epochs`` SFT epochs train on them
    (0: none, the model already is a cloned policy). With ``bc.bootstrap.enabled`` the cloned
    policy then samples fresh training tasks, the episodes that pass the return threshold join the
    data and a second SFT round trains on all of it. With ``bc.dagger.enabled`` each of
    ``bc.dagger.rounds`` rounds lets the policy play fresh tasks, has the expert label every state
    it reached, adds those turns and trains on all of the data again. The data are saved as
    ``<run>/bc_dataset.jsonl`` and the policy as ``<run>/bc_policy_hf`` (the RL start for
    ``model.init_from``). Returns the BC metrics and the model to continue with (a fresh copy when
    the trainer sharded the old one).
    """
    from arl.bc import bc_seeds, bootstrap, collect_expert, dagger, episodes_of, load_episodes, save_episodes
    from arl.evaluation import run_validation

    c = _container(cfg)
    bc, seed = c["bc"], int(c["seed"])
    engine = loop.engine
    results: dict[str, Any] = {}
    if bc.get("val_untrained"):
        results["bc/val_success_untrained"] = run_validation(loop, c["rollout"], seed=seed)["val/success_rate"]
        console.print(f"behaviour cloning: the untrained policy succeeds on {results['bc/val_success_untrained']:.3f} of validation")

    def fit(items, epochs: int):
        nonlocal model
        t0 = time.perf_counter()
        gathered, n_samples, held_out = _fit_bc_round(
            cfg, model, tokenizer.pad_token_id, episodes_of(items), loop.sample_mode, epochs
        )
        results.update(held_out)  # the last round's held-out loss and greedy agreement
        if gathered is not None:  # the BC trainer sharded `model`: continue from a fresh copy
            engine_model.load_state_dict(gathered)
            model = copy.deepcopy(engine_model)
        engine.sync(engine_model)  # a no-op for the HF engine, which holds this very module
        console.print(f"behaviour cloning: {epochs} epoch(s) on {n_samples} samples in {time.perf_counter() - t0:.1f}s")
        return n_samples

    t0 = time.perf_counter()
    if bc.get("dataset_path"):
        items = load_episodes(bc["dataset_path"], tokenizer, loop.sample_mode, loop.env_name)
        results["bc/dataset_episodes"] = float(len(items))
        console.print(f"behaviour cloning: {len(items)} episodes from {bc['dataset_path']}")
    else:
        items, stats = collect_expert(loop, bc_seeds(seed, int(bc["episodes"])))
        results.update(stats)
        console.print(
            f"behaviour cloning: {int(stats['bc/expert_episodes'])} expert episodes "
            f"({len(items)} won) in {time.perf_counter() - t0:.1f}s"
        )
    if not items:
        raise RuntimeError("behaviour cloning has no episode to learn from (the expert won none)")
    if int(bc["epochs"]) > 0:
        results["bc/samples"] = float(fit(items, int(bc["epochs"])))

    boot = bc.get("bootstrap") or {}
    if boot.get("enabled") and not bc.get("dataset_path"):
        t0 = time.perf_counter()
        params = dataclasses.replace(sampling_params(c["rollout"]), temperature=float(boot["temperature"]))
        res = bootstrap(loop, bc_seeds(seed, int(boot["episodes"]), stream=1), params, float(boot["min_return"]),
                        int(c["rollout"]["val_batch_size"]))
        results.update({"bc/bootstrap_sampled": float(res.sampled), "bc/bootstrap_success": res.success,
                        "bc/bootstrap_kept": float(len(res.kept))})
        console.print(
            f"self-bootstrapping: {res.sampled} sampled episodes, {res.success:.3f} won, {len(res.kept)} kept "
            f"(return >= {boot['min_return']}, every turn valid) in {time.perf_counter() - t0:.1f}s"
        )
        if res.kept:
            items = items + res.kept
            results["bc/samples"] = float(fit(items, int(boot["epochs"])))

    dag = bc.get("dagger") or {}
    for k in range(int(dag["rounds"]) if dag.get("enabled") else 0):
        t0 = time.perf_counter()
        params = dataclasses.replace(sampling_params(c["rollout"]), temperature=float(dag["temperature"]))
        res = dagger(loop, bc_seeds(seed, int(dag["episodes"]), stream=2 + k), params, int(c["rollout"]["val_batch_size"]))
        results.update({"bc/dagger_success": res.success, "bc/dagger_turns": float(res.turns),
                        "bc/dagger_agreement": res.agreement})
        console.print(
            f"DAgger round {k + 1}/{dag['rounds']}: the policy won {res.success:.3f} of {res.sampled} episodes, "
            f"chose the expert's action on {res.agreement:.3f} of {res.turns} labelled turns "
            f"in {time.perf_counter() - t0:.1f}s"
        )
        items = items + res.labelled
        results["bc/samples"] = float(fit(items, int(dag["epochs"])))
    results["bc/episodes"] = float(len(items))
    if rank_zero_only.rank == 0:
        results["bc_dataset"] = str(save_episodes(out_dir / "bc_dataset.jsonl", items, tokenizer, loop.sample_mode, loop.env_name))
        results["bc_policy_hf"] = str(save_hf(engine_model, tokenizer, out_dir / "bc_policy_hf"))
    return results, model


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
    in fp32 with fp32 training, and no rollout correction (which measures exactly that gap).
    """
    mode = str(c["rl"].get("old_log_probs", "auto"))
    if mode != "auto":
        return mode == "rollout"
    precision = str(c["trainer"].get("precision", "32-true"))
    return (
        c["rollout"]["engine"] == "hf"
        and str(c["model"].get("dtype", "float32")) in ("float32", "fp32")
        and precision in ("32", "32-true")
        and not c["algo"]["rollout_correction"]["enabled"]
    )


def build_rl_module(cfg: DictConfig, model, tokenizer) -> AgenticRLModule:
    """The RL LightningModule; the frozen reference exists only when ``algo.kl.coef > 0``."""
    c = _container(cfg)
    algo, rl = c["algo"], c["rl"]
    reference = copy.deepcopy(model) if float(algo["kl"]["coef"]) > 0 else None
    algo = {**algo, "loss": {**algo["loss"], "horizon": loss_horizon(c)}}
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


def train(cfg: DictConfig, callbacks: list | None = None) -> dict[str, Any]:
    """Run the whole job; returns the final metrics (``optimized_metric`` among them).

    Args:
        cfg: the composed config (``train.yaml``).
        callbacks: extra Lightning callbacks for the RL stage (programmatic use, tests); they run
            before the config's callbacks.
    """
    validate_config(cfg)
    c = _container(cfg)
    ckpt = resolve_ckpt_path(c)
    out_dir = Path(c["paths"]["output_dir"])
    resume_it = checkpoint_iteration(ckpt) if ckpt is not None else None
    if ckpt is not None and c["rl"].get("resume_in_place", True) and ckpt.parent.name == "checkpoints":
        run_dir = ckpt.parent.parent
        if run_dir.resolve() != out_dir.resolve():
            if rank_zero_only.rank == 0:
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / "RESUMED_INTO.txt").write_text(f"{run_dir}\n(resumed from {ckpt} at iteration {resume_it})\n")
            with open_dict(cfg):
                cfg.paths.output_dir = str(run_dir)
            c = _container(cfg)
            out_dir = run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(int(c["seed"]), workers=True)

    _quiet_lightning_logging()
    model, tokenizer, source = load_from_config(c["model"])
    model.train()
    console.print(f"policy: {source} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters)")
    sharded = is_sharded(c["trainer"])
    if sharded and "layer_cls" in (c["trainer"].get("sharding") or {}):
        from arl.utils.fsdp import resolve_layer_classes

        resolve_layer_classes(c["trainer"]["sharding"]["layer_cls"], model)  # fail now, not after BC
    # under sharding the engine keeps its own unsharded copy (synced by gathering after updates)
    engine_model = copy.deepcopy(model) if sharded else model
    engine = build_engine(c["rollout"], engine_model, tokenizer)
    loop = build_agent_loop(c, engine, tokenizer)
    results: dict[str, Any] = {"run_dir": str(out_dir)}
    if ckpt is not None:
        results["resumed_from"] = str(ckpt)
        console.print(f"resuming from {ckpt} (iteration {resume_it}); writing into {out_dir}")

    if c["bc"]["enabled"] and not c["model"].get("init_from") and ckpt is None:
        bc_results, model = run_bc(cfg, model, engine_model, tokenizer, loop, out_dir)
        results.update(bc_results)
    if not c["rl"].get("enabled", True):  # the BC stage alone (experiment=bc_<env>)
        return _finish_bc_only(c, results, loop, engine, out_dir)

    module = build_rl_module(cfg, model, tokenizer)
    algo, rl, r = c["algo"], c["rl"], c["rollout"]
    dm = RolloutDataModule(
        loop,
        iterations=int(rl["iterations"]),
        groups_per_step=int(r["groups_per_step"]),
        group_size=int(r["group_size"]),
        sampling=sampling_params(r),
        val_sampling=sampling_params(r, validation=True),
        val_episodes=int(r["val_episodes"]),
        val_batch_size=int(r["val_batch_size"]),
        seed=int(c["seed"]),
        max_rollout_rounds=int(algo["filter"]["max_rollout_rounds"]),
        group_filter=None if algo["filter"]["name"] == "none" else module.group_filter,
        filter_cold_start=int(algo["filter"].get("cold_start", 0)),
        fill_last_round=bool(algo["filter"].get("fill_last_round", True)),
    )
    trainer = build_trainer(
        cfg, "rl", [IterationLog(), WeightSync(engine)], model=model,
        purge_step=None if resume_it is None else resume_it + 1, extra_callbacks=callbacks,
        max_epochs=1, val_check_interval=int(rl["val_every"]), check_val_every_n_epoch=None,
        num_sanity_val_steps=0, enable_progress_bar=False,
        inference_mode=False,  # metric states persist across validate() and fit()
    )
    if ckpt is None:
        trainer.validate(module, datamodule=dm, verbose=False)
        results["val_before_rl"] = dict(module.last_val)
    trainer.fit(module, datamodule=dm, ckpt_path=str(ckpt) if ckpt is not None else None)
    if getattr(module, "last_val_iteration", None) != module.iteration or not getattr(module, "last_val", None):
        trainer.validate(module, datamodule=dm, verbose=False)
    results["val_after_rl"] = dict(module.last_val)
    results["val_sampling"] = sampling_params(r, validation=True).describe()
    results["iterations_done"] = int(module.iteration)
    if engine_model is not model:  # sharded: the final weights, gathered (every rank takes part)
        sync_engine(engine, trainer, module)
        if getattr(engine, "model", None) is not engine_model:
            engine_model.load_state_dict(full_state_dict(module.policy, root=trainer.strategy.model))
    hf_dir = out_dir / "policy_hf"
    if trainer.is_global_zero:
        hf_dir = save_hf(engine_model, tokenizer, hf_dir)
    trainer.strategy.barrier("arl_export")
    results["policy_hf"] = str(hf_dir)
    loop.close()
    if callable(getattr(engine, "close", None)):
        engine.close()
    if trainer.is_global_zero:
        _print_summary(results, out_dir)
    metric = c.get("optimized_metric")
    results["optimized_metric"] = results["val_after_rl"].get(metric) if metric else None
    return results


def _finish_bc_only(c: dict[str, Any], results: dict[str, Any], loop: AgentLoop, engine, out_dir: Path) -> dict[str, Any]:
    """``rl.enabled=false``: validate the cloned policy, write ``bc_results.json``, summarise."""
    import json

    from arl.evaluation import run_validation

    val = run_validation(loop, c["rollout"], seed=int(c["seed"]))
    results["val_after_bc"] = val
    loop.close()
    if callable(getattr(engine, "close", None)):
        engine.close()
    metric = c.get("optimized_metric")
    results["optimized_metric"] = val.get(metric) if metric else None
    if rank_zero_only.rank == 0:
        (out_dir / "bc_results.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
        rows = []
        if "bc/val_success_untrained" in results:
            rows.append(("val success, untrained", f"{results['bc/val_success_untrained']:.3f}"))
        rows.append(("val success after BC", f"{val.get('val/success_rate', float('nan')):.3f}"))
        rows.append(("val valid-action ratio", f"{val.get('val/valid_action_ratio', float('nan')):.3f}"))
        rows.append(("validation sampling", sampling_params(c["rollout"], validation=True).describe()))
        rows.append(("episodes in the dataset", f"{int(results.get('bc/episodes', 0))}"))
        rows.append(("dataset", results.get("bc_dataset", "-")))
        rows.append(("policy (model.init_from)", results.get("bc_policy_hf", "-")))
        console.print(results_table("ARL behaviour cloning summary", rows))
    return results


def _quiet_lightning_logging() -> None:
    """Let Lightning's messages go through the root (Hydra) handlers only, not twice."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).handlers.clear()
    # the rollout DataModule restores its own seed stream and RNG states on resume (its
    # state_dict), which Lightning cannot see from the DataLoader
    warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before the epoch ended.*")
    warnings.filterwarnings("ignore", message=".*IterableDataset. has .__len__. defined.*")


def _print_summary(results: dict[str, Any], out_dir: Path) -> None:
    before = results.get("val_before_rl", {})
    after = results["val_after_rl"]
    rows = []
    if before:
        rows.append(("val success after BC", f"{before.get('val/success_rate', float('nan')):.3f}"))
    rows.append(("val success after RL", f"{after.get('val/success_rate', float('nan')):.3f}"))
    rows.append(("val valid-action ratio", f"{after.get('val/valid_action_ratio', float('nan')):.3f}"))
    rows.append(("validation sampling", results.get("val_sampling", "-")))
    rows.append(("run folder", str(out_dir)))
    rows.append(("final policy (HF)", results["policy_hf"]))
    rows.append(("TensorBoard", f"tensorboard --logdir {out_dir / 'tensorboard'}"))
    console.print(results_table("ARL run summary", rows))
