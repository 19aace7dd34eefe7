"""The training pipeline: behaviour cloning, then RL, then the final report.

``src/train.py`` calls :func:`train` with the composed Hydra config. This module wires the stages:
the parts come from :mod:`arl.run.builders`, behaviour cloning is :mod:`arl.run.bc_stage`.

Resuming (``ckpt_path=<file>`` or ``ckpt_path=last``) skips behaviour cloning, restores the RL
stage from the checkpoint and, by default (``rl.resume_in_place``), continues in the run folder
that wrote the checkpoint: same ``checkpoints/``, same ``tensorboard/rl`` version (the new event
file purges any step after the checkpoint's iteration, so the curves stay continuous), same
``policy_hf``. Under data parallelism every rank runs this module; rank 0 alone writes files.
"""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig

from arl.callbacks import ValidationEpisodes, WeightPush, WeightSync
from arl.models.loading import save_hf
from arl.models.lora import fold_adapters, is_peft_model
from arl.run import start_validation
from arl.run.async_rollout import AsyncRollouts
from arl.run.bc_stage import finish_bc_only, run_bc
from arl.run.builders import (
    build_agent_loop,
    build_engine,
    build_rl_module,
    build_rollout_datamodule,
    build_trainer,
    sampling_params,
)
from arl.run.checks import validate_config
from arl.run.loggers import end_stage
from arl.run.resume import RESULTS_FILE, checkpoint_iteration, finished_results, resolve_ckpt_path
from arl.run.settings import RunSettings
from arl.run.weights import PolicyWeights
from arl.utils.episode_files import episodes_file
from arl.utils.logging import console, results_table

log = logging.getLogger(__name__)


@dataclass
class Parts:
    """What a run trains and plays with: the policy and its tokenizer, the rollout engine and the
    agent loop around it. ``engine_model`` is the module the engine generates from: the policy
    itself, or (sharded, every rank loading) an unsharded copy that gathers refresh after each
    update. ``weights``: where the policy's weights live over the ranks (:class:`PolicyWeights`)."""
    model: Any
    tokenizer: Any
    engine_model: Any
    engine: Any
    loop: Any
    weights: PolicyWeights


def train(run: RunSettings | DictConfig, callbacks: list | None = None) -> dict[str, Any]:
    """Run the whole job; returns the final metrics (``optimized_metric`` among them).

    Args:
        run: the run's settings (``src/train.py`` makes them once, :func:`arl.run.checks.validate_config`),
            or, in programmatic use, the composed config (``train.yaml``), checked and typed here.
        callbacks: extra Lightning callbacks for the RL stage (programmatic use, tests); they run
            before the config's callbacks.
    """
    if not isinstance(run, RunSettings):
        run = validate_config(run)
    done = finished_results(run.ckpt_path, run.paths.output_dir, run.rl.iterations)
    if done is not None:
        console.print(
            f"{run.paths.output_dir}: finished earlier ({done['iterations_done']} iterations, {RESULTS_FILE}); "
            "nothing to run"
        )
        return done
    ckpt = resolve_ckpt_path(run.ckpt_path, run.paths.log_dir, run.task_name, run.paths.output_dir)
    resume_it = checkpoint_iteration(ckpt) if ckpt is not None else None
    run, out_dir = _run_folder(run, ckpt, resume_it)
    L.seed_everything(run.seed, workers=True)
    _quiet_lightning_logging()
    parts = _load_parts(run)
    results: dict[str, Any] = {"run_dir": str(out_dir)}
    if ckpt is not None:
        results["resumed_from"] = str(ckpt)
        console.print(f"resuming from {ckpt} (iteration {resume_it}); writing into {out_dir}")

    if run.bc.enabled and not run.model.init_from and ckpt is None:
        bc_results, parts = _bc_stage(run, parts, out_dir)
        results.update(bc_results)
    if not run.rl.enabled:  # the BC stage alone (experiment=bc_<env>)
        return finish_bc_only(run, results, parts.loop, out_dir)

    parts.weights.before_rl(parts.model)  # the export's frame (rank-0 loading), before the RL trainer shards it
    rl_results, module, trainer = _rl_stage(run, parts, ckpt, resume_it, callbacks)
    results.update(rl_results)
    results["policy_hf"] = _export_policy(parts, module, trainer, out_dir)
    end_stage()
    parts.loop.close()
    if callable(getattr(parts.engine, "close", None)):
        parts.engine.close()
    metric = run.optimized_metric
    results["optimized_metric"] = results["val_after_rl"].get(metric) if metric else None
    if trainer.is_global_zero:
        _print_summary(results, out_dir)
        _write_record(results, out_dir)
    return results


