"""Helpers of the training-at-scale tests (importable as ``scale_helpers``; subprocesses get
``tests/`` and ``src/`` on ``PYTHONPATH``).

Run as a script it performs one RL update on fixed episodes under a 2-process Lightning strategy
and saves the resulting gradients and weights (see :func:`main`)::

    python tests/scale_helpers.py --episodes eps.pt --out result.pt --strategy ddp --splits even last
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from lightning import Callback, LightningDataModule
from torch.utils.data import DataLoader, IterableDataset

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(HERE), str(ROOT / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

# the update tests: on-policy, one optimiser step, the SAMPO objective (gspo + gigpo, KL in loss).
# Plain SGD (lr 1): the weights after the step differ exactly as the gradients do, whereas Adam's
# first step g / (|g| + eps) amplifies float noise on gradients near eps (1e-8).
UPDATE_OVERRIDES = [
    "bc.enabled=false", "rl.ppo_epochs=1", "rl.mini_batches=1", "rl.grad_clip=1.0e9",
    "rl.optimizer._target_=torch.optim.SGD", "rl.optimizer.lr=1.0", "~rl.optimizer.weight_decay",
    "env.max_turns=2", "rollout.max_new_tokens=8", "env.kwargs.prompt_style=compact",
]


def subprocess_env() -> dict[str, str]:
    """Environment of a training subprocess: ``tests/`` and ``src/`` importable, one intra-op thread
    per process (2-process runs on 2 cores; and bit-identical results between runs)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "src")]), "OMP_NUM_THREADS": "1"}


def train_run(overrides: list[str], log_dir: Path, task: str = "lane", timeout: int = 600):
    """Run ``src/train.py`` with ``overrides`` in a subprocess (:func:`subprocess_env`) under
    ``log_dir``; assert it succeeded; returns (its run folder, the finished process)."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), *overrides, f"task_name={task}", f"paths.log_dir={log_dir}"],
        capture_output=True, text=True, timeout=timeout, env=subprocess_env(),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (run_dir,) = (Path(log_dir) / task / "runs").iterdir()
    return run_dir, proc


def tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of one TensorBoard folder: ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@contextlib.contextmanager
def one_thread():
    """Run in-process training with one intra-op thread (as :func:`subprocess_env` does): on a
    shared 2-core machine two spinning OpenMP threads can make a run ten times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class KillDuringSave(Callback):
    """SIGKILL the training process in the middle of writing the checkpoint of iteration
    ``iteration``: the checkpoint is written to its file (the temporary name the writer chose), then
    the file is cut to half its size, as a kill during the write leaves it, and the process dies
    before anything else runs (the rename, the next iteration)."""

    def __init__(self, iteration: int):
        self.iteration = int(iteration)

    def setup(self, trainer, pl_module, stage):
        io = trainer.strategy.checkpoint_io
        real = io.save_checkpoint

        def save_checkpoint(checkpoint, path, storage_options=None):
            real(checkpoint, path, storage_options=storage_options)
            if pl_module.iteration == self.iteration:
                size = os.path.getsize(path)
                with open(path, "r+b") as f:
                    f.truncate(size // 2)
                    f.flush()
                    os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)

        io.save_checkpoint = save_checkpoint


class KillAt(Callback):
    """SIGKILL the training process at the end of iteration ``iteration``, after its metrics were
    logged (and flushed) but before its checkpoint is written: the worst moment for a resume."""

    def __init__(self, iteration: int):
        self.iteration = int(iteration)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.iteration == self.iteration:
            for logger in trainer.loggers:
                logger.save()
                exp = getattr(logger, "experiment", None)
                if hasattr(exp, "flush"):
                    exp.flush()
            os.kill(os.getpid(), signal.SIGKILL)


class RecordBatches(Callback):
    """Save every training batch as the learner received it (``<folder>/batch_<iteration>.pt``: the
    token tables, the turn table with its policy versions, and the learner's version), to compare the
    episodes of two runs token for token."""

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        torch.save({"learner_version": int(pl_module.iteration), "tokens": dict(batch.tokens),
                    "turns": dict(batch.turns)}, self.folder / f"batch_{int(pl_module.iteration)}.pt")


class SlowLearner(Callback):
    """Sleep ``seconds`` after every update, before the weights are published (the weight push runs
    after the other callbacks): the rollout process then plays ahead on the older weights, as far as
    ``rl.max_staleness`` lets it."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        time.sleep(self.seconds)


class SlowValidation(Callback):
    """Sleep ``seconds`` at the end of every validation, before the checkpoint written there (checkpoint callbacks
    run last): an asynchronous rollout process plays the next batch meanwhile, so the checkpoint queues it."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)

    def on_validation_end(self, trainer, pl_module):
        time.sleep(self.seconds)


