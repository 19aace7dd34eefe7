"""Acceptance on 200 generated games (slow): every game loads in the real engine, alfworld's expert
wins every one, a uniformly random admissible-action policy wins under 20 % within 50 steps."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arl.agent.parsing import parse_response
from arl.envs.alfworld.env import AlfWorldEnv
from arl.envs.alfworld.expert import expert_response
from arl.envs.alfworld.gen.games import generate_games
from arl.envs.alfworld.gen.tables import TASK_TYPES

N_GAMES = 200


@pytest.mark.slow
def test_200_generated_games_expert_wins_all_random_rarely():
    t0 = time.perf_counter()
    generate_games("train", range(N_GAMES))
    t_gen = time.perf_counter() - t0
    env = AlfWorldEnv(data_source="generated", num_games={"train": N_GAMES})
    types: Counter[str] = Counter()
    expert_steps = []
    t0 = time.perf_counter()
    for seed in range(N_GAMES):
        _, info = env.reset(seed)
        types[info["task_type"]] += 1
        for step in range(1, env.max_steps + 1):  # noqa: B007 - read after the loop
            parsed = parse_response(expert_response(env), info["admissible_actions"])
            assert parsed.valid
            result = env.step(parsed.action)
            info = result.info
            if result.done:
                break
        assert info["won"] and result.reward == 10.0, (seed, info["gamefile"])
        expert_steps.append(step)
    t_expert = time.perf_counter() - t0
    assert set(types) == set(TASK_TYPES) and min(types.values()) >= 33

    rng = random.Random(0)
    wins = 0
    t0 = time.perf_counter()
    for seed in range(N_GAMES):
        _, info = env.reset(seed)
        for _ in range(50):
            result = env.step(rng.choice(info["admissible_actions"]))
            info = result.info
            if result.done:
                break
        wins += int(info["won"])
    t_random = time.perf_counter() - t0
    env.close()
    print(
        f"\n{N_GAMES} games ({dict(types)}): generation/cache {t_gen:.1f}s, expert {t_expert:.1f}s "
        f"(mean {sum(expert_steps) / N_GAMES:.1f} steps, max {max(expert_steps)}), random {t_random:.1f}s, "
        f"random win rate {wins / N_GAMES:.1%}"
    )
    assert wins / N_GAMES < 0.2
