"""Sharding helpers: block classes by name, FSDP2 ``fully_shard``, full-state gathers.

The trainer configs name the transformer block class in YAML (``sharding.layer_cls:
[Qwen3DecoderLayer]``); :func:`resolve_layer_classes` turns the names into classes by looking in
the model itself (so any architecture works without an import path), and fails at start-up with
the classes the model does have.

Two sharded lanes share these helpers:

* ``trainer=fsdp`` - Lightning ``FSDPStrategy`` (FSDP1, GPU only): the names become its
  ``auto_wrap_policy`` / ``activation_checkpointing_policy`` (see :func:`strategy_kwargs`).
* ``trainer=fsdp2`` / ``trainer=fsdp2_cpu`` - Lightning ``ModelParallelStrategy`` (FSDP2): the
  LightningModule's ``configure_model`` calls :func:`fully_shard_model` on the data-parallel mesh.

In both, the rollout engine keeps its own unsharded copy of the policy, refreshed by
:func:`full_state_dict` (a collective) after every update; the HF export reads that copy too.
"""

from __future__ import annotations

import copy
import importlib
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from arl.distributed import ranks as dist_utils
from arl.distributed.placement import trainer_processes

SHARDED_STRATEGIES = ("FSDPStrategy", "ModelParallelStrategy")


class ShardingConfigError(ValueError):
    """A sharding setting does not fit the model (names the key and the valid choices)."""


def strategy_name(trainer_cfg: Mapping[str, Any] | None) -> str:
    """The class name of ``trainer.strategy`` (a ``_target_`` node or a string), '' if unset."""
    if not trainer_cfg:
        return ""
    strategy = trainer_cfg.get("strategy")
    if isinstance(strategy, Mapping):
        return str(strategy.get("_target_", "")).rsplit(".", 1)[-1]
    return str(strategy or "")


def is_sharded(trainer_cfg: Mapping[str, Any] | None) -> bool:
    """Whether the trainer config shards the model (FSDP1 or FSDP2)."""
    return strategy_name(trainer_cfg) in SHARDED_STRATEGIES or strategy_name(trainer_cfg).startswith("fsdp")


SHARDING_LOADS = ("auto", "rank0", "every_rank")


def loads_on_rank0(trainer: Mapping[str, Any], engine: str) -> bool:
    """``trainer.sharding.load`` of the ``trainer`` group resolved for the rollout ``engine``
    (``rollout.engine``): whether rank 0 alone loads
    the policy's weights and the other ranks receive their shards from it. ``auto`` means yes
    under FSDP2 (``ModelParallelStrategy``) on several processes with the vLLM engine, the
    paper-scale setting: a node then holds one loaded copy, not one per GPU (the transformers
    engine generates from an unsharded copy on every rank, so it needs every rank to load).
    ``rank0`` outside that setting is a config error (``arl.run.checks``)."""
    trainer = trainer or {}
    choice = (trainer.get("sharding") or {}).get("load", "auto")
    if choice == "every_rank":
        return False
    return strategy_name(trainer) == "ModelParallelStrategy" and trainer_processes(trainer) > 1 and engine == "vllm"


def block_class_names(model: nn.Module) -> list[str]:
    """Names of the repeated sub-module classes of ``model`` (the candidates for wrapping)."""
    counts: dict[str, int] = {}
    for m in model.modules():
        if isinstance(m, nn.ModuleList):
            for child in m:
                counts[type(child).__name__] = counts.get(type(child).__name__, 0) + 1
    return sorted(counts)


def resolve_layer_classes(names: Iterable[str], model: nn.Module) -> tuple[type, ...]:
    """Classes of ``model``'s sub-modules named ``names`` (a dotted import path also works)."""
    found: dict[str, type] = {}
    wanted = [str(n) for n in names]
    for m in model.modules():
        cls = type(m)
        if cls.__name__ in wanted:
            found.setdefault(cls.__name__, cls)
    missing = [n for n in wanted if n not in found]
    for name in list(missing):
        if "." in name:
            module_name, _, attr = name.rpartition(".")
            try:
                found[name] = getattr(importlib.import_module(module_name), attr)
                missing.remove(name)
            except (ImportError, AttributeError):
                pass
    if missing:
        raise ShardingConfigError(
            f"trainer.sharding.layer_cls: {', '.join(missing)} is not a module class of {type(model).__name__}; "
            f"its block classes are: {', '.join(block_class_names(model)) or '(none found)'}"
        )
    if not wanted:
        raise ShardingConfigError("trainer.sharding.layer_cls is empty; name the transformer block class")
    return tuple(found[n] for n in wanted)


