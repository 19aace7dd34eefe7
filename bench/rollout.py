"""Benchmark of the rollout path: agent-loop overhead over the raw engine, and env throughput.

Table 1 (``loop vs engine``): the agent loop rolls out ``--groups`` x ``--group-size`` Sokoban
episodes with the tiny model, greedy, recording every engine call it makes. The very same batched
prompts are then replayed through the bare engine. Greedy decoding makes both produce the same
tokens, so the difference is the loop's own work: prompt rendering and tokenisation, parsing,
environment steps, bookkeeping. Overhead = (loop seconds - engine seconds) / engine seconds.

Table 2 (``env pool``): environment steps per second through :class:`~arl.envs.pool.EnvPool`,
per environment and per worker count, with a scripted action sequence (no model): the cost of
the environments and of the worker round trips alone.

Run: ``PYTHONPATH=src python bench/rollout.py [--groups 8 --group-size 8 --repeats 3]``.
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

from rich.console import Console
from rich.table import Table

from arl.agent.loop import AgentLoop, LoopOptions, Task
from arl.distributed.threads import configure_threads
from arl.envs.pool import EnvPool
from arl.envs.registry import env_names
from arl.models.loading import load_policy
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine
from arl.run.builders import tiny_model

SOKOBAN = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 10, "prompt_style": "compact"}


class RecordingEngine:
    """Forwards to an engine and keeps every batch of prompts it was asked for."""

    def __init__(self, engine):
        self.engine = engine
        self.calls: list[list[list[int]]] = []

    def generate(self, prompts, params, seeds=None):
        self.calls.append([list(p) for p in prompts])
        return self.engine.generate(prompts, params, seeds=seeds)

    def sync(self, policy):
        self.engine.sync(policy)


def loop_vs_engine(model, tok, groups: int, group_size: int, mode: str, repeats: int, max_new_tokens: int) -> dict:
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    engine = HFEngine(model, tok)
    recorder = RecordingEngine(engine)
    loop = AgentLoop(recorder, tok, "sokoban", SOKOBAN, LoopOptions(history_window=2, sample_mode=mode))
    tasks = [Task(g, 1000 + g) for g in range(groups)]
    loop.run(tasks[:1], 1, params)  # warm-up
    loop_s, engine_s, tokens, turns = [], [], 0, 0
    for _ in range(repeats):
        recorder.calls.clear()
        t0 = time.perf_counter()
        episodes = loop.run(tasks, group_size, params)
        loop_s.append(time.perf_counter() - t0)
        tokens = sum(len(t.response_ids) for e in episodes for t in e.turns)
        turns = sum(e.num_turns for e in episodes)
        t0 = time.perf_counter()
        replay_tokens = sum(len(g.token_ids) for batch in recorder.calls for g in engine.generate(batch, params))
        engine_s.append(time.perf_counter() - t0)
        assert replay_tokens == tokens, (replay_tokens, tokens)
    loop.close()
    lt, et = statistics.median(loop_s), statistics.median(engine_s)
    return {"mode": mode, "episodes": groups * group_size, "turns": turns, "tokens": tokens, "calls": len(recorder.calls),
            "loop_s": lt, "engine_s": et, "loop_tok_s": tokens / lt, "engine_tok_s": tokens / et, "overhead": (lt - et) / et}


def pool_throughput(env: str, kwargs: dict, n_workers: int, slots: int, steps: int, actions: list[str]) -> tuple[float, float]:
    """(env steps/s, reset ms per slot) of ``slots`` envs stepped ``steps`` times in lockstep."""
    pool = EnvPool(env, kwargs, n_workers=n_workers)
    try:
        pool.reset(list(range(slots)))  # start the workers
        t0 = time.perf_counter()
        starts = pool.reset([100 + i for i in range(slots)])
        reset_ms = (time.perf_counter() - t0) * 1000 / slots
        live = [i for i, (_, _, err) in enumerate(starts) if not err]
        done_steps, seed, t0 = 0, 200, time.perf_counter()
        for k in range(steps):
            if not live:  # every episode ended: start new ones (not timed as steps)
                t_r = time.perf_counter()
                pool.reset([seed + i for i in range(slots)])
                t0 += time.perf_counter() - t_r
                seed += slots
                live = list(range(slots))
            out = pool.step({s: actions[k % len(actions)] for s in live})
            done_steps += len(out)
            live = [s for s, (r, err) in out.items() if not (err or r.done)]
        return done_steps / (time.perf_counter() - t0), reset_ms
    finally:
        pool.close()


ENV_BENCH = {  # env -> (kwargs, scripted actions); envs missing from the registry are skipped
    "sokoban": (SOKOBAN, ["up", "left", "down", "right"]),
    "math_tool": ({}, ["```python\nprint(2 + 3)\n```"]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--workers", default="0,1,2,4")
    ap.add_argument("--threads", default="auto", help="torch threads: auto (the cores shared among ARL processes) or N")
    args = ap.parse_args()
    configure_threads(args.threads)
    console = Console()
    model, tok = load_policy(tiny_model())
    model.eval()

    table = Table(title=f"agent loop vs raw engine (tiny model, Sokoban, greedy, {args.groups}x{args.group_size} episodes, median of {args.repeats})")
    for col in ("mode", "turns", "tokens", "engine calls", "loop s", "engine s", "loop tok/s", "engine tok/s", "overhead"):
        table.add_column(col, justify="right")
    for mode in ("turn", "trajectory"):
        r = loop_vs_engine(model, tok, args.groups, args.group_size, mode, args.repeats, args.max_new_tokens)
        table.add_row(r["mode"], str(r["turns"]), str(r["tokens"]), str(r["calls"]), f"{r['loop_s']:.2f}", f"{r['engine_s']:.2f}",
                      f"{r['loop_tok_s']:.0f}", f"{r['engine_tok_s']:.0f}", f"{100 * r['overhead']:+.1f}%")
    console.print(table)

    table = Table(title=f"EnvPool steps/s ({args.slots} slots in lockstep, scripted actions, no model)")
    table.add_column("env")
    workers = [int(w) for w in args.workers.split(",")]
    for w in workers:
        table.add_column(f"{w} workers" if w else "in-process", justify="right")
    table.add_column("reset ms/slot (in-process)", justify="right")
    for env, (kwargs, actions) in ENV_BENCH.items():
        if env not in env_names():
            continue
        cells, reset_ms = [], 0.0
        for w in workers:
            sps, ms = pool_throughput(env, kwargs, w, args.slots, args.steps, actions)
            cells.append(f"{sps:,.0f}")
            reset_ms = ms if w == 0 else reset_ms
        table.add_row(env, *cells, f"{reset_ms:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
