"""Bytes of tensor storage alive, counted from the tensors themselves: a measurement that gives the
same number on every machine.

Resident memory (RSS) depends on the allocator, the kernels the CPU picks and what else the process
holds; a bound on it fails on one machine and passes on another. :class:`LiveTensorBytes` instead
counts, at every operator that runs while it is active (forward, backward, optimiser, recomputation
under activation checkpointing), the storage bytes of the tensors operators created and that are
still alive, and keeps the peak. The count depends only on the operators and the tensors' shapes.

What it counts: every new storage an operator returns (an output that shares an input's storage,
a view or an in-place result, adds nothing). Storages that existed before the mode (the weights,
a batch built beforehand) are not counted: :func:`storage_bytes` counts those. A storage is
counted until it is freed (a weak reference to it expires); the peak is taken after each operator,
with its inputs and outputs alive, which is the peak at operator granularity (a kernel's own scratch
memory inside one operator is not seen).

    with LiveTensorBytes() as counter:
        loss.backward()
    counter.peak_bytes   # the most bytes that were alive at once
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a storage shared by views counts once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    return sum(seen.values())


class LiveTensorBytes(TorchDispatchMode):
    """A dispatch mode counting the bytes of the storages operators create while it is active.

    ``live_bytes``: created and still alive now; ``peak_bytes``: the most that were alive at once
    (after some operator); ``ops``: the operators seen. :meth:`reset_peak` starts a new peak from
    what is alive now.
    """

    def __init__(self):
        super().__init__()
        self._live: dict[StorageWeakRef, int] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        self._sweep()
        inputs = {StorageWeakRef(t.untyped_storage()) for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            ref = StorageWeakRef(t.untyped_storage())
            if ref in inputs or ref in self._live:
                continue
            nbytes = t.untyped_storage().nbytes()
            self._live[ref] = nbytes
            self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return out

    def _sweep(self) -> None:
        dead = [ref for ref in self._live if ref.expired()]
        for ref in dead:
            self.live_bytes -= self._live.pop(ref)

    def reset_peak(self) -> None:
        """Start the peak again from the bytes alive now."""
        self._sweep()
        self.peak_bytes = self.live_bytes
