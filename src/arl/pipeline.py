"""The training pipeline: behaviour cloning, then RL, then the final report.

``src/train.py`` calls :func:`train` with the composed Hydra config. This module builds the parts
from the config and wires them; the parts themselves live in their own packages.
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from arl.agent.experts import expert_episodes
from arl.agent.loop import AgentLoop
from arl.callbacks import IterationLog, WeightSync
from arl.datamodules.rollout_datamodule import TRAIN_SEED_SPACE, RolloutDataModule
from arl.datamodules.sft_datamodule import SFTDataModule
from arl.models.loading import load_from_config, save_hf
from arl.modules.rl_module import AgenticRLModule
from arl.modules.sft_module import BehaviourCloningModule
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine
from arl.utils.config import validate_config
from arl.utils.logging import console, results_table

log = logging.getLogger(__name__)


def _container(cfg: Any) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


def sampling_params(rollout: dict[str, Any], validation: bool = False) -> SamplingParams:
    """Sampling parameters of the ``rollout`` config (greedy when the temperature is 0)."""
    return SamplingParams(
        temperature=float(rollout["val_temperature"] if validation else rollout["temperature"]),
        top_p=float(rollout["top_p"]),
        top_k=int(rollout["top_k"]),
        max_new_tokens=int(rollout["max_new_tokens"]),
        stop=tuple(rollout.get("stop", ["</action>"])),
    )


def build_engine(rollout: dict[str, Any], model, tokenizer):
    """The rollout engine of ``rollout.engine``."""
    if rollout["engine"] == "hf":
        return HFEngine(model, tokenizer, max_batch_size=int(rollout["max_batch_size"]))
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


def build_loggers(cfg: DictConfig, stage: str) -> list:
    """Instantiate the ``logger`` group with the stage as TensorBoard version (``bc``, ``rl``)."""
    loggers = []
    for _, lg_cfg in (cfg.get("logger") or {}).items():
        if lg_cfg is not None and "_target_" in lg_cfg:
            kwargs = {"version": stage} if "TensorBoardLogger" in lg_cfg["_target_"] else {}
            loggers.append(instantiate(lg_cfg, **kwargs))
    return loggers


def build_trainer(cfg: DictConfig, stage: str, callbacks: list, **overrides) -> L.Trainer:
    extra = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None and "_target_" in c and stage == "rl"]
    return instantiate(cfg.trainer, logger=build_loggers(cfg, stage), callbacks=callbacks + extra, **overrides)


def bc_seeds(seed: int, n: int) -> list[int]:
    """Task seeds for expert data: training-space seeds from their own stream."""
    rng = np.random.default_rng([int(seed), 2**31 - 1])
    return [int(s) for s in rng.integers(0, TRAIN_SEED_SPACE, size=n)]


def run_bc(cfg: DictConfig, model, tokenizer, loop: AgentLoop) -> dict[str, float]:
    """Behaviour cloning on expert episodes; trains ``model`` in place."""
    c = _container(cfg)
    bc = c["bc"]
    t0 = time.perf_counter()
    episodes = expert_episodes(loop, bc_seeds(c["seed"], int(bc["episodes"])))
    won = sum(e.won for e in episodes)
    console.print(f"behaviour cloning: {len(episodes)} expert episodes ({won} won) in {time.perf_counter() - t0:.1f}s")
    dm = SFTDataModule(
        episodes, tokenizer.pad_token_id, int(bc["batch_size"]), float(bc["val_fraction"]), int(c["seed"]),
        sample_mode=loop.sample_mode,
    )
    total = dm.steps_per_epoch * int(bc["epochs"])
    module = BehaviourCloningModule(
        model, instantiate(cfg.bc.optimizer), warmup_steps=int(bc["warmup_steps"]), total_steps=total
    )
    trainer = build_trainer(
        cfg, "bc", [IterationLog()], max_epochs=int(bc["epochs"]), enable_checkpointing=False,
        num_sanity_val_steps=0, enable_progress_bar=False,
    )
    trainer.fit(module, datamodule=dm)
    return {"bc/expert_success": won / max(len(episodes), 1), "bc/samples": float(len(dm.train_samples))}


def train(cfg: DictConfig) -> dict[str, Any]:
    """Run the whole job; returns the final metrics (``optimized_metric`` among them)."""
    validate_config(cfg)
    c = _container(cfg)
    out_dir = Path(c["paths"]["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(int(c["seed"]), workers=True)

    _quiet_lightning_logging()
    model, tokenizer, source = load_from_config(c["model"])
    model.train()
    console.print(f"policy: {source} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters)")
    engine = build_engine(c["rollout"], model, tokenizer)
    loop = build_agent_loop(c, engine, tokenizer)
    results: dict[str, Any] = {"run_dir": str(out_dir)}

    if c["bc"]["enabled"] and not c["model"].get("init_from") and not c.get("ckpt_path"):
        results.update(run_bc(cfg, model, tokenizer, loop))
        save_hf(model, tokenizer, out_dir / "bc_policy_hf")
        engine.sync(model)

    algo = c["algo"]
    reference = copy.deepcopy(model) if algo["kl"]["coef"] > 0 else None
    rl = c["rl"]
    module = AgenticRLModule(
        model,
        reference,
        tokenizer,
        algo,
        instantiate(cfg.rl.optimizer),
        ppo_epochs=int(rl["ppo_epochs"]),
        mini_batches=int(rl["mini_batches"]),
        micro_token_budget=int(rl["micro_token_budget"]),
        grad_clip=float(rl["grad_clip"]),
        warmup_steps=int(rl["warmup_steps"]),
        temperature=float(c["rollout"]["temperature"]) or 1.0,
    )
    r = c["rollout"]
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
    )
    trainer = build_trainer(
        cfg, "rl", [IterationLog(), WeightSync(engine)],
        max_epochs=1, val_check_interval=int(rl["val_every"]), check_val_every_n_epoch=None,
        num_sanity_val_steps=0, enable_progress_bar=False,
        inference_mode=False,  # metric states persist across validate() and fit()
    )
    if not c.get("ckpt_path"):
        trainer.validate(module, datamodule=dm, verbose=False)
        results["val_before_rl"] = dict(module.last_val)
    trainer.fit(module, datamodule=dm, ckpt_path=c.get("ckpt_path"))
    if module.iteration % int(rl["val_every"]) != 0 or not getattr(module, "last_val", None):
        trainer.validate(module, datamodule=dm, verbose=False)
    results["val_after_rl"] = dict(module.last_val)
    hf_dir = save_hf(model, tokenizer, out_dir / "policy_hf")
    results["policy_hf"] = str(hf_dir)
    loop.close()
    _print_summary(results, out_dir)
    metric = c.get("optimized_metric")
    results["optimized_metric"] = results["val_after_rl"].get(metric) if metric else None
    return results


def _quiet_lightning_logging() -> None:
    """Let Lightning's messages go through the root (Hydra) handlers only, not twice."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).handlers.clear()


def _print_summary(results: dict[str, Any], out_dir: Path) -> None:
    before = results.get("val_before_rl", {})
    after = results["val_after_rl"]
    rows = []
    if before:
        rows.append(("val success after BC", f"{before.get('val/success_rate', float('nan')):.3f}"))
    rows.append(("val success after RL", f"{after.get('val/success_rate', float('nan')):.3f}"))
    rows.append(("val valid-action ratio", f"{after.get('val/valid_action_ratio', float('nan')):.3f}"))
    rows.append(("run folder", str(out_dir)))
    rows.append(("final policy (HF)", results["policy_hf"]))
    rows.append(("TensorBoard", f"tensorboard --logdir {out_dir / 'tensorboard'}"))
    console.print(results_table("ARL run summary", rows))
