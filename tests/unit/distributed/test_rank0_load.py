"""Weights loaded by rank 0 alone (``trainer.sharding.load: rank0``): on two real gloo processes,
the other rank builds the embedded model on the meta device (no parameter storage), FSDP2 shards
both and every rank's shards come from rank 0; an engine's weights come by broadcast; the trained
policy is gathered onto rank 0 alone into a fresh frame, tied weights tied again."""

from __future__ import annotations

import os
import socket

import torch
import torch.multiprocessing as mp

SHARDING = {"layer_cls": ["Qwen3DecoderLayer"], "activation_checkpointing": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, path: str, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from arl.distributed.fsdp import (
        full_state_dict,
        fully_shard_model,
        gather_on_rank0,
        iter_rank0_tensors,
        mark_weights_from_rank0,
        meta_copy,
        weights_from_rank0,
    )
    from arl.models.loading import load_policy
    from arl.run.builders import reference_copy

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    out: dict = {}
    try:
        torch.manual_seed(rank)  # nothing may depend on a rank's own draws
        model, _ = load_policy(path, weights=rank == 0)
        mark_weights_from_rank0(model)
        out["storage_before"] = sum(p.untyped_storage().nbytes() for p in model.parameters() if not p.is_meta)
        out["all_meta"] = all(p.is_meta for p in model.parameters())
        out["streamed"] = {n: t.clone() for n, t in iter_rank0_tensors(model)}
        reference = reference_copy(model, "bfloat16")
        skeleton = meta_copy(model)
        mesh = init_device_mesh("cpu", (2,))
        fully_shard_model(model, SHARDING, mesh)
        fully_shard_model(reference, {**SHARDING, "activation_checkpointing": False}, mesh)
        out["flag_cleared"] = not weights_from_rank0(model) and not weights_from_rank0(reference)
        out["policy"] = full_state_dict(model)
        out["reference"] = full_state_dict(reference)
        out["buffers"] = {n: b.clone() for n, b in model.named_buffers()}
        with torch.no_grad():  # a training step's change, so the gather has something of its own to show
            for p in model.parameters():
                p.add_(0.5)
        gathered = gather_on_rank0(model, skeleton)
        if gathered is not None:
            out["gathered"] = {n: t.clone() for n, t in gathered.state_dict().items()}
            out["tied"] = gathered.lm_head.weight is gathered.model.embed_tokens.weight
            out["gathered_buffers"] = {n: b.clone() for n, b in gathered.named_buffers()}
        else:
            out["gathered"] = None
        dist.barrier()
    except BaseException:  # noqa: BLE001 - the test shows the worker's traceback
        import traceback

        out = {"error": traceback.format_exc()}
    finally:
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))  # a file: tensors outlive the process
        os._exit(0)  # see test_fsdp_stream: gloo's teardown aborts now and then after the work


def test_rank0_weights_reach_every_shard_engine_and_export(tiny_path, tmp_path):
    from arl.models.loading import load_policy

    loaded, _ = load_policy(str(tiny_path))
    want = {k: v.clone() for k, v in loaded.state_dict().items()}
    want_buffers = {n: b.clone() for n, b in loaded.named_buffers()}
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, str(tiny_path), str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    got = {r: torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)}
    errors = [r.get("error") for r in got.values() if "error" in r]
    assert not errors, errors[0]
    one = got[1]
    # rank 1 read no weight: every parameter on the meta device, no storage at all
    assert one["all_meta"] and one["storage_before"] == 0
    assert not got[0]["all_meta"] and got[0]["storage_before"] > 0
    for rank in (0, 1):
        r = got[rank]
        assert r["flag_cleared"]
        # an engine built from the unsharded model receives rank 0's tensors (tied names included)
        assert sorted(r["streamed"]) == sorted(want)
        assert all(torch.equal(r["streamed"][k], want[k]) for k in want)
        # every shard holds rank 0's weights, the bf16 reference too; rotary buffers are rank 0's
        assert all(torch.equal(r["policy"][k], want[k]) for k in want), rank
        assert all(torch.equal(r["reference"][k], want[k].to(torch.bfloat16) if want[k].is_floating_point() else want[k])
                   for k in want if k in r["reference"])
        assert all(torch.equal(r["buffers"][k], want_buffers[k]) for k in want_buffers), rank
    # the export: rank 0 alone holds the gathered (stepped) policy, its LM head tied again
    assert one["gathered"] is None
    zero = got[0]
    assert zero["tied"]
    assert all(torch.allclose(zero["gathered"][k], want[k] + 0.5) for k in want if want[k].is_floating_point())
    assert all(torch.equal(zero["gathered_buffers"][k], want_buffers[k]) for k in want_buffers)
