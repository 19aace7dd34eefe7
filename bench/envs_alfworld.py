"""Benchmark of the ALFWorld environment (real alfworld engine) on this machine: one table.

On ``--games`` generated games (task types cycling, written into a fresh temporary cache unless
``--cache`` names one):

- generation s/game: household + task + game files + the check that alfworld's handcoded expert
  wins in the real engine (the expert's steps per game beside it);
- reset ms: a game never translated before (fast-downward translation, TextWorld load, reset);
  a game translated before (translation read from the disk cache); the same game again;
- env steps/s: ``AlfWorldEnv.step`` under a random admissible-action policy and under the expert
  (its command computation included), with the engine speed-ups, and random without them;
- win rates within 50 steps: the expert, the random policy.

Run: ``PYTHONPATH=src python bench/envs_alfworld.py [--games 24] [--random-games 24]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _row(name: str, value: str) -> None:
    print(f"{name:52} {value:>16}")


def _random_episode(env, seed: int, rng: random.Random) -> tuple[int, float, bool]:
    """(steps, seconds in step, won) of one random-policy episode."""
    _, info = env.reset(seed)
    steps, spent = 0, 0.0
    while True:
        action = rng.choice(info["admissible_actions"])
        t = time.perf_counter()
        result = env.step(action)
        spent += time.perf_counter() - t
        steps += 1
        info = result.info
        if result.done:
            return steps, spent, bool(info["won"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", type=int, default=24, help="generated games (timed from scratch)")
    parser.add_argument("--random-games", type=int, default=24, help="games played by the random policy")
    parser.add_argument("--cache", default=None, help="an ARL cache folder to reuse (default: a fresh one)")
    args = parser.parse_args()

    os.environ["ARL_CACHE"] = args.cache or tempfile.mkdtemp(prefix="arl-bench-alfworld-")
    from arl.envs.alfworld.engine import alfworld_available

    if not alfworld_available():
        print("ALFWorld benchmark skipped: the alfworld extra is not installed (pip install 'arl[alfworld]')")
        return
    import json

    from arl.agent.parsing import parse_response
    from arl.envs.alfworld import engine as engine_mod
    from arl.envs.alfworld.env import AlfWorldEnv
    from arl.envs.alfworld.expert import expert_response
    from arl.envs.alfworld.gen.games import GeneratorConfig, _index_file, ensure_game, generated_root

    n = args.games
    print(f"ALFWorld env, real alfworld engine ({n} generated games, cache {os.environ['ARL_CACHE']})")
    header = f"{'metric':52} {'value':>16}"
    print(header)
    print("-" * len(header))

    t0 = time.perf_counter()
    paths = [ensure_game("train", i) for i in range(n)]
    gen_s = (time.perf_counter() - t0) / n
    root = generated_root(GeneratorConfig())
    walk = [json.loads(_index_file(root, "train", i).read_text())["expert_steps"] for i in range(n)]
    _row("generation s/game (incl. expert check in engine)", f"{gen_s:.2f}")
    _row("  expert steps per game, mean / max", f"{sum(walk) / n:.1f} / {max(walk)}")

    env = AlfWorldEnv(data_source="generated", num_games={"train": n})
    # reset of a game never translated: no memory memo, no disk cache
    os.environ["ARL_ALFWORLD_SAS_CACHE"] = "0"
    engine_mod._SAS_MEMO.clear()
    engine_mod._FREE.clear()
    t0 = time.perf_counter()
    env.reset(0)
    new_ms = 1e3 * (time.perf_counter() - t0)
    os.environ.pop("ARL_ALFWORLD_SAS_CACHE")
    env.close()
    engine_mod._SAS_MEMO.clear()
    engine_mod._FREE.clear()
    times = []
    for seed in range(1, min(n, 9)):
        t0 = time.perf_counter()
        env.reset(seed)
        times.append(time.perf_counter() - t0)
        env.close()
        engine_mod._FREE.clear()
    disk_ms = 1e3 * sum(times) / len(times)
    env.reset(1)
    t0 = time.perf_counter()
    for _ in range(5):
        env.reset(1)
    same_ms = 1e3 * (time.perf_counter() - t0) / 5
    _row("reset ms, game never translated", f"{new_ms:.0f}")
    _row("reset ms, translation from the disk cache", f"{disk_ms:.0f}")
    _row("reset ms, same game again", f"{same_ms:.0f}")

    rng = random.Random(0)
    games = min(args.random_games, n)
    steps = spent = wins = 0
    for seed in range(games):
        s, t, won = _random_episode(env, seed, rng)
        steps, spent, wins = steps + s, spent + t, wins + int(won)
    _row("env steps/s, random policy", f"{steps / spent:.1f}")

    e_steps = e_spent = e_wins = 0
    for seed in range(n):
        _, info = env.reset(seed)
        while True:
            t = time.perf_counter()
            parsed = parse_response(expert_response(env), info["admissible_actions"])
            result = env.step(parsed.action)
            e_spent += time.perf_counter() - t
            e_steps += 1
            info = result.info
            if result.done:
                e_wins += int(info["won"])
                break
    _row("env steps/s, expert (its command included)", f"{e_steps / e_spent:.1f}")

    engine_mod.uninstall_speedups()
    plain = AlfWorldEnv(data_source="generated", num_games={"train": n}, speedups=False)
    p_steps = p_spent = 0
    for seed in range(min(2, n)):
        _, info = plain.reset(seed)
        for _ in range(15):
            t = time.perf_counter()
            result = plain.step(rng.choice(info["admissible_actions"]))
            p_spent += time.perf_counter() - t
            p_steps += 1
            info = result.info
    plain.close()
    engine_mod.install_speedups()
    _row("env steps/s, random policy, speed-ups off", f"{p_steps / p_spent:.1f}")
    _row("expert win rate", f"{e_wins / n:.1%}")
    _row(f"random policy win rate (50 steps, {games} games)", f"{wins / games:.1%}")
    env.close()
    del paths


if __name__ == "__main__":
    main()