def strategy_kwargs(strategy_cfg: Mapping[str, Any], sharding: Mapping[str, Any], model: nn.Module) -> dict[str, Any]:
    """Keyword arguments that complete a Lightning ``FSDPStrategy`` from ``trainer.sharding``."""
    classes = set(resolve_layer_classes(sharding.get("layer_cls") or [], model))
    # the policy class itself is a unit too: every policy forward is then an FSDP forward with its
    # own backward hooks, which is what manual optimisation (several backwards per step) needs
    classes.add(type(model))
    kwargs: dict[str, Any] = {"auto_wrap_policy": classes}
    if sharding.get("activation_checkpointing"):
        kwargs["activation_checkpointing_policy"] = set(resolve_layer_classes(sharding["layer_cls"], model))
    return kwargs


def is_fsdp2(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule  # optional: torch.distributed submodule, absent on some builds

    return isinstance(module, FSDPModule)


def data_parallel_mesh(module, sharding: Mapping[str, Any] | None):
    """The data-parallel device mesh a LightningModule shards on, or None outside FSDP2.

    Called from ``configure_model``: only Lightning's ``ModelParallelStrategy`` (``trainer=fsdp2``)
    shards there; it needs ``trainer.sharding`` to know the block class.
    """
    trainer = module._trainer
    if trainer is None or type(trainer.strategy).__name__ != "ModelParallelStrategy":
        return None
    if not sharding:
        raise ValueError("ModelParallelStrategy needs trainer.sharding.layer_cls (the transformer block class to shard)")
    mesh = module.device_mesh
    return mesh["data_parallel"] if "data_parallel" in (mesh.mesh_dim_names or ()) else mesh


def fully_shard_model(model: nn.Module, sharding: Mapping[str, Any], mesh) -> nn.Module:
    """FSDP2: shard every block of ``sharding.layer_cls``, then the whole model (idempotent).

    ``sharding`` keys: ``layer_cls`` (names), ``activation_checkpointing`` (bool: wrap each block
    in a non-reentrant checkpoint), ``reshard_after_forward`` (bool, default True),
    ``mixed_precision`` (null | bf16 | fp16: parameter dtype in forward/backward, fp32 reduce).
    """
    # optional: torch.distributed submodule, absent on some builds
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if is_fsdp2(model):
        return model
    classes = resolve_layer_classes(sharding.get("layer_cls") or [], model)
    if sharding.get("activation_checkpointing"):
        # optional: torch.distributed submodule, absent on some builds
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl,
            apply_activation_checkpointing,
            checkpoint_wrapper,
        )

        apply_activation_checkpointing(
            model,
            checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: isinstance(m, classes),
        )
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": bool(sharding.get("reshard_after_forward", True))}
    dtype = sharding.get("mixed_precision")
    if dtype:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)), reduce_dtype=torch.float32)
    from_rank0 = weights_from_rank0(model)
    full = dict(model.state_dict()) if from_rank0 and dist_utils.rank() == 0 else {}  # kept alive until sent
    for m in list(model.modules()):
        if isinstance(m, classes):
            fully_shard(m, **kwargs)
    fully_shard(model, **kwargs)
    if from_rank0:
        _load_shards_from_rank0(model, full, mesh)
    return model


# ----------------------------------------------------------------------------- weights from rank 0
_FROM_RANK0 = "_arl_weights_from_rank0"


def mark_weights_from_rank0(model: nn.Module) -> nn.Module:
    """Mark ``model`` as one whose weights rank 0 alone holds (``trainer.sharding.load: rank0``):
    on rank 0 the loaded model, on the others the same architecture on the meta device. Sharding
    it (:func:`fully_shard_model`) then fills every rank's shards from rank 0's tensors, and an
    engine built from it is loaded by broadcast (:func:`iter_rank0_tensors`). Every rank marks
    its model alike (the collectives pair up)."""
    setattr(model, _FROM_RANK0, True)
    return model


def weights_from_rank0(model: nn.Module) -> bool:
    """Whether ``model`` is marked by :func:`mark_weights_from_rank0` and not yet sharded."""
    return bool(getattr(model, _FROM_RANK0, False))