def _run_folder(run: RunSettings, ckpt: Path | None, resume_it: int | None) -> tuple[RunSettings, Path]:
    """The run's settings and folder: a resume in place (``rl.resume_in_place``) writes into the
    folder that wrote the checkpoint (the settings relocated there, :meth:`RunSettings.relocated`, and
    the folder Hydra made gets a ``RESUMED_INTO.txt``); a finished run's old record is removed (it
    trains on, so the record no longer holds)."""
    out_dir = Path(run.paths.output_dir)
    if ckpt is not None and run.rl.resume_in_place and ckpt.parent.name == "checkpoints":
        run_dir = ckpt.parent.parent
        if run_dir.resolve() != out_dir.resolve():
            if rank_zero_only.rank == 0:
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / "RESUMED_INTO.txt").write_text(
                    f"{run_dir}\n(resumed from {ckpt} at iteration {resume_it})\n"
                )
            run = run.relocated(str(run_dir))
            out_dir = run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    if rank_zero_only.rank == 0:  # a finished run trained on (more iterations): its old record no longer holds
        (out_dir / RESULTS_FILE).unlink(missing_ok=True)
    return run, out_dir


def _load_parts(run: RunSettings) -> Parts:
    """The policy, placed over the ranks as :class:`PolicyWeights` says, and the rollout engine and
    agent loop around it."""
    weights = PolicyWeights.of(run)
    model, tokenizer, source = weights.load(run)
    model.train()
    where = " (rank 0 loads it; the other ranks receive their shards)" if weights.from_rank0 else ""
    console.print(f"policy: {source} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters){where}")
    engine_model = weights.engine_model(model)
    engine = build_engine(run.rollout, engine_model, tokenizer)
    loop = build_agent_loop(run.env, run.rollout, engine, tokenizer)
    return Parts(model, tokenizer, engine_model, engine, loop, weights)


def _bc_stage(run: RunSettings, parts: Parts, out_dir: Path) -> tuple[dict[str, Any], Parts]:
    """Behaviour cloning (:func:`arl.run.bc_stage.run_bc`); returns its results and the parts RL
    starts from. When RL follows, a LoRA policy's BC adapters are folded into its base, which
    becomes the RL reference (the policy with fresh adapters off) and keeps the BC policy."""
    bc_results, model = run_bc(run, parts.model, parts.engine_model, parts.tokenizer, parts.loop, out_dir)
    engine_model = parts.weights.after_bc(model, parts.engine_model)
    end_stage()  # the BC stage's tracker runs close
    if run.rl.enabled and is_peft_model(model):
        model = parts.weights.replaced(fold_adapters(model, run.model.lora))
    return bc_results, Parts(model, parts.tokenizer, engine_model, parts.engine, parts.loop, parts.weights)


def _rl_stage(run: RunSettings, parts: Parts, ckpt: Path | None, resume_it: int | None, callbacks: list | None):
    """The RL stage: validate the start (a fresh run), fit (from ``ckpt`` on a resume), validate the
    end unless the last iteration did. Returns (its results, module, trainer)."""
    module = build_rl_module(run, parts.model, parts.tokenizer)
    dm = build_rollout_datamodule(run, parts.loop, module.pad_id or 0)
    # asynchronous: the learner's own engine only validates (the rollout process plays on its own), so it is
    # loaded before each validation rather than after every update
    syncs: list = [WeightSync(parts.engine, each_update=run.rl.max_staleness is None)]
    if run.rl.max_staleness is not None:  # asynchronous: the training batches come from a rollout process
        rollouts = AsyncRollouts(run, parts.model, parts.tokenizer, module.pad_id or 0)
        dm.use_source(rollouts)
        syncs.append(WeightPush(rollouts, dm))
    trainer = build_trainer(
        run,
        "rl",
        syncs,
        model=parts.model,
        purge_step=None if resume_it is None else resume_it + 1,
        extra_callbacks=callbacks,
        max_epochs=1,
        val_check_interval=run.rl.val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        inference_mode=False,  # metric states persist across validate() and fit()
    )
    results: dict[str, Any] = {}
    if ckpt is None:
        results["start_validation"] = _validate_start(run, parts.model, module, trainer, dm)
        results["val_before_rl"] = dict(module.last_val)
    trainer.fit(module, datamodule=dm, ckpt_path=str(ckpt) if ckpt is not None else None)
    if module.last_val_iteration != module.iteration or not module.last_val:
        trainer.validate(module, datamodule=dm, verbose=False)
    results["val_after_rl"] = dict(module.last_val)
    results["val_sampling"] = sampling_params(run.rollout, validation=True).describe()
    results["iterations_done"] = int(module.iteration)
    return results, module, trainer


