"""Benchmark of the trainer: AgenticRLModule's update path against a bare forward-backward loop.

The batches are real: the tiny-architecture policy rolls out Sokoban episodes (``AgentLoop``,
sampled), and ``build_samples`` / ``collate_tokens`` turn them into the token samples the module
trains on. Then, on the very same episodes:

* **trainer**: a Lightning ``Trainer`` fits ``AgenticRLModule`` (algo config composed from
  ``configs/algo/<algo>.yaml`` over ``base.yaml``) on ``--iters`` identical rollout batches.
  ``update s`` is the module's own ``perf/update_s`` (PPO mini-batches: micro-batch forward,
  policy loss, KL, entropy, IS diagnostics, backward, clipping, optimiser step); ``score s`` is
  ``perf/logprob_s`` (the no-grad old/reference log-probs). Best of ``--iters`` iterations after
  a warm-up (the minimum is the least disturbed by other load on a shared machine).
* **bare**: the same micro-batches (same ``micro_token_budget``, same mini-batch split), each
  ``forward_log_probs`` + a REINFORCE-style masked loss + ``backward``, one ``AdamW`` step per
  mini-batch. Nothing else.

``overhead`` = (trainer update s - bare s) / bare s: what the module adds over the bare
forward-backward work. Peak memory is the process RSS high-water mark above the level before
each phase (sampled every 5 ms with psutil, else ``ru_maxrss``) on CPU, and
``torch.cuda.max_memory_allocated`` on GPU.

Run: ``PYTHONPATH=src python bench/train.py [--hidden 128 --layers 4 --device cpu]``
(default: the embedded tiny model's size, one row; about a minute on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import warnings
from pathlib import Path

try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

from arl.agent.loop import AgentLoop, LoopOptions, Task
from arl.agent.samples import build_samples, collate_tokens
from arl.datamodules.batches import micro_batches
from arl.models.tiny import TinyConfig, build_model
from arl.modules.forward import forward_log_probs
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine
from arl.run.builders import tiny_model

ROOT = Path(__file__).resolve().parents[1]
SOKOBAN = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 10, "prompt_style": "compact"}


# --------------------------------------------------------------------------- memory
def _malloc_trim() -> None:
    """Return freed heap pages to the OS (glibc), so each phase's RSS starts from what it holds."""
    import gc

    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMemory:
    """Peak memory above the level at ``__enter__``, in MB (RSS on CPU, allocator on CUDA)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb = 0.0

    def __enter__(self):
        _malloc_trim()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        self._stop = threading.Event()
        try:
            import psutil

            proc = psutil.Process()
            self._base = proc.memory_info().rss
            self._peak = self._base

            def sample():
                while not self._stop.wait(0.005):
                    self._peak = max(self._peak, proc.memory_info().rss)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        except ImportError:  # ru_maxrss: a lifetime high-water mark (KB on Linux)
            import resource

            self._thread = None
            self._base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak_mb = (self._peak - self._base) / 2**20
        else:
            import resource

            self.peak_mb = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self._base, 0) / 2**20


# --------------------------------------------------------------------------- set-up
def algo_config(name: str) -> dict:
    """``configs/algo/<name>.yaml`` merged over ``base.yaml`` (what Hydra's defaults list does)."""
    base = OmegaConf.load(ROOT / "configs" / "algo" / "base.yaml")
    over = OmegaConf.load(ROOT / "configs" / "algo" / f"{name}.yaml")
    over.pop("defaults", None)
    return OmegaConf.to_container(OmegaConf.merge(base, over), resolve=True)


def make_policy(hidden: int, layers: int, tokenizer):
    """A Qwen3 of the tiny recipe at the given width and depth (head_dim 32, MLP 4x)."""
    heads = max(hidden // 32, 1)
    cfg = TinyConfig(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), head_dim=32)
    return build_model(cfg, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)


def rollout_episodes(model, tokenizer, groups: int, group_size: int, max_new_tokens: int, seed: int = 0):
    torch.manual_seed(seed)
    loop = AgentLoop(HFEngine(model, tokenizer), tokenizer, "sokoban", SOKOBAN, LoopOptions(history_window=1))
    try:
        return loop.run([Task(g, 5000 + g) for g in range(groups)], group_size,
                        SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens))
    finally:
        loop.close()


# --------------------------------------------------------------------------- the two paths
def run_trainer(policy, tokenizer, episodes, algo: dict, args, device: torch.device) -> dict:
    import lightning as L

    from arl.agent.samples import collate_episodes
    from arl.datamodules.batches import RolloutBatch
    from arl.modules.rl_module import AgenticRLModule, UpdateSettings

    reference = None
    if algo["kl"]["coef"] > 0:
        import copy

        reference = copy.deepcopy(policy)
    module = AgenticRLModule(
        policy, reference, tokenizer, algo,
        lambda params: torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0),
        UpdateSettings(ppo_epochs=1, mini_batches=args.mini_batches, micro_token_budget=args.micro_tokens,
                       grad_clip=1.0, temperature=1.0),
    )
    per_iter: list[dict] = []

    class Keep(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            per_iter.append(dict(pl_module.last_metrics))

    tokens, turns = collate_episodes(episodes, "turn", tokenizer.pad_token_id)
    batches = [RolloutBatch(tokens, turns, iteration=i) for i in range(args.iters + 1)]
    loader = torch.utils.data.DataLoader(batches, batch_size=None, collate_fn=lambda b: b)
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, max_epochs=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_val_batches=0, callbacks=[Keep()],
        precision="bf16-mixed" if args.bf16 else "32-true",
    )
    with warnings.catch_warnings(), PeakMemory(device) as mem:
        warnings.simplefilter("ignore")
        trainer.fit(module, train_dataloaders=loader)
    steady = per_iter[1:] or per_iter  # the first iteration warms up
    return {
        "update_s": min(m["perf/update_s"] for m in steady),
        "score_s": min(m["perf/logprob_s"] for m in steady),
        "peak_mb": mem.peak_mb,
    }


