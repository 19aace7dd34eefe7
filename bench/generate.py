"""Benchmark of the transformers engine's ``generate``: the prefill of a batch of prompts and the
cost of one decoding step, per KV-cache layout (``rollout.hf_cache``: ``static`` or ``dynamic``).

Each case is one :class:`~arl.rollout.hf_engine.HFEngine` call on ``--batch`` random prompts of
about ``--prompt`` tokens (lengths spread over 10 % so the batch is left-padded, as the agent loop's
are), greedy, without stop strings or an end-of-sequence token, so every row decodes exactly the
asked number of tokens. The prefill is the time of a call with one new token; the step is
``(time(1 + N) - time(1)) / N``. The two layouts must produce the same tokens: the bench checks it.

Shapes of the CPU studies: Sokoban turn prompts are about 110 tokens with answers of 24; ALFWorld
prompts (admissible actions, notes, 12 past actions) about 500 with answers up to 128.

Run: ``PYTHONPATH=src python bench/generate.py [--prompt 520 --new 60 --batch 64 --model tiny]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
from rich.console import Console
from rich.table import Table

from arl.distributed.threads import configure_threads
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HF_CACHES, HFEngine


def load(model: str):
    """(model, tokenizer): ``tiny`` (the embedded default, random weights), else a folder or hub id."""
    from arl.models.loading import load_policy

    if model == "tiny":
        from arl.run.builders import tiny_model

        model = tiny_model()
    return load_policy(model)


def prompts_for(batch: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [length - (i * length // (10 * batch)) for i in range(batch)]
    return [torch.randint(5, vocab, (n,), generator=g).tolist() for n in lengths]


def timed_call(engine: HFEngine, prompts, new: int, repeats: int) -> tuple[float, list[list[int]]]:
    params = SamplingParams(temperature=0.0, max_new_tokens=new, stop=())
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = engine.generate(prompts, params)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), [g.token_ids for g in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny", help="tiny, a model folder or a hub id")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", default="110,520", help="prompt lengths (comma separated), one row of the table each")
    ap.add_argument("--new", type=int, default=60, help="decoding steps timed")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="auto", help="torch threads: auto (the cores shared among ARL processes) or N")
    args = ap.parse_args()
    configure_threads(args.threads)
    model, tok = load(args.model)
    model.generation_config.eos_token_id = None  # decode exactly --new tokens a row
    vocab = model.get_input_embeddings().weight.shape[0]
    table = Table(title=f"HFEngine.generate, {args.batch} prompts, greedy, {torch.get_num_threads()} thread(s)")
    for col in ("prompt tokens", "cache", "prefill s", "step ms", f"call of {args.new} tokens s", "same tokens"):
        table.add_column(col, justify="right")
    for length in (int(x) for x in args.prompt.split(",")):
        prompts = prompts_for(args.batch, length, vocab)
        tokens = {}
        for cache in HF_CACHES:
            engine = HFEngine(model, tok, max_batch_size=args.batch, cache=cache)
            engine.eos_ids = []
            timed_call(engine, prompts[:2], 2, 1)  # warm-up
            one, _ = timed_call(engine, prompts, 1, args.repeats)
            full, tokens[cache] = timed_call(engine, prompts, 1 + args.new, args.repeats)
            same = "-" if cache == HF_CACHES[0] else ("yes" if tokens[cache] == tokens[HF_CACHES[0]] else "NO")
            table.add_row(str(length), cache, f"{one:.2f}", f"{(full - one) / args.new * 1000:.1f}", f"{full:.2f}", same)
    Console().print(table)


if __name__ == "__main__":
    main()