def _validate_start(run: RunSettings, model, module, trainer, dm) -> str:
    """Validate the start (iteration 0): played here, or read back from the sweep's shared start
    validation (``rl.start_validation_cache``, :mod:`arl.run.start_validation`) when a run with the
    same start, seed and validation setup stored it. Returns where it came from, for the record."""
    cache = run.rl.start_validation_cache
    if not cache:
        trainer.validate(module, datamodule=dm, verbose=False)
        return "played"
    rng_before = start_validation.rng_digest(start_validation.rng_states())
    key = start_validation.start_key(run.config, start_validation.weights_digest(model), rng=rng_before)
    episodes_cb = next((cb for cb in trainer.callbacks if isinstance(cb, ValidationEpisodes)), None)
    stored = start_validation.load(cache, key)
    if stored is None:
        trainer.validate(module, datamodule=dm, verbose=False)
        episodes = episodes_file(episodes_cb.dirpath, 0) if episodes_cb is not None else None
        played = start_validation.StartValidation(
            module.last_val, module.val_protocol, written_by=run.paths.output_dir,
            episodes=None if episodes is None else str(episodes), rng_after=start_validation.rng_states(),
        )
        entry = start_validation.save(cache, key, played)
        console.print(f"start validation played and stored for the other runs of this start: {entry}")
        return f"played, stored as {entry}"
    module.adopt_validation(stored.values, stored.protocol, trainer.loggers)
    if stored.rng_after is not None:  # where the playing run's random stream stood after it
        start_validation.set_rng_states(stored.rng_after)
    if episodes_cb is not None and stored.episodes:
        rows = [json.loads(line) for line in Path(stored.episodes).read_text().splitlines() if line.strip()]
        episodes_cb.write(trainer, rows, 0)
    console.print(f"start validation read back from {stored.entry} (played by {stored.written_by})")
    return f"read back from {stored.entry} (played by {stored.written_by})"


def _export_policy(parts: Parts, module, trainer, out_dir: Path) -> str:
    """Save the final policy as a HF folder (``policy_hf``, rank 0), its weights brought together
    as the placement says (:meth:`PolicyWeights.final`, every rank takes part). Returns its path."""
    final = parts.weights.final(module, trainer, parts.engine, parts.engine_model, parts.model)
    hf_dir = out_dir / "policy_hf"
    if trainer.is_global_zero:
        hf_dir = save_hf(final, parts.tokenizer, hf_dir)
    trainer.strategy.barrier("arl_export")
    return str(hf_dir)


def _write_record(results: dict[str, Any], out_dir: Path) -> None:
    """The run's last act: its record (``RESULTS_FILE``), what lets ``ckpt_path=resume`` recognise it
    as finished without its checkpoint; written whole or not at all (a torn record would stop a resume)."""
    record = out_dir / f"{RESULTS_FILE}.tmp"
    record.write_text(json.dumps(results, indent=2, default=float) + "\n")
    os.replace(record, out_dir / RESULTS_FILE)


def _quiet_lightning_logging() -> None:
    """Let Lightning's messages go through the root (Hydra) handlers only, not twice."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).handlers.clear()
    # the rollout DataModule restores its own seed stream and RNG states on resume (its
    # state_dict), which Lightning cannot see from the DataLoader
    warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before the epoch ended.*")
    warnings.filterwarnings("ignore", message=".*IterableDataset. has .__len__. defined.*")
    # the frozen reference policy's modules stay in eval mode on purpose (no dropout in the KL's reference):
    # docs/design.md says so once, rather than Lightning at every start
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")


def _print_summary(results: dict[str, Any], out_dir: Path) -> None:
    before = results.get("val_before_rl", {})
    after = results["val_after_rl"]
    rows = []
    if before:
        rows.append(("val success after BC", f"{before.get('val/success_rate', float('nan')):.3f}"))
    rows.append(("val success after RL", f"{after.get('val/success_rate', float('nan')):.3f}"))
    valid = after.get("val/valid_action_ratio", float("nan"))
    rows.append(("val valid-action ratio", f"{valid:.3f}" if math.isfinite(valid) else "- (no turn was played)"))
    failed = int(after.get("val/env_errors", 0.0))
    if failed:  # counted as losses in the success rate; the run's episode files say what went wrong
        where = f"{failed} (env errors, counted as losses: see {out_dir / 'val_episodes'} and the log)"
        rows.append(("failed validation episodes", where))
    rows.append(("validation sampling", results.get("val_sampling", "-")))
    rows.append(("run folder", str(out_dir)))
    rows.append(("final policy (HF)", results["policy_hf"]))
    rows.append(("TensorBoard", f"tensorboard --logdir {out_dir / 'tensorboard'}"))
    console.print(results_table("ARL run summary", rows))