def run_bare(policy, data: dict, args, device: torch.device) -> dict:
    """forward_log_probs + masked REINFORCE loss + backward, one AdamW step per mini-batch."""
    policy.train()
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-5, weight_decay=0.0)
    data = {k: v.to(device) for k, v in data.items()}
    n = data["input_ids"].shape[0]
    adv = torch.randn(n, 1, device=device).expand_as(data["response_mask"]) * data["response_mask"]
    data["advantages"] = adv
    times = []
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if args.bf16 else torch.autocast(device.type, enabled=False)
    with PeakMemory(device) as mem:
        for it in range(args.iters + 1):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            perm = torch.randperm(n, device=device)
            for mb_idx in perm.chunk(min(args.mini_batches, n)):
                tokens = data["response_mask"][mb_idx].sum().clamp_min(1)
                opt.zero_grad(set_to_none=True)
                for micro in micro_batches(data, mb_idx, args.micro_tokens):
                    with autocast:
                        logp, _ = forward_log_probs(policy, micro, 1.0)
                    loss = -(logp * micro["advantages"] * micro["response_mask"]).sum() / tokens
                    loss.backward()
                opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if it > 0:
                times.append(time.perf_counter() - t0)
    return {"bare_s": min(times), "peak_mb": mem.peak_mb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", default="128", help="comma-separated hidden sizes, one table row each (e.g. 128,256)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--algo", default="sampo", help="configs/algo/<name>.yaml")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per path (after one warm-up)")
    ap.add_argument("--mini-batches", type=int, default=2)
    ap.add_argument("--micro-tokens", type=int, default=4096, help="padded tokens per micro-batch")
    ap.add_argument("--threads", default="auto",
                    help="torch CPU threads: auto (the cores shared among the ARL processes on the machine, as "
                         "train.py) or N; oversubscribed OpenMP threads made forward passes up to 20x slower (docs/models.md)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (trainer: precision=bf16-mixed)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        from arl.distributed.threads import configure_threads

        configure_threads(args.threads)
    console = Console(width=max(Console().width, 180))

    from transformers import AutoTokenizer

    from arl.models.loading import check_tokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model())
    check_tokenizer(tok)
    algo = algo_config(args.algo)
    algo["filter"]["name"] = "none"  # the batch is fixed: no dynamic sampling

    table = Table(title=(
        f"trainer (AgenticRLModule, algo={args.algo}, Lightning) vs bare forward-backward, {args.device}, "
        f"{args.groups}x{args.group_size} Sokoban episodes, {args.mini_batches} optimiser steps/iteration, "
        f"best of {args.iters}, {torch.get_num_threads()} threads"
    ))
    for col in ("model", "params", "samples", "tokens", "trainer s", "score s", "bare s", "trainer tok/s",
                "bare tok/s", "overhead", "peak MB trainer", "peak MB bare"):
        table.add_column(col, justify="right")
    for hidden in (int(h) for h in str(args.hidden).split(",")):
        policy = make_policy(hidden, args.layers, tok)
        t0 = time.perf_counter()
        episodes = rollout_episodes(policy, tok, args.groups, args.group_size, args.max_new_tokens)
        console.log(f"h{hidden}: rollout {time.perf_counter() - t0:.1f}s")
        samples, _ = build_samples(episodes, "turn")
        data = collate_tokens(samples, tok.pad_token_id)
        tokens = int(data["attention_mask"].sum())
        state = {k: v.clone() for k, v in policy.state_dict().items()}
        t0 = time.perf_counter()
        tr = run_trainer(policy.to(device), tok, episodes, algo, args, device)
        console.log(f"h{hidden}: trainer {time.perf_counter() - t0:.1f}s")
        policy.load_state_dict(state)  # the bare loop starts from the same weights
        bare = run_bare(policy.to(device), data, args, device)
        n_params = sum(p.numel() for p in policy.parameters())
        table.add_row(
            f"qwen3 h{hidden} L{args.layers}", f"{n_params / 1e6:.1f}M", str(len(samples)), f"{tokens:,}",
            f"{tr['update_s']:.2f}", f"{tr['score_s']:.2f}", f"{bare['bare_s']:.2f}",
            f"{tokens / tr['update_s']:,.0f}", f"{tokens / bare['bare_s']:,.0f}",
            f"{100 * (tr['update_s'] - bare['bare_s']) / bare['bare_s']:+.1f}%",
            f"{tr['peak_mb']:.0f}", f"{bare['peak_mb']:.0f}",
        )
        del policy
    console.print(table)
    console.print(
        "trainer s: the module's update (perf/update_s); score s: its no-grad old/reference log-probs "
        "(perf/logprob_s), not in the overhead; tokens: non-padding tokens of the batch (prompt + response); "
        "peak MB: RSS (CPU) or allocated (GPU) high-water mark above the level before the phase: activations, "
        "gradients, AdamW state; the trainer's also covers its scoring passes (the reference copy is made before)."
    )


if __name__ == "__main__":
    main()
