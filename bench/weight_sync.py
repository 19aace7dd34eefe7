"""Benchmark of the engine weight sync under FSDP2: seconds and peak extra host memory.

The policy is sharded with ``fully_shard`` as ``trainer=fsdp2`` does (here over ``--world`` gloo
processes on the CPU, where every gathered tensor lands in host memory: the worst case for memory),
and the rollout engine (the transformers engine) keeps its own unsharded copy, as the pipeline
gives it under sharding. Two ways of syncing it after an update:

* ``gathered``: the whole state dict gathered first (``full_state_dict``), then loaded (what the
  project did before: a full copy of the policy per rank, on top of the shards and the engine's);
* ``streamed``: tensor by tensor (``iter_full_tensors`` into ``engine.load_weights``), each
  gathered right before its copy and freed right after (what ``WeightSync`` does now).

Peak extra memory is the largest resident-set size of rank 0 seen during the sync (sampled every
0.5 ms by a thread) minus the size before it, against the largest single tensor of the model (the
"bucket" of the streamed sync is one tensor). Models: the embedded tiny model and, when the
``smollm2`` extra is installed, SmolLM2-135M-Instruct.

Run: ``python bench/weight_sync.py [--repeats 3 --world 2]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import threading
import time
from pathlib import Path

try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import psutil
import torch
from rich.console import Console
from rich.table import Table


class PeakRSS:
    """The largest RSS of this process while the ``with`` block runs, minus the RSS before it."""

    def __enter__(self):
        self.proc = psutil.Process()
        self.base = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.0005)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)
        self.extra = self.peak - self.base


def _models():
    from arl.models.loading import load_policy
    from arl.run.builders import tiny_model

    yield "tiny", lambda: load_policy(tiny_model())
    try:
        from arl.models.smollm2 import ensure_smollm2

        path = ensure_smollm2()
    except Exception as err:  # noqa: BLE001 - the extra is optional
        print(f"SmolLM2-135M skipped: {err}")
        return
    yield "SmolLM2-135M", lambda: load_policy(path)


def _rank(rank: int, world: int, repeats: int, port: int, results) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from arl.distributed.fsdp import GatheredWeights, full_state_dict, fully_shard_model, iter_full_tensors
    from arl.rollout.hf_engine import HFEngine

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    for name, load in _models():
        policy, tok = load()
        engine = HFEngine(copy.deepcopy(policy), tok)  # the engine's own unsharded copy
        fully_shard_model(policy, {"layer_cls": [type(policy.model.layers[0]).__name__]}, mesh)
        n_params = sum(p.numel() for p in engine.model.parameters())
        largest = max(p.numel() * p.element_size() for p in engine.model.parameters())
        with torch.no_grad():
            for p in policy.parameters():  # an "update": the engine must see new values
                p.add_(0.01)
        for how in ("streamed", "gathered"):  # streamed first: memory the gathered sync frees would hide its peak
            seconds, extras = [], []
            for _ in range(repeats):
                dist.barrier()
                t0 = time.perf_counter()
                with PeakRSS() as peak:
                    if how == "gathered":
                        engine.sync(GatheredWeights(full_state_dict(policy)))
                    else:
                        engine.load_weights(iter_full_tensors(policy))
                seconds.append(time.perf_counter() - t0)
                extras.append(peak.extra)
            for key, value in iter_full_tensors(policy):  # every rank takes part in each gather
                assert torch.equal(engine.model.state_dict()[key], value), f"the engine did not get {key}"
            if rank == 0:
                results.put((name, n_params, largest, how, statistics.median(seconds), statistics.median(extras)))
        del policy, engine
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--world", type=int, default=2, help="gloo processes the policy is sharded over")
    args = parser.parse_args(argv)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = 29600 + os.getpid() % 1000
    mp.start_processes(_rank, args=(args.world, args.repeats, port, results), nprocs=args.world, join=True, start_method="spawn")
    table = Table(title=f"engine weight sync under FSDP2 ({args.world} gloo processes, CPU; rank 0)")
    for col in ("model", "parameters", "largest tensor MB", "sync", "seconds (median)", "peak extra MB", "x largest tensor"):
        table.add_column(col, justify="left" if col in ("model", "sync") else "right")
    while not results.empty():
        name, n_params, largest, how, seconds, extra = results.get()
        table.add_row(name, f"{n_params / 1e6:.1f}M", f"{largest / 2**20:.1f}", how, f"{seconds:.3f}",
                      f"{extra / 2**20:.1f}", f"{extra / largest:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