class SignalRollout(Callback):
    """Send ``sig`` (a signal's name: SIGKILL, SIGSTOP) to the rollout process after update ``iteration``."""

    def __init__(self, iteration: int, sig: str):
        self.iteration, self.sig = int(iteration), getattr(signal, sig)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.iteration == self.iteration:
            from arl.callbacks.weight_sync import WeightPush

            (push,) = [cb for cb in trainer.callbacks if isinstance(cb, WeightPush)]
            os.kill(push.rollouts.process.pid, self.sig)


class FakeSpikeAt(Callback):
    """A grad-norm spike in update ``iteration``'s metrics, before the collapse detector reads them."""

    def __init__(self, iteration: int):
        self.iteration = int(iteration)

    def setup(self, trainer, pl_module, stage):
        trainer.callbacks.remove(self)  # first of all: the config's callbacks (the detector) come after it
        trainer.callbacks.insert(0, self)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.iteration == self.iteration:
            pl_module.last_metrics["actor/grad_norm"] = 1.0e6


# --------------------------------------------------------------------------- fixed rollouts
def master_weight_probe(dtype: str = "float32", lr: float = 1.0e-6) -> float:
    """One AdamW step at ``lr`` on the tiny model sharded by FSDP2 as ``trainer=fsdp2`` shards it
    (``fully_shard_model`` with ``mixed_precision: bf16``: bf16 compute, fp32 reduce) on a
    one-process gloo group, the weights loaded in ``dtype``: the share of the parameters with a
    non-zero gradient that the step changed. Runs in its own process (it owns the process group)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from arl.distributed.fsdp import fully_shard_model
    from arl.models.loading import load_policy
    from arl.run.builders import tiny_model

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:  # a port no other process (a parallel test worker) holds
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model, _ = load_policy(tiny_model())
        model = model.to(getattr(torch, dtype))
        fully_shard_model(model, {"layer_cls": ["Qwen3DecoderLayer"], "mixed_precision": "bf16"}, init_device_mesh("cpu", (1,)))
        before = {n: p.detach().full_tensor().clone() for n, p in model.named_parameters()}
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        ids = torch.randint(0, 500, (4, 32))
        model(input_ids=ids, labels=ids).loss.backward()
        grads = {n: p.grad.full_tensor() != 0 for n, p in model.named_parameters()}
        optimizer.step()
        changed = total = 0
        for n, p in model.named_parameters():
            moved = p.detach().full_tensor() != before[n]
            changed += int((moved & grads[n]).sum())
            total += int(grads[n].sum())
        return changed / total
    finally:
        dist.destroy_process_group()


def make_episodes(cfg, n_groups: int = 4, group_size: int = 2, seed: int = 0):
    """Real episodes of the tiny policy (sampled), with varied rewards so advantages are not 0."""
    from arl.agent.loop import Task
    from arl.run.builders import build_agent_loop, build_engine, load_model, sampling_params
    from arl.run.settings import run_settings

    run = run_settings(cfg)
    model, tok, _ = load_model(run.model)
    loop = build_agent_loop(run.env, run.rollout, build_engine(run.rollout, model, tok), tok)
    torch.manual_seed(seed)
    try:
        eps = loop.run([Task(group_id=g, seed=1000 + g) for g in range(n_groups)], group_size, sampling_params(run.rollout))
    finally:
        loop.close()
    rng = random.Random(seed)
    for e in eps:
        for t in e.turns:
            t.reward = rng.uniform(-1.0, 1.0)
    return eps


class _Batches(IterableDataset):
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        yield from self.batches

    def __len__(self):
        return len(self.batches)


class FixedRollouts(LightningDataModule):
    """The same episodes every iteration; under data parallelism rank r takes its contiguous
    share of the groups (as :class:`RolloutDataModule` does with its seed list)."""

    def __init__(self, episodes, iterations: int = 1, split: str = "even", sample_mode: str = "turn", pad_id: int = 0):
        super().__init__()
        self.pad_id = pad_id
        self.episodes = episodes
        self.iterations = iterations
        self.split = split  # even | last: the last rank gets every group, the others none
        self.sample_mode = sample_mode  # how the episodes were rolled out (turn samples, or one stream each)

    def train_dataloader(self):
        from arl.agent.samples import collate_episodes
        from arl.datamodules.batches import RolloutBatch
        from arl.datamodules.rollout_datamodule import rank_share

        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        groups = sorted({e.group_id for e in self.episodes})
        lo, hi = rank_share(len(groups), rank, world)
        if self.split == "last":
            lo, hi = (0, len(groups)) if rank == world - 1 else (0, 0)
        mine = set(groups[lo:hi])
        eps = [e for e in self.episodes if e.group_id in mine]
        batches = [RolloutBatch(*collate_episodes(eps, self.sample_mode, self.pad_id), i) for i in range(self.iterations)]
        return DataLoader(_Batches(batches), batch_size=None)


class Capture(Callback):
    """After the first iteration: the policy's gradients and weights (full tensors) and metrics."""

    def __init__(self):
        self.result: dict[str, Any] | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.result is not None:
            return
        from arl.distributed.fsdp import full_state_dict

        grads = {}
        for name, p in pl_module.policy.named_parameters():
            g = p.grad
            if g is not None and hasattr(g, "full_tensor"):
                g = g.full_tensor()
            grads[name] = None if g is None else g.detach().clone().cpu()
        weights = {k: v.clone() for k, v in full_state_dict(pl_module.policy, root=trainer.strategy.model).items()}
        self.result = {"grads": grads, "weights": weights, "metrics": dict(pl_module.last_metrics)}


