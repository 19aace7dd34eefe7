"""``iter_full_tensors``: the streamed weight sync's source (plain module here; the FSDP2 case runs
in the two-process lanes and bench/weight_sync.py)."""

from __future__ import annotations

import torch

from arl.distributed.fsdp import iter_full_tensors


def test_every_state_dict_name_once_and_tied_tensors_from_one_gather(tiny):
    model, _ = tiny
    assert model.config.tie_word_embeddings  # the embedded default ties its LM head
    stream = list(iter_full_tensors(model))
    names = [n for n, _ in stream]
    assert sorted(names) == sorted(model.state_dict()) and len(names) == len(set(names))
    got = dict(stream)
    head, embed = got["lm_head.weight"], got["model.embed_tokens.weight"]
    assert head.data_ptr() == embed.data_ptr()  # one tensor under both names, not a second gather
    # the alias comes right after its source, so a consumer can let it go before the next gather
    assert names.index("lm_head.weight") == names.index("model.embed_tokens.weight") + 1
    state = model.state_dict()
    assert all(torch.equal(t, state[n]) for n, t in stream)


def test_untied_model_streams_its_state_dict_in_order():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.LayerNorm(3))
    assert [n for n, _ in iter_full_tensors(net)] == list(net.state_dict())


SHARD_ROWS = (6, 5, 1)  # even, uneven, and a rank with an empty shard


def _gather_rank(rank: int, world: int, port: int) -> None:
    """Exits with a bit set for each shape whose gather differed (0: all equal)."""
    import os

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from arl.distributed.fsdp import gather_full

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    failed = 0
    for bit, rows in enumerate(SHARD_ROWS):
        full = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3)
        dt = distribute_tensor(full, mesh, [Shard(0)])
        got = gather_full(dt)
        if not (torch.equal(got, full) and torch.equal(got, dt.full_tensor())):
            failed |= 1 << bit
    dist.barrier()  # neither rank leaves while the other is in a collective
    # the answer is the exit code, and the process leaves without tearing gloo down: its
    # destructors (destroy_process_group, or the interpreter's exit) aborted the process now and
    # then ("terminate called without an active exception", about 1 run in 30) after the work
    # was done
    os._exit(failed)


def test_gather_full_by_broadcasts_equals_full_tensor_for_every_shard_shape():
    """gloo's path of gather_full (one broadcast per rank into the output's rows) gives what
    ``full_tensor()`` gives, uneven shards and an empty one included."""
    import os

    import pytest
    import torch.multiprocessing as mp

    try:
        mp.start_processes(_gather_rank, args=(2, 29400 + os.getpid() % 500), nprocs=2, join=True,
                           start_method="spawn")
    except mp.ProcessExitedException as e:
        if e.exit_code <= 0:  # killed by a signal
            pytest.fail(f"rank {e.error_index} died: {e}")
        shapes = [rows for bit, rows in enumerate(SHARD_ROWS) if e.exit_code >> bit & 1]
        pytest.fail(f"rank {e.error_index} exited with {e.exit_code}: the gather differed for rows {shapes}")
