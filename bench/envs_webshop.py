"""Benchmark of the WebShop environment on this machine: one table.

For the generated catalogue (1000 products, 2000 goals) in both prompt styles:

- build ms: a fresh shop (catalogue and goals generated, BM25 index built); once per process;
- reset/s: ``WebShopEnv.reset`` (the shop is cached, so this is the episode start alone);
- search steps/s: ``step("search[<goal query>]")`` from the search page, the result cache
  cleared first (a group's G episodes that type the same query hit the cache after the first);
- click steps/s: ``step("click[...]")`` on random clickables of results, item and sub pages;
- expert: success rate (score 1), mean steps, ms per expert episode (answers included);
- recall@10: the goal's target among the first 10 results of its goal query / its instruction.

Then, when the shared data is present, a row for the stand-in catalogue of ``items_ins_v2_1000.json``
(415 products with WebShop's real attributes and instructions; recall of the synthetic goals) and
the share of human query words (``goal_query_map.json``) that the shopper's query keeps.

Run: ``PYTHONPATH=src python bench/envs_webshop.py [--episodes 500] [--steps 5000]``.
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

from arl.envs.webshop import WebShopEnv, expert_response, goal_query
from arl.envs.webshop.catalogue import generate_catalogue, load_attributes, products_from_attributes
from arl.envs.webshop.goals import generate_goals, load_goal_query_map, synthetic_goals
from arl.envs.webshop.search import SearchIndex, _import_bm25s, tokenize


def shared_webshop_dir() -> Path:
    root = os.environ.get("ARL_SHARED_DATA")
    data = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    return data / "webshop"


def _action(answer: str) -> str:
    return answer.split("<action>")[1].split("</action>")[0]


def build_ms() -> float:
    """A fresh shop: generation plus index (no cache; bm25s already imported)."""
    _import_bm25s()
    start = time.perf_counter()
    products = generate_catalogue(0, 1000)
    generate_goals(products, 0, 2)
    SearchIndex(products)
    return 1e3 * (time.perf_counter() - start)


def reset_rate(env: WebShopEnv, n: int) -> float:
    start = time.perf_counter()
    for seed in range(n):
        env.reset(seed)
    return n / (time.perf_counter() - start)


def search_rate(env: WebShopEnv, n: int) -> float:
    """Searches from the search page, each query new to the index's cache."""
    env.shop.index.clear_cache()
    spent = 0.0
    for seed in range(n):
        env.reset(seed)
        action = f"search[{goal_query(env.goal)}]"
        start = time.perf_counter()
        env.step(action)
        spent += time.perf_counter() - start
    return n / spent


def click_rate(env: WebShopEnv, n: int, seed: int = 0) -> float:
    """Random clicks; a search (untimed) whenever the walk is back on the search page."""
    rng = random.Random(seed)
    spent, clicks, episode = 0.0, 0, 0
    _, info = env.reset(episode)
    while clicks < n:
        if info["page"] == "search" or info["page"] == "done" or not info["admissible_actions"]:
            if info["page"] != "search":
                episode += 1
                _, info = env.reset(episode)
            result = env.step(f"search[{goal_query(env.goal)}]")
        else:
            action = rng.choice(info["admissible_actions"])
            start = time.perf_counter()
            result = env.step(action)
            spent += time.perf_counter() - start
            clicks += 1
        info = result.info
        if result.done:
            episode += 1
            _, info = env.reset(episode)
    return clicks / spent


def expert_stats(env: WebShopEnv, n: int) -> tuple[float, float, float]:
    wins, steps = 0, 0
    start = time.perf_counter()
    for seed in range(n):
        env.reset(seed)
        while True:
            result = env.step(_action(expert_response(env)))
            if result.done:
                break
        wins += result.info["won"]
        steps += env.steps
    return wins / n, steps / n, 1e3 * (time.perf_counter() - start) / n


def recall(index: SearchIndex, goals, k: int = 10) -> tuple[float, float]:
    by_query = sum(g.asin in index.search(goal_query(g), k) for g in goals) / len(goals)
    by_instruction = sum(g.asin in index.search(g.instruction_text, k) for g in goals) / len(goals)
    return by_query, by_instruction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=500, help="resets, searches and expert episodes per row")
    parser.add_argument("--steps", type=int, default=5000, help="timed random clicks per row")
    args = parser.parse_args()
    try:
        _import_bm25s()
    except ImportError as err:
        print(f"WebShop env: skipped ({err})")
        return

    header = (
        f"{'setting':34} {'build ms':>9} {'reset/s':>8} {'search/s':>9} {'click/s':>8} {'expert':>7} "
        f"{'steps':>6} {'ms/ep':>6} {'R@10 q':>7} {'R@10 ins':>8}"
    )
    print(f"WebShop env ({args.episodes} episodes, {args.steps} random clicks per row)")
    print(header)
    print("-" * len(header))
    build = build_ms()
    for style in ("full", "compact"):
        env = WebShopEnv(prompt_style=style)
        env.shop.index  # noqa: B018 - built before timing
        name = f"generated 1000 products, {style}"
        r_q, r_i = recall(env.shop.index, env.shop.goals)
        won, steps, ms = expert_stats(env, args.episodes)
        print(
            f"{name:34} {build:9.0f} {reset_rate(env, args.episodes):8.0f} {search_rate(env, args.episodes):9.0f} "
            f"{click_rate(env, args.steps):8.0f} {won:7.1%} {steps:6.2f} {ms:6.2f} {r_q:7.1%} {r_i:8.1%}"
        )

    data = shared_webshop_dir()
    if (data / "items_ins_v2_1000.json").exists():
        attributes = load_attributes(data / "items_ins_v2_1000.json")
        start = time.perf_counter()
        products = products_from_attributes(attributes)
        goals = synthetic_goals(products, attributes)
        index = SearchIndex(products)
        ms = 1e3 * (time.perf_counter() - start)
        r_q, r_i = recall(index, goals)
        name = f"items_ins_v2_1000 stand-in ({len(products)})"
        print(f"{name:34} {ms:9.0f} {'-':>8} {'-':>9} {'-':>8} {'-':>7} {'-':>6} {'-':>6} {r_q:7.1%} {r_i:8.1%}")
    else:
        print(f"(items_ins_v2 row skipped: {data / 'items_ins_v2_1000.json'} not found)")
    if (data / "goal_query_map.json").exists():
        shares = []
        for instruction, typed in load_goal_query_map(data / "goal_query_map.json").items():
            mine = set(tokenize(goal_query(instruction)))
            shares += [len(set(tokenize(q)) & mine) / len(set(tokenize(q))) for q in typed if tokenize(q)]
        print(f"goal_query_map.json: the shopper's query keeps {sum(shares) / len(shares):.1%} of the words of "
              f"{len(shares)} human queries")


if __name__ == "__main__":
    main()
