"""Small helpers over ``torch.distributed`` that are no-ops on one process.

Lightning owns the process group (DDP, FSDP, ModelParallel strategies all initialise the default
group); these helpers only read it. Everything here is a collective when more than one process
runs: every rank must call it, in the same order.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def rank_and_world(trainer=None) -> tuple[int, int]:
    """(data-parallel rank, number of ranks): the Trainer's when one is given, else the process
    group's ((0, 1) without one)."""
    if trainer is None:
        return rank(), world_size()
    return int(trainer.global_rank), int(trainer.world_size)


def collective_device() -> torch.device:
    """Where collective tensors live: the backend decides (nccl needs CUDA tensors)."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_(values: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """All-reduce ``values`` (float) over ranks; returns a tensor on the input's device."""
    if not is_distributed():
        return values
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    out = values.detach().to(collective_device(), dtype=torch.float64 if values.is_floating_point() else values.dtype).clone()
    dist.all_reduce(out, op=ops[op])
    return out.to(values.device, values.dtype)


def max_int(value: int) -> int:
    """The largest ``value`` over ranks."""
    return int(all_reduce_(torch.tensor([float(value)]), "max").item())


def all_gather_object(obj: Any) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` (``[obj]`` on one process)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if is_distributed():
        dist.barrier()


# --------------------------------------------------------------------------- RNG state
def capture_rng() -> dict[str, Any]:
    """The global RNG states that rollouts and updates consume: python, numpy, torch (+CUDA).

    Plain containers and tensors only, so checkpoints load with ``torch.load(weights_only=True)``.
    """
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_rank(seed: int, rank_: int) -> None:
    """Seed python, numpy and torch from (seed, rank): ranks sample independently."""
    derived = int(np.random.SeedSequence([int(seed), int(rank_), 0x5EED]).generate_state(1)[0])
    random.seed(derived)
    np.random.seed(derived)
    torch.manual_seed(derived)