def _load_shards_from_rank0(model: nn.Module, full: Mapping[str, torch.Tensor], mesh) -> None:
    """Fill the FSDP2 shards of ``model`` from rank 0's full state dict ``full`` (empty on the
    other ranks, whose parameters are on the meta device): storage is made on the mesh's device
    (rank 0 moves its own shards there), each tensor is broadcast from rank 0 and every rank
    keeps its shard (``set_model_state_dict(broadcast_from_rank0=True)``), then the buffers, which
    state dicts leave out when they are not persistent (rotary ``inv_freq``)."""
    # optional: torch.distributed submodule, absent on some builds
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    device = torch.device("cuda", torch.cuda.current_device()) if mesh.device_type == "cuda" else torch.device(mesh.device_type)
    if dist_utils.rank() == 0:
        model.to(device)
    else:
        model.to_empty(device=device)
    set_model_state_dict(model, dict(full), options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for _, buf in model.named_buffers():
        dist.broadcast(buf, src=0)
    setattr(model, _FROM_RANK0, False)


def meta_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module``'s structure with every parameter and buffer on the meta device (no
    storage): the skeleton a gathered policy is rebuilt into (:func:`gather_on_rank0`)."""
    memo: dict[int, Any] = {}
    for t in itertools.chain(module.parameters(), module.buffers()):
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
    return copy.deepcopy(module, memo)


def gather_on_rank0(policy: nn.Module, skeleton: nn.Module) -> nn.Module | None:
    """The unsharded ``policy`` (FSDP2) on rank 0, None on the others: a collective, every rank
    calls it. Rank 0 gives ``skeleton`` (a :func:`meta_copy` of the policy taken before it was
    sharded) host storage and copies each tensor in as it is gathered
    (:func:`iter_full_tensors`, one at a time), and the buffers from ``policy``; the other ranks
    only take part in the gathers. Replaces the full state dict on every rank, which held the
    whole policy in every process at once."""
    rank0 = dist_utils.rank() == 0
    target = skeleton.to_empty(device="cpu") if rank0 else None
    if rank0 and callable(getattr(target, "tie_weights", None)):
        target.tie_weights()  # to_empty gives each module its own tensor: tied weights are one again
    state = target.state_dict() if rank0 else {}
    for name, full in iter_full_tensors(policy):
        if rank0:
            state[name].copy_(full)
    if rank0:
        own = {n.replace(_CHECKPOINT_SEGMENT, ""): b for n, b in policy.named_buffers()}
        for name, buf in target.named_buffers():
            buf.copy_(own[name])
    return target


def iter_rank0_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` of every state-dict entry of a :func:`mark_weights_from_rank0`
    model, as rank 0 holds it, on every rank: a collective (every rank iterates the same names in
    the same order). Each tensor is broadcast from rank 0 right when the consumer asks for it (a
    rollout engine's ``load_weights``), so a rank without weights holds at most one beyond its own.
    Tied names as :func:`iter_full_tensors`."""
    device, rank0 = dist_utils.collective_device(), dist_utils.rank() == 0
    aliases, later = _tied_aliases(model)
    for name, value in model.state_dict().items():
        if name in later:
            continue
        full = value.detach().to(device) if rank0 else torch.empty(value.shape, dtype=value.dtype, device=device)
        dist.broadcast(full, src=0)
        yield name, full
        for alias in aliases.get(name, ()):
            yield alias, full
        del full


def _tied_aliases(policy: nn.Module) -> tuple[dict[str, list[str]], set[str]]:
    """``({first name: its other names}, every other name)`` of the parameters tied together."""
    names_of: dict[int, list[str]] = {}
    for n, p in policy.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(p), []).append(n.replace(_CHECKPOINT_SEGMENT, ""))
    aliases = {names[0]: names[1:] for names in names_of.values() if len(names) > 1}
    return aliases, {a for names in aliases.values() for a in names}