class SeedBeforeUpdate(Callback):
    """Seed torch's RNG right before each training step, so a test knows the shuffle of the
    mini-batch split (the step draws ``torch.randperm`` and nothing else from the RNG)."""

    def __init__(self, seed: int):
        self.seed = int(seed)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        torch.manual_seed(self.seed)


def run_update(cfg, episodes, strategy: str = "auto", devices: int = 1, seed: int = 0, split: str = "even",
               callbacks: list | None = None, iterations: int = 1) -> dict[str, Any]:
    """``iterations`` iterations of the RL module on ``episodes`` through a real Trainer; returns
    Capture's result (after the first iteration) and the module's final weights and counters."""
    import lightning as L

    from arl.run.builders import build_rl_module, build_strategy, load_model
    from arl.run.settings import run_settings

    run = run_settings(cfg)
    model, tok, _ = load_model(run.model)
    model.train()
    module = build_rl_module(run, model, tok)
    if strategy == "fsdp2":
        trainer_cfg = {"strategy": {"_target_": "lightning.pytorch.strategies.ModelParallelStrategy"}, "devices": devices}
        strategy_obj = build_strategy(trainer_cfg)
        module.sharding = {"layer_cls": ["Qwen3DecoderLayer"]}
    else:
        strategy_obj = strategy
    capture = Capture()
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy_obj, max_epochs=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[capture, *(callbacks or [])], num_sanity_val_steps=0, limit_val_batches=0,
    )
    torch.manual_seed(seed)
    trainer.fit(module, datamodule=FixedRollouts(episodes, iterations=iterations, split=split, pad_id=module.pad_id,
                                                 sample_mode=run.rollout.sample_mode))
    out = dict(capture.result or {})
    out["skipped_steps"] = module.skipped_steps
    out["global_rank"] = trainer.global_rank
    out["final_weights"] = {k: v.detach().clone() for k, v in module.policy.state_dict().items()} if strategy != "fsdp2" else None
    out["last_metrics"] = dict(getattr(module, "last_metrics", {}) or {})
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse
    import copy

    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--splits", nargs="*", default=["even"])
    parser.add_argument("--overrides", nargs="*", default=[])
    args = parser.parse_args(argv)
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from arl_testing import compose

    cfg = compose(UPDATE_OVERRIDES + args.overrides)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    # not a Hydra app: Lightning's launcher must re-run this script as it is
    HydraConfig.instance().cfg = None
    episodes = torch.load(args.episodes, weights_only=False)
    results = {}
    for split in args.splits:  # several Trainers in the same launched processes
        # "<split>-unbalanced": the same split with rl.balance_tokens off (each rank computes its own rows)
        split_cfg = copy.deepcopy(cfg)
        OmegaConf.update(split_cfg, "rl.balance_tokens", not split.endswith("-unbalanced"))
        results[split] = run_update(split_cfg, episodes, strategy=args.strategy, devices=args.devices,
                                    split=split.removesuffix("-unbalanced"))
    if results[args.splits[0]]["global_rank"] == 0:
        torch.save(results, args.out)


if __name__ == "__main__":
    main()


def tb_texts(folder: Path) -> dict[str, dict[int, str]]:
    """Every text summary of one TensorBoard folder: ``{tag: {step: markdown}}`` (the tag as given
    to ``add_text``, without the writer's ``/text_summary`` suffix)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    out: dict[str, dict[int, str]] = {}
    for tag in acc.Tags()["tensors"]:
        if not tag.endswith("/text_summary"):
            continue
        for event in acc.Tensors(tag):
            text = tensor_util.make_ndarray(event.tensor_proto).item()
            out.setdefault(tag[: -len("/text_summary")], {})[event.step] = text.decode() if isinstance(text, bytes) else text
    return out


def default_model():
    """The default config's policy and tokenizer (the tiny model, built or read from the cache)."""
    from omegaconf import OmegaConf

    from arl.run.builders import load_model
    from arl_testing import compose

    model, tok, _ = load_model(OmegaConf.to_container(compose([]).model, resolve=True))
    return model, tok
