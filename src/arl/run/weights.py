"""Where the policy's weights live over the data-parallel ranks: one object the pipeline asks.

A run places its policy one of three ways, decided once from ``trainer`` and ``rollout.engine``:

* **whole on every rank** (one process, DDP): every rank loads and trains the whole policy and the
  engine generates from that very module;
* **sharded, every rank loading** (FSDP, FSDP2 with the transformers engine): every rank loads the
  whole policy; the trainer shards it, and the engine generates from an unsharded copy that gathers
  refresh after each update (:func:`arl.callbacks.weight_sync.sync_engine`);
* **sharded, rank 0 loading** (``trainer.sharding.load``: FSDP2 with vLLM on several processes,
  :func:`arl.distributed.fsdp.loads_on_rank0`): rank 0 alone loads, the other ranks build the model
  on the meta device and receive their shards from it, vLLM is loaded by broadcast and keeps no copy;
  the final weights are gathered on rank 0 into a meta frame of the policy taken before the RL
  trainer shards it.

:class:`PolicyWeights` answers the pipeline's questions for each: how to load, what the engine
generates from, what behaviour cloning hands on, and which module holds the final weights to export.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from torch import nn

from arl.callbacks.weight_sync import sync_engine
from arl.distributed.fsdp import (
    full_state_dict,
    gather_on_rank0,
    is_fsdp2,
    is_sharded,
    iter_full_tensors,
    loads_on_rank0,
    mark_weights_from_rank0,
    meta_copy,
    resolve_layer_classes,
)
from arl.run.builders import load_model
from arl.run.settings import RunSettings


@dataclass
class PolicyWeights:
    """The placement of one run's policy weights (see the module's docstring).

    ``from_rank0``: rank 0 alone loads; ``sharded``: the trainer shards the policy; ``frame``: under
    rank-0 loading, the meta copy of the policy the export gathers into (:meth:`before_rl`)."""

    from_rank0: bool
    sharded: bool
    frame: nn.Module | None = None

    @classmethod
    def of(cls, run: RunSettings) -> PolicyWeights:
        return cls(loads_on_rank0(run.trainer, run.rollout.engine), is_sharded(run.trainer))

    def load(self, run: RunSettings):
        """(model, tokenizer, source) of the policy, loaded as the placement says; a sharded run's
        block classes are resolved now (a wrong name stops the run before behaviour cloning)."""
        model, tokenizer, source = load_model(run.model, run.trainer, from_rank0=self.from_rank0)
        layer_cls = (run.trainer.get("sharding") or {}).get("layer_cls")
        if self.sharded and layer_cls is not None:
            resolve_layer_classes(layer_cls, model)
        return model, tokenizer, source

    def engine_model(self, model: nn.Module) -> nn.Module:
        """The module the transformers engine generates from: an unsharded copy of ``model`` when
        every rank loads and the trainer shards, else ``model`` itself."""
        return copy.deepcopy(model) if self.sharded and not self.from_rank0 else model

    def after_bc(self, model: nn.Module, engine_model: nn.Module) -> nn.Module:
        """The engine's module after behaviour cloning returned ``model``: under rank-0 loading there
        is no engine copy, so the BC module (rank 0's gathered policy) is it; else ``engine_model``."""
        return model if self.from_rank0 else engine_model

    def replaced(self, model: nn.Module) -> nn.Module:
        """A new policy module (a LoRA policy with its adapters folded): under rank-0 loading marked
        so that rank 0's fresh weights reach the other ranks when it is sharded."""
        return mark_weights_from_rank0(model) if self.from_rank0 else model

    def before_rl(self, model: nn.Module) -> None:
        """Take the export's frame (rank-0 loading) before the RL trainer shards ``model``."""
        if self.from_rank0:
            self.frame = meta_copy(model)

    def final(self, module, trainer, engine, engine_model: nn.Module, policy: nn.Module) -> Any:
        """The module holding the final policy weights on rank 0 (a collective when sharded: every
        rank calls it). Rank-0 loading: gathered into the frame. Every rank loading and sharded:
        gathered into the engine's copy (under FSDP2 one tensor at a time, so no GPU holds the whole
        unsharded model while the engine is awake). Whole on every rank: ``policy`` itself."""
        if self.frame is not None:
            return gather_on_rank0(module.policy, self.frame)
        if engine_model is policy:
            return engine_model
        sync_engine(engine, trainer, module)
        if getattr(engine, "model", None) is not engine_model:
            if is_fsdp2(module.policy):  # one gathered tensor at a time into the host copy, not the whole model
                target = engine_model.state_dict()
                for name, full in iter_full_tensors(module.policy):
                    target[name].copy_(full)
            else:
                engine_model.load_state_dict(full_state_dict(module.policy, root=trainer.strategy.model))
        return engine_model
