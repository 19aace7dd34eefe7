"""Benchmark of the Sokoban environment on this machine: one table.

For a few generated room settings and for Boxoban (medium/valid/000.txt, when present):

- env steps/s: ``SokobanEnv.step`` with uniformly random actions (resets not timed);
- reset ms: ``SokobanEnv.reset`` (generation, plus the solver check of ``fit_max_steps``);
- gen ms/level: ``generate_level`` alone;
- solve ms/level: ``solve`` (auto: BFS for small rooms, A* otherwise), mean and max, with the
  solve rate within the default budget and the mean plan length.

Run: ``PYTHONPATH=src python bench/envs_sokoban.py [--levels 200] [--steps 20000]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from arl.envs.sokoban import SokobanEnv, generate_level, load_boxoban, solve
from arl.envs.sokoban.level import ACTIONS
from arl.envs.sokoban.solver import DEFAULT_MAX_STATES

SETTINGS = {
    "6x6, 1 box (default)": {},
    "6x6, 1 box, 3 walls": {"internal_walls": 3},
    "7x7, 2 boxes": {"dim_room": (7, 7), "num_boxes": 2},
    "8x8, 3 boxes, 4 walls, depth 60": {
        "dim_room": (8, 8), "num_boxes": 3, "internal_walls": 4, "search_depth": 60
    },
}


def boxoban_file() -> Path:
    root = os.environ.get("ARL_SHARED_DATA")
    data = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    return data / "sokoban" / "boxoban" / "medium" / "valid" / "000.txt"


def steps_per_second(env: SokobanEnv, num_steps: int, seed: int = 0) -> tuple[float, float]:
    """(env steps per second, mean reset ms) under random actions."""
    rng = random.Random(seed)
    step_time = reset_time = 0.0
    resets = 0
    episode = 0
    start = time.perf_counter()
    env.reset(episode)
    reset_time += time.perf_counter() - start
    resets += 1
    for _ in range(num_steps):
        action = rng.choice(ACTIONS)
        start = time.perf_counter()
        result = env.step(action)
        step_time += time.perf_counter() - start
        if result.done:
            episode += 1
            start = time.perf_counter()
            env.reset(episode)
            reset_time += time.perf_counter() - start
            resets += 1
    return num_steps / step_time, 1e3 * reset_time / resets


def solver_stats(levels) -> tuple[float, float, float, float]:
    """(mean ms, max ms, solve rate, mean plan length) of ``solve`` over ``levels``."""
    times, lengths = [], []
    for level in levels:
        start = time.perf_counter()
        plan = solve(level)
        times.append(1e3 * (time.perf_counter() - start))
        if plan is not None:
            lengths.append(len(plan))
    mean_len = sum(lengths) / len(lengths) if lengths else float("nan")
    return sum(times) / len(times), max(times), len(lengths) / len(levels), mean_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", type=int, default=200, help="levels per setting")
    parser.add_argument("--steps", type=int, default=20_000, help="random env steps per setting")
    args = parser.parse_args()

    header = (
        f"{'setting':34} {'steps/s':>9} {'reset ms':>9} {'gen ms':>8} {'solve ms':>9} "
        f"{'max ms':>8} {'solved':>7} {'plan len':>8}"
    )
    print(
        f"Sokoban env (budget {DEFAULT_MAX_STATES} states per level, {args.levels} levels, "
        f"{args.steps} random steps per row)"
    )
    print(header)
    print("-" * len(header))
    for name, cfg in SETTINGS.items():
        sps, reset_ms = steps_per_second(SokobanEnv(max_steps=100, **cfg), args.steps)
        start = time.perf_counter()
        levels = [generate_level(seed, **cfg) for seed in range(args.levels)]
        gen_ms = 1e3 * (time.perf_counter() - start) / args.levels
        mean_ms, max_ms, rate, plan_len = solver_stats(levels)
        print(
            f"{name:34} {sps:9.0f} {reset_ms:9.2f} {gen_ms:8.2f} {mean_ms:9.2f} {max_ms:8.1f} "
            f"{rate:7.1%} {plan_len:8.1f}"
        )

    path = boxoban_file()
    if path.exists():
        env = SokobanEnv(boxoban_path=str(path), max_steps=100)
        sps, reset_ms = steps_per_second(env, args.steps)
        levels = load_boxoban(path)[: args.levels]
        mean_ms, max_ms, rate, plan_len = solver_stats(levels)
        name = f"boxoban medium/valid/000 (first {len(levels)})"
        print(
            f"{name:34} {sps:9.0f} {reset_ms:9.2f} {'-':>8} {mean_ms:9.2f} {max_ms:8.1f} "
            f"{rate:7.1%} {plan_len:8.1f}"
        )
    else:
        print(f"(Boxoban row skipped: {path} not found)")


if __name__ == "__main__":
    main()
