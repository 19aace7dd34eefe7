"""The behaviour-cloning stage (the paper's first stage): expert data, SFT, self-bootstrapping,
DAgger, the dataset file and the cloned policy; and the end of a BC-only run.

:func:`run_bc` is called by :func:`arl.run.pipeline.train`; its parts (expert collection, bootstrap,
DAgger, the dataset file) live in :mod:`arl.bc`, the SFT module and data in ``modules`` and
``datamodules``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from arl.agent.loop import AgentLoop
from arl.bc import bc_seeds, bootstrap, collect_expert, dagger, episodes_of, load_episodes, save_episodes
from arl.callbacks import EngineStart, IterationLog
from arl.datamodules.sft_datamodule import SFTDataModule
from arl.distributed.fsdp import (
    full_state_dict,
    gather_on_rank0,
    is_sharded,
    iter_rank0_tensors,
    mark_weights_from_rank0,
    meta_copy,
    weights_from_rank0,
)
from arl.models.loading import save_hf
from arl.modules.sft_module import BehaviourCloningModule
from arl.run.builders import build_trainer, sampling_params
from arl.run.evaluation import run_validation
from arl.run.settings import RunSettings
from arl.utils.logging import console, results_table


def _fit_bc_round(
    run: RunSettings, model, loop: AgentLoop, episodes: list, epochs: int, skeleton=None
) -> tuple[Any, int, dict[str, float]]:
    """One SFT fit of ``model`` on ``episodes`` (response tokens only, samples cut as ``loop`` cuts
    them); trains ``model`` in place. The rollout engine (``loop.engine``) is built in the trainer's
    ``setup``, before the SFT (a vLLM that cannot start stops the run before hours of SFT, not
    after), and sleeps while it trains (:class:`arl.callbacks.EngineStart`).

    Returns the gathered full weights when the trainer shards the model (the sharded ``model``
    object is not usable outside its strategy any more; with ``skeleton``, a meta copy of a model
    whose weights rank 0 alone holds, the policy gathered into it on rank 0 and None elsewhere),
    the number of training samples and the last held-out metrics (``bc/val_*``; empty without
    held-out episodes).
    """
    bc = run.bc
    dm = SFTDataModule(
        episodes, loop.tokenizer.pad_token_id, bc.batch_size, bc.val_fraction, run.seed, keep_failed=True,
        sample_mode=loop.sample_mode, val_token_budget=bc.val_token_budget, repeat_pattern=bc.repeat_turns.pattern,
        repeat_times=bc.repeat_turns.times,
    )
    if dm.repeated:
        console.print(f"behaviour cloning: {dm.repeated} turns match bc.repeat_turns.pattern, each trained "
                      f"{bc.repeat_turns.times} times an epoch ({len(dm.train_samples)} samples)")
    module = BehaviourCloningModule(
        model, instantiate(bc.optimizer), warmup_steps=bc.warmup_steps, total_steps=dm.steps_per_epoch * epochs,
        sharding=run.trainer.get("sharding"), logit_chunk_tokens=run.model.logit_chunk_tokens,
        micro_token_budget=bc.micro_token_budget,
    )
    # held-out metrics at each epoch's end, or every `val_every` batches of an epoch (Lightning counts
    # within the epoch, so the last batch is a check only when `val_every` divides the epoch)
    every = min(bc.val_every, dm.steps_per_epoch) if bc.val_every else None
    trainer = build_trainer(
        run, "bc", [IterationLog(), EngineStart(loop.engine)], model=model, max_epochs=epochs, enable_checkpointing=False,
        num_sanity_val_steps=0, enable_progress_bar=False, val_check_interval=every or 1.0,
        use_distributed_sampler=False,  # the DataModule splits every global batch across ranks itself
    )
    trainer.fit(module, datamodule=dm)
    if every and dm.val_samples and dm.steps_per_epoch % every:  # score the final policy too
        trainer.validate(module, datamodule=dm, verbose=False)
    if skeleton is not None:
        gathered = gather_on_rank0(module.policy, skeleton)
        module.policy.zero_grad(set_to_none=True)  # the last step's sharded gradients go with the module
    elif is_sharded(run.trainer):
        gathered = full_state_dict(module.policy, root=trainer.strategy.model)
    else:
        gathered = None
    held_out = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("bc/val_")}
    return gathered, len(dm.train_samples), held_out


def run_bc(run: RunSettings, model, engine_model, tokenizer, loop: AgentLoop, out_dir: Path) -> tuple[dict[str, Any], Any]:
    """Behaviour cloning (the paper's first stage): data, SFT, optional self-bootstrapping and DAgger.

    The data are expert episodes (or ``bc.dataset_path``); ``bc.epochs`` SFT epochs train on them
    (0: none, the model already is a cloned policy). With ``bc.bootstrap.enabled`` the cloned
    policy then samples fresh training tasks, the episodes that pass the return threshold join the
    data and a second SFT round trains on all of it. With ``bc.dagger.enabled`` each of
    ``bc.dagger.rounds`` rounds lets the policy play fresh tasks, has the expert label every state
    it reached, adds those turns and trains on all of the data again. The data are saved as
    ``<run>/bc_dataset.jsonl`` and the policy as ``<run>/bc_policy_hf`` (the RL start for
    ``model.init_from``). Returns the BC metrics and the model to continue with (a fresh copy when
    the trainer sharded the old one; under rank-0 loading rank 0's gathered copy, and on the other
    ranks its frame on the meta device).
    """
    stage = _BCStage(run, model, engine_model, tokenizer, loop, out_dir)
    stage.validate_untrained()
    items = stage.initial_data()
    if stage.bc.epochs > 0:
        stage.results["bc/samples"] = float(stage.fit(items, stage.bc.epochs))
    items = stage.bootstrap(items)
    items = stage.dagger(items)
    stage.finish(items)
    return stage.results, stage.model


class _BCStage:
    """The state one :func:`run_bc` carries through its rounds: the model being trained (a fresh
    copy after a sharded round), the data last written, the results so far."""
    def __init__(self, run: RunSettings, model, engine_model, tokenizer, loop: AgentLoop, out_dir: Path):
        self.run, self.bc, self.rollout, self.seed = run, run.bc, run.rollout, run.seed
        self.model, self.engine_model, self.tokenizer = model, engine_model, tokenizer
        self.loop, self.engine, self.out_dir = loop, loop.engine, out_dir
        self.results: dict[str, Any] = {}
        self.saved = None  # the items list last written to <run>/bc_dataset.jsonl

    def validate_untrained(self) -> None:

        if self.bc.val_untrained:
            success = run_validation(self.loop, self.rollout, seed=self.seed)["val/success_rate"]
            self.results["bc/val_success_untrained"] = success
            console.print(f"behaviour cloning: the untrained policy succeeds on {success:.3f} of validation")

    def keep(self, items, what: str) -> None:
        # the data are written before each SFT round: a run stopped in an hours-long round keeps
        # them, and `bc.dataset_path=<run>/bc_dataset.jsonl` goes on without collecting again

        if rank_zero_only.rank == 0:
            path = save_episodes(self.out_dir / "bc_dataset.jsonl", items, self.tokenizer, self.loop.sample_mode, self.loop.env_name)
            console.print(f"behaviour cloning: {len(items)} episodes ({what}) saved to {path}")
        self.saved = items

    def save_policy(self) -> None:
        if rank_zero_only.rank == 0:
            self.results["bc_policy_hf"] = str(save_hf(self.engine_model, self.tokenizer, self.out_dir / "bc_policy_hf"))

    def fit(self, items, epochs: int) -> int:
        """One SFT round on ``items``; the policy is saved and the engine synced after it."""
        t0 = time.perf_counter()
        from_rank0 = weights_from_rank0(self.model)  # rank 0 alone holds the weights (trainer.sharding.load)
        skeleton = meta_copy(self.model) if from_rank0 else None
        gathered, n_samples, held_out = _fit_bc_round(self.run, self.model, self.loop, episodes_of(items), epochs, skeleton)
        self.results.update(held_out)  # the last round's held-out loss and greedy agreement
        if from_rank0:  # rank 0 gathered the policy into a fresh frame; the other ranks keep the meta frame
            self.model = self.engine_model = mark_weights_from_rank0(gathered if gathered is not None else skeleton)
        elif gathered is not None:  # the BC trainer sharded `model`: continue from a fresh copy
            self.engine_model.load_state_dict(gathered)
            self.model = copy.deepcopy(self.engine_model)
        self.save_policy()  # before the engine sync: an engine that fails to wake loses no SFT
        if from_rank0:  # vLLM: rank 0's weights, broadcast one tensor at a time
            self.engine.load_weights(iter_rank0_tensors(self.model))
        else:
            self.engine.sync(self.engine_model)  # a no-op for the HF engine, which holds this very module
        console.print(f"behaviour cloning: {epochs} epoch(s) on {n_samples} samples in {time.perf_counter() - t0:.1f}s")
        return n_samples

    def initial_data(self) -> list:
        """``bc.dataset_path``'s episodes, or the expert's won episodes (written at once)."""
        t0 = time.perf_counter()
        if self.bc.dataset_path:
            items = load_episodes(self.bc.dataset_path, self.tokenizer, self.loop.sample_mode, self.loop.env_name)
            self.results["bc/dataset_episodes"] = float(len(items))
            console.print(f"behaviour cloning: {len(items)} episodes from {self.bc.dataset_path}")
        else:
            items, stats = collect_expert(self.loop, bc_seeds(self.seed, self.bc.episodes))
            self.results.update(stats)
            console.print(
                f"behaviour cloning: {int(stats['bc/expert_episodes'])} expert episodes "
                f"({len(items)} won) in {time.perf_counter() - t0:.1f}s"
            )
            if items:
                self.keep(items, "expert")
        if not items:
            raise RuntimeError("behaviour cloning has no episode to learn from (the expert won none)")
        return items

    def bootstrap(self, items: list) -> list:
        """``bc.bootstrap``: the cloned policy's passing episodes join the data, another SFT round."""
        boot = self.bc.bootstrap
        if not boot.enabled or self.bc.dataset_path:
            return items
        t0 = time.perf_counter()
        params = dataclasses.replace(sampling_params(self.rollout), temperature=boot.temperature)
        res = bootstrap(self.loop, bc_seeds(self.seed, boot.episodes, stream=1), params, boot.min_return,
                        self.rollout.val_batch_size)
        self.results.update({"bc/bootstrap_sampled": float(res.sampled), "bc/bootstrap_success": res.success,
                             "bc/bootstrap_kept": float(len(res.kept))})
        console.print(
            f"self-bootstrapping: {res.sampled} sampled episodes, {res.success:.3f} won, {len(res.kept)} kept "
            f"(return >= {boot.min_return}, every turn valid) in {time.perf_counter() - t0:.1f}s"
        )
        if res.kept:
            items = items + res.kept
            self.keep(items, "expert and self-bootstrapped")
            self.results["bc/samples"] = float(self.fit(items, boot.epochs))
        return items

    def dagger(self, items: list) -> list:
        """``bc.dagger``: each round the expert labels the states the policy reached, another SFT round."""
        dag = self.bc.dagger
        for k in range(dag.rounds if dag.enabled else 0):
            t0 = time.perf_counter()
            params = dataclasses.replace(sampling_params(self.rollout), temperature=dag.temperature)
            res = dagger(self.loop, bc_seeds(self.seed, dag.episodes, stream=2 + k), params, self.rollout.val_batch_size)
            self.results.update({"bc/dagger_success": res.success, "bc/dagger_turns": float(res.turns),
                                 "bc/dagger_agreement": res.agreement})
            console.print(
                f"DAgger round {k + 1}/{dag.rounds}: the policy won {res.success:.3f} of {res.sampled} episodes, "
                f"chose the expert's action on {res.agreement:.3f} of {res.turns} labelled turns "
                f"in {time.perf_counter() - t0:.1f}s"
            )
            items = items + res.labelled
            self.keep(items, f"with DAgger round {k + 1}")
            self.results["bc/samples"] = float(self.fit(items, dag.epochs))
        return items

    def finish(self, items: list) -> None:
        """The dataset's path (a given dataset is copied in) and the policy, when no round saved it."""
        self.results["bc/episodes"] = float(len(items))
        if rank_zero_only.rank == 0:
            path = self.out_dir / "bc_dataset.jsonl"
            if self.saved is not items:  # a given dataset is copied in; new data were written before their round
                path = save_episodes(path, items, self.tokenizer, self.loop.sample_mode, self.loop.env_name)
            self.results["bc_dataset"] = str(path)
        if "bc_policy_hf" not in self.results:  # no SFT round ran (bc.epochs=0): the policy as it came
            self.save_policy()


def finish_bc_only(run: RunSettings, results: dict[str, Any], loop: AgentLoop, out_dir: Path) -> dict[str, Any]:
    """``rl.enabled=false``: validate the cloned policy (its episodes, turn by turn, to
    ``<run>/val_episodes.jsonl`` as an eval run writes them), write ``bc_results.json``, summarise."""
    episodes_path = out_dir / "val_episodes.jsonl" if rank_zero_only.rank == 0 else None
    val = run_validation(loop, run.rollout, episodes_path, seed=run.seed)
    results["val_after_bc"] = val
    loop.close()
    if callable(getattr(loop.engine, "close", None)):
        loop.engine.close()
    metric = run.optimized_metric
    results["optimized_metric"] = val.get(metric) if metric else None
    if rank_zero_only.rank == 0:
        (out_dir / "bc_results.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
        rows = []
        if "bc/val_success_untrained" in results:
            rows.append(("val success, untrained", f"{results['bc/val_success_untrained']:.3f}"))
        rows.append(("val success after BC", f"{val.get('val/success_rate', float('nan')):.3f}"))
        rows.append(("val valid-action ratio", f"{val.get('val/valid_action_ratio', float('nan')):.3f}"))
        rows.append(("validation sampling", sampling_params(run.rollout, validation=True).describe()))
        rows.append(("episodes in the dataset", f"{int(results.get('bc/episodes', 0))}"))
        rows.append(("dataset", results.get("bc_dataset", "-")))
        rows.append(("policy (model.init_from)", results.get("bc_policy_hf", "-")))
        console.print(results_table("ARL behaviour cloning summary", rows))
    return results