def _has_dtensor(module: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor  # optional: torch.distributed submodule, absent on some builds

    return any(isinstance(p, DTensor) for p in module.parameters())


def full_state_dict(policy: nn.Module, root: nn.Module | None = None, prefix: str = "policy.") -> dict[str, torch.Tensor]:
    """The unsharded weights of ``policy`` on every rank (a collective under FSDP).

    Args:
        policy: the policy sub-module (FSDP2-sharded, FSDP1-wrapped inside ``root``, or plain).
        root: the strategy's wrapped model; needed for FSDP1, where the policy's parameters are
            views into flat parameters owned by the wrapper.
        prefix: the policy's prefix inside ``root``.
    """
    # optional: torch.distributed submodule, absent on some builds
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=False)
    if _has_dtensor(policy):  # FSDP2
        sd = get_model_state_dict(policy, options=options)
    elif root is not None and _is_fsdp1(root):
        sd = get_model_state_dict(root, options=options)
        sd = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
    else:
        return {k: v.detach() for k, v in policy.state_dict().items()}
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu() for k, v in sd.items()}


def _is_fsdp1(module: nn.Module) -> bool:
    # optional: torch.distributed submodule, absent on some builds
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(module, FullyShardedDataParallel) or any(isinstance(m, FullyShardedDataParallel) for m in module.modules())


_CHECKPOINT_SEGMENT = "_checkpoint_wrapped_module."  # activation checkpointing's wrapper; state dicts drop it


def gather_full(value: torch.Tensor) -> torch.Tensor:
    """The full tensor of ``value`` (an FSDP2 ``DTensor``, or a plain tensor returned as is).

    FSDP2's layout (dim 0 split over a 1-D mesh, ``Shard(0)``) on gloo is gathered by one broadcast
    per rank straight into the rows of a single output tensor. Gloo's all-gather (``full_tensor()``)
    holds a temporary as large as the output beside it: gathering SmolLM2's 108 MB embedding peaked
    at 215 MB. The broadcasts peak at the output alone. Any other placement, mesh or backend (NCCL
    gathers into its output) uses ``full_tensor()``. A collective: every rank of the mesh calls it
    for the same tensors in the same order.
    """
    if not hasattr(value, "full_tensor"):
        return value
    from torch.distributed.tensor import Shard  # optional: torch.distributed submodule, absent on some builds

    mesh = getattr(value, "device_mesh", None)
    if (mesh is None or mesh.ndim != 1 or tuple(value.placements) != (Shard(0),)
            or dist.get_backend(mesh.get_group()) != "gloo"):
        return value.full_tensor()
    group, world, me = mesh.get_group(), mesh.size(), mesh.get_local_rank()
    rows = [c.shape[0] for c in torch.empty(value.shape[0], 0).chunk(world)]  # Shard(0) splits as torch.chunk
    rows += [0] * (world - len(rows))
    local = value.to_local()
    out = torch.empty(value.shape, dtype=local.dtype, device=local.device)
    start = 0
    for r, n in enumerate(rows):
        if n:
            part = out[start : start + n]  # a dim-0 slice of a contiguous tensor: contiguous, written in place
            if r == me:
                part.copy_(local)
            dist.broadcast(part, src=dist.get_global_rank(group, r), group=group)
        start += n
    return out


def iter_full_tensors(policy: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` of every entry of ``policy``'s state dict (FSDP2 or plain), gathered
    one at a time.

    Under FSDP2 each sharded tensor is gathered (:func:`gather_full`, a collective: every rank
    iterates the same names in the same order) on the device its shard lives on, right when the
    consumer asks for it, so at most one full tensor beyond the shards exists while the consumer
    copies it into its own weights (a rollout engine's ``load_weights``) and lets it go. A
    parameter tied to others (the LM head of tied embeddings) is gathered once and given under
    each of its names, one right after the other: a consumer may keep the tied copies apart (vLLM
    on CPU repacks the LM head on its own and leaves it stale unless its name comes). Which names
    are tied follows from the module's structure, so every rank gathers the same tensors. FSDP1
    has no per-tensor gather: use :func:`full_state_dict`.
    """
    aliases, later = _tied_aliases(policy)
    for name, value in policy.state_dict().items():
        if name in later:
            continue
        full = gather_full(value)
        yield name, full.detach()
        for alias in aliases.get(name, ()):
            yield alias, full.detach()
        del full


class GatheredWeights:
    """A stand-in for the policy module whose ``state_dict()`` is a gathered full state dict.

    Rollout engines sync from ``policy.state_dict()``; under sharding they get this instead.
    """

    def __init__(self, state: dict[str, torch.Tensor]):
        self._state = state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state
