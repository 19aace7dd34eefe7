"""FSDP2 + bf16 training steps of a ~0.4B Qwen3-architecture model (random weights): tokens/s, peak memory.

Launched by ``bench/gpu_check.sh`` through ``torchrun`` (one process by default); also runs without
torchrun (a one-process group is made here). The model comes from a ``Qwen3Config`` saved to a
temporary HF folder and built from it (no weights on disk); every decoder layer and then the
root are wrapped with ``fully_shard`` (FSDP2) with a bf16 ``MixedPrecisionPolicy`` (fp32 master
weights and gradient reduction), through the project's own ``arl.distributed.fsdp.fully_shard_model``.
Each step: random token batch (B x L), ``arl.modules.forward.forward_log_probs`` (the trainer's
scoring forward, ``use_cache=False``), mean negative log-likelihood, backward, grad clip, AdamW.

Prints one line per timed step and a final ``RESULT`` line; exits non-zero on any failure
(non-finite loss included).

CPU check of the script itself (tiny config, gloo, fp32 compute unless --bf16):
``python bench/gpu_train_step.py --device cpu --small``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
import torch.distributed as dist


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"],
                    help="default: cuda if available, else cpu with --small (so `make bench` runs anywhere)")
    ap.add_argument("--small", action="store_true", help="a tiny config (script check on CPU)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=3072)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                    help="bf16 MixedPrecisionPolicy (default: on for cuda, off for cpu)")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--no-fsdp", action="store_true", help="plain module (for comparison)")
    ap.add_argument("--json", default=None, help="write the result as JSON here")
    args = ap.parse_args()
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
        if args.device == "cpu":
            print("no GPU: running the CPU check of this script (--device cpu --small)", flush=True)
            args.small = True
    if args.small:
        args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim = 64, 2, 4, 2, 16
        args.intermediate, args.vocab = 128, 1024
        args.batch, args.seq = min(args.batch, 2), min(args.seq, 64)
        args.steps, args.warmup = min(args.steps, 3), min(args.warmup, 1)
    if args.bf16 is None:
        args.bf16 = args.device == "cuda"
    return args


def init_distributed(device: str) -> tuple[int, int]:
    backend = "nccl" if device == "cuda" else "gloo"
    if "RANK" not in os.environ:  # not under torchrun: a one-process group
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"})
        if "MASTER_PORT" not in os.environ:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)
    return rank, world


def build_model(args, device: torch.device):
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim, max_position_embeddings=max(4096, args.seq), tie_word_embeddings=True,
    )
    with tempfile.TemporaryDirectory(prefix="arl-gpu-check-") as folder:
        config.save_pretrained(folder)  # an HF folder, as `model=hf model.path=...` would read
        loaded = AutoConfig.from_pretrained(folder)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(loaded, dtype=torch.float32)
    if args.activation_checkpointing:
        from arl.models.loading import enable_gradient_checkpointing

        enable_gradient_checkpointing(model)
    return model


def shard(model, args, device: torch.device):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    sharding = {"layer_cls": ["Qwen3DecoderLayer"], "mixed_precision": "bf16" if args.bf16 else None,
                "reshard_after_forward": True}
    try:
        from arl.distributed.fsdp import fully_shard_model
    except ImportError:  # the project's helper is missing: the same thing, inline
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        kw = {"mesh": mesh}
        if args.bf16:
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, **kw)
        return fully_shard(model, **kw)
    return fully_shard_model(model, sharding, mesh)


def main() -> int:
    args = parse_args()
    device_type = args.device
    if device_type == "cuda" and not torch.cuda.is_available():
        print("FAIL: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    rank, world = init_distributed(device_type)
    device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    from arl.modules.forward import forward_log_probs

    t0 = time.perf_counter()
    model = build_model(args, device)
    n_params = sum(p.numel() for p in model.parameters())
    if not args.no_fsdp:
        model = shard(model, args, device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=device.type == "cuda")
    build_s = time.perf_counter() - t0
    if rank == 0:
        print(f"model: Qwen3 {n_params / 1e9:.3f}B parameters (h{args.hidden} L{args.layers} heads {args.heads}/{args.kv_heads} "
              f"mlp {args.intermediate} vocab {args.vocab}), fsdp2={not args.no_fsdp} bf16={args.bf16} "
              f"act_ckpt={args.activation_checkpointing} world={world}, built in {build_s:.1f}s", flush=True)

    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    B, L = args.batch, args.seq
    position_ids = torch.arange(L, device=device).unsqueeze(0).expand(B, L)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if (args.bf16 and args.no_fsdp)
                else torch.autocast(device.type, enabled=False))

    def step() -> float:
        ids = torch.randint(0, args.vocab, (B, L), generator=gen).to(device)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": position_ids}
        opt.zero_grad(set_to_none=True)
        with autocast:
            logp, _ = forward_log_probs(model, batch, 1.0)
        loss = -logp[:, 1:].mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"non-finite loss {value}")
        return value

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps):
        t = time.perf_counter()
        loss = step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        if rank == 0:
            print(f"step {i + 1}/{args.steps}: loss {loss:.4f} ({times[-1] * 1000:.0f} ms)", flush=True)
    total = sum(times)
    tokens_per_s = B * L * args.steps * world / total
    peak_gib = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    if device.type != "cuda":
        import resource

        peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # process max RSS (KB -> GiB)
    # 6 N per token (forward + backward) plus attention, against the H200's dense bf16 peak
    flops_per_token = 6 * n_params + 12 * args.layers * args.heads * args.head_dim * L
    mfu = tokens_per_s * flops_per_token / 989e12 if device.type == "cuda" else float("nan")
    result = {
        "params_b": n_params / 1e9, "batch": B, "seq": L, "steps": args.steps, "world": world,
        "step_ms_median": 1000 * sorted(times)[len(times) // 2], "tokens_per_s": tokens_per_s,
        "peak_mem_gib": peak_gib, "mfu_vs_989tflops": mfu, "fsdp2": not args.no_fsdp, "bf16": args.bf16,
        "activation_checkpointing": args.activation_checkpointing,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
        print(f"tokens/s {tokens_per_s:,.0f} | step {result['step_ms_median']:.0f} ms | peak memory "
              f"{peak_gib:.2f} GiB ({'torch.cuda.max_memory_allocated' if device.type == 'cuda' else 'max RSS'})"
              + (f" | MFU {100 * mfu:.1f}%" if device.type == "cuda" else ""), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
