"""After every update, load the trainer's weights into the rollout engine.

With the transformers engine on one process or under DDP, the engine holds the trained module
itself and this costs nothing; engines that keep their own copy (vLLM, or the HF engine's
unsharded copy under FSDP) reload here. Under FSDP2 the sync streams: each tensor is gathered
(a collective: every rank takes part and loads its own engine) right before the engine copies it
(``engine.load_weights``) and is freed right after, so no rank ever holds a second full copy of
the policy (:func:`arl.distributed.fsdp.iter_full_tensors`). FSDP1 gathers the whole state first.

The sync also runs when training starts, so a resumed run (whose weights came from the
checkpoint) and a rolled-back run never sample with stale engine weights.
"""

from __future__ import annotations

import time

from lightning import Callback

from arl.callbacks.collapse import CollapseDetector
from arl.distributed.fsdp import SHARDED_STRATEGIES, GatheredWeights, full_state_dict, is_fsdp2, iter_full_tensors


def sync_engine(engine, trainer, pl_module) -> None:
    """Load ``pl_module.policy``'s current weights into ``engine`` (gathered when sharded:
    streamed tensor by tensor under FSDP2 when the engine has ``load_weights``)."""
    policy = pl_module.policy
    if trainer is not None and type(trainer.strategy).__name__ in SHARDED_STRATEGIES:
        load = getattr(engine, "load_weights", None)
        if callable(load) and is_fsdp2(policy):
            load(iter_full_tensors(policy))
        else:
            engine.sync(GatheredWeights(full_state_dict(policy, root=trainer.strategy.model)))
    elif getattr(engine, "model", None) is not policy:
        engine.sync(policy)


def _call(engine, method: str) -> None:
    fn = getattr(engine, method, None)
    if callable(fn):
        fn()


class EngineStart(Callback):
    """Builds an engine that waits for the process group (``LazyEngine.start``) in ``setup``: every
    rank runs that hook at the same point, right after the group is up and before any training.
    A behaviour-cloning trainer uses it alone: a broken vLLM, or one that does not fit on the GPU,
    then stops the run before the SFT, not after it; and the engine sleeps (frees its GPU memory,
    with sleep mode) while the SFT trains, to be woken by the sync of the cloned weights."""

    def __init__(self, engine):
        self.engine = engine

    def setup(self, trainer, pl_module, stage):
        _call(self.engine, "start")

    def on_fit_start(self, trainer, pl_module):
        _call(self.engine, "sleep")


class WeightSync(EngineStart):
    """Keeps the rollout engine's weights those of the trained policy (see the module docstring);
    builds the engine in ``setup`` (:class:`EngineStart`).

    With ``each_update=False`` (asynchronous RL: the learner's engine only validates, the rollout process
    has its own) the engine is loaded before each validation and at the end of training instead of after
    every update, and sleeps in between."""

    def __init__(self, engine, each_update: bool = True):
        super().__init__(engine)
        self.each_update = bool(each_update)
        self.seconds = 0.0

    def on_fit_start(self, trainer, pl_module):
        """The engine stays awake until the first rollout is done."""

    def on_train_start(self, trainer, pl_module):
        sync_engine(self.engine, trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        """The rollout is done (the batch is here): let an engine with a sleep mode free its
        accelerator memory for the update; the sync after the update wakes it."""
        _call(self.engine, "sleep")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        """The update is done: free its gradients (the next step starts from none anyway; a vLLM
        engine waking from sleep needs the memory), then load the new weights into the engine.
        Runs after every other callback's batch-end hook."""
        for optimizer in trainer.optimizers:
            optimizer.zero_grad(set_to_none=True)
        if not self.each_update:
            return
        self._sync(trainer, pl_module)

    def on_validation_start(self, trainer, pl_module):
        if not self.each_update and trainer.state.fn == "fit":  # outside fit, training left the engine current
            self._sync(trainer, pl_module)

    def on_train_end(self, trainer, pl_module):
        if not self.each_update:
            self._sync(trainer, pl_module)

    def _sync(self, trainer, pl_module) -> None:
        t0 = time.perf_counter()
        sync_engine(self.engine, trainer, pl_module)
        self.seconds = time.perf_counter() - t0
        for logger in trainer.loggers:
            logger.log_metrics({"perf/sync_s": self.seconds}, step=getattr(pl_module, "iteration", trainer.global_step))


class WeightPush(Callback):
    """Asynchronous RL (``rl.max_staleness``): publishes the policy's weights to the rollout process
    when training starts and after every update (its version: the updates made), and stops that
    process when the fit ends or fails. Runs beside :class:`WeightSync`, after the other callbacks'
    batch-end hooks, so a rolled-back policy is what gets published."""

    def __init__(self, rollouts, datamodule):
        self.rollouts = rollouts  # an arl.run.async_rollout.AsyncRollouts
        self.datamodule = datamodule  # its RNG states (a resumed run's) are restored before the first publish
        self.rollbacks = 0

    def on_train_start(self, trainer, pl_module):
        self.datamodule.prepare_rng()
        self.rollbacks = _rollbacks(trainer)
        self.rollouts.publish(pl_module.policy, pl_module.iteration)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        rollbacks = _rollbacks(trainer)
        if rollbacks != self.rollbacks:  # the collapse detector rolled the policy back: what the collapsed policy
            self.rollbacks = rollbacks  # played (queued, in the pipe, in play) is dropped, a new process plays on
            self.rollouts.restart(pl_module.policy)
        self.rollouts.publish(pl_module.policy, pl_module.iteration)

    def on_fit_end(self, trainer, pl_module):
        self.rollouts.close()

    def on_exception(self, trainer, pl_module, exception):
        self.rollouts.close()


def _rollbacks(trainer) -> int:
    """How many rollbacks the run's collapse detector made (0 without one)."""
    return sum(cb.rollbacks for cb in trainer.callbacks if isinstance(cb, CollapseDetector))
