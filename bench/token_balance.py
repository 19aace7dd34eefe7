"""Benchmark of token-balanced deals over data-parallel ranks, on real rollout batches.

Each workload's behaviour-cloned start (a committed study's, with the env and rollout settings of
one of its runs, as in ``bench/rollout_schedule.py``) rolls out one real RL batch on the
transformers engine; its training rows are collated as the DataModule collates them. The batch is
then split as a run on R ranks splits it, R = 2, 4, 8: rank r takes its contiguous share of the
groups (``rank_share``), shuffles its rows and cuts them into the run's optimiser steps
(``rl.mini_batch_size`` or ``rl.mini_batches``). For every step the table compares the rank
holding the most tokens with the mean rank, as split (``rl.balance_tokens=false``) and as dealt by
:func:`arl.modules.balance.deal_rows` (the deal the module computes, ``rl.balance_tokens=true``):

* ``slowest / mean``: the heaviest rank's tokens over the mean rank's, averaged over the steps;
* ``step tokens``: the heaviest rank's tokens summed over the steps (every step waits for it), as
  dealt over as split: the share of the update's time a token-bound step keeps;
* ``passes``: the most micro-batch forward/backward passes a rank runs per step (every rank runs
  that many), at the run's ``rl.micro_token_budget``, as split and as dealt.

The rows themselves are moved by ``all_to_all_single`` (tests/unit/test_balance.py and the
2-rank update in tests/integration/test_scale_update.py run it); this bench counts tokens.

Run: ``python bench/token_balance.py [--workloads alfworld,sokoban,math] [--groups G --group-size N]``
(a few minutes on 2 cores; the rolled-out row lengths are cached in ``$ARL_CACHE/bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(ROOT / "src"))

import torch
from rich.console import Console
from rich.table import Table

from arl.datamodules.batches import micro_batches
from arl.datamodules.rollout_datamodule import rank_share
from arl.modules.balance import deal_rows, imbalance


def _cache() -> Path:
    return Path(os.environ.get("ARL_CACHE", Path.home() / ".cache" / "arl")) / "bench"


def rollout_rows(name: str, args) -> dict:
    """The row lengths of one real rollout batch, by group, and the run's update settings."""
    from omegaconf import OmegaConf
    from rollout_schedule import WORKLOADS, _workload

    run = ROOT / WORKLOADS[name][1]
    rl = OmegaConf.to_container(OmegaConf.load(run / ".hydra" / "config.yaml"), resolve=False)["rl"]
    key = f"token_balance_{name}_{args.groups}x{args.group_size}_seed{args.seed}.json"
    path = _cache() / key
    if path.exists():
        return json.loads(path.read_text())
    from arl.agent.loop import AgentLoop, LoopOptions, Task
    from arl.agent.samples import collate_episodes
    from arl.models.loading import load_policy
    from arl.rollout.hf_engine import HFEngine

    w = _workload(name, argparse.Namespace(groups=args.groups, group_size=args.group_size))
    model, tok = load_policy(str(w["model"]))
    model.eval()
    groups, group_size = w["episodes"]
    engine = HFEngine(model, tok, max_batch_size=groups * group_size)
    loop = AgentLoop(engine, tok, w["env"], w["env_kwargs"],
                     LoopOptions(history_window=w["history_window"], show_observations=w["show_observations"],
                                 max_turns=w["max_turns"], max_prompt_tokens=w["max_prompt_tokens"],
                                 sample_mode=w["sample_mode"], progress_every=None))
    episodes = loop.run([Task(g, args.seed + g) for g in range(groups)], group_size, w["params"])
    loop.close()
    tokens, _ = collate_episodes(episodes, w["sample_mode"], tok.pad_token_id or 0)
    lengths = tokens["attention_mask"].sum(-1).tolist()
    by_group: dict[int, list[int]] = {}
    for g, n in zip(tokens["group_id"].tolist(), lengths):
        by_group.setdefault(int(g), []).append(int(n))
    out = {"groups": [by_group[g] for g in sorted(by_group)], "sample_mode": w["sample_mode"],
           "mini_batch_size": rl.get("mini_batch_size"), "mini_batches": rl["mini_batches"],
           "micro_token_budget": rl["micro_token_budget"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def _passes(lengths: list[int], budget: int) -> int:
    if not lengths:
        return 0
    width = max(lengths)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    return sum(1 for _ in micro_batches({"attention_mask": mask}, torch.arange(len(lengths)), budget))


def simulate(rows: dict, world: int, seed: int) -> dict:
    """The run's split of the batch over ``world`` ranks, step by step, as split and as dealt."""
    groups = rows["groups"]
    n_rows = sum(map(len, groups))
    size = rows["mini_batch_size"]
    n_steps = max(1, -(-n_rows // int(size))) if size else int(rows["mini_batches"])
    per_rank = []
    for r in range(world):
        lo, hi = rank_share(len(groups), r, world)
        mine = [n for g in groups[lo:hi] for n in g]
        perm = torch.randperm(len(mine), generator=torch.Generator().manual_seed(seed + r)).tolist()
        per_rank.append([[mine[i] for i in chunk] for chunk in _split(perm, n_steps)])
    out = {"rows": n_rows, "steps": n_steps, "before": [], "after": [], "max_before": 0, "max_after": 0,
           "passes_before": [], "passes_after": []}
    budget = int(rows["micro_token_budget"])
    for step in range(n_steps):
        lengths = [per_rank[r][step] for r in range(world)]
        deal = deal_rows(lengths)
        dealt = [[] for _ in range(world)]
        for ls, ds in zip(deal.lengths, deal.dest):
            for n, d in zip(ls, ds):
                dealt[d].append(n)
        before, after = deal.loads_before(), deal.loads_after()
        out["before"].append(imbalance(before))
        out["after"].append(imbalance(after))
        out["max_before"] += max(before)
        out["max_after"] += max(after)
        out["passes_before"].append(max(_passes(ls, budget) for ls in lengths))
        out["passes_after"].append(max(_passes(ls, budget) for ls in dealt))
    return out


def _split(items: list[int], parts: int) -> list[list[int]]:
    """``torch.tensor_split``'s cut of ``items`` into ``parts`` nearly equal runs."""
    return [t.tolist() for t in torch.tensor_split(torch.tensor(items, dtype=torch.long), parts)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="alfworld,sokoban,math")
    ap.add_argument("--groups", type=int, default=16, help="tasks in the rollout batch")
    ap.add_argument("--group-size", type=int, default=8, help="episodes per task")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--seed", type=int, default=9000, help="task seeds seed, seed+1, ...; shuffles seed+rank")
    args = ap.parse_args()
    from arl.distributed.threads import configure_threads

    configure_threads("auto")
    console = Console(width=200)
    table = Table(title=f"token-balanced deals on real rollout batches ({args.groups} tasks x {args.group_size} episodes)")
    for col in ("workload", "rows", "row tokens p10/p50/p90", "ranks", "steps", "slowest / mean, split",
                "slowest / mean, dealt", "step tokens, dealt / split", "passes, split", "passes, dealt"):
        table.add_column(col, justify="right")
    for name in args.workloads.split(","):
        rows = rollout_rows(name, args)
        flat = sorted(n for g in rows["groups"] for n in g)
        pct = "/".join(str(flat[min(len(flat) - 1, int(q * len(flat)))]) for q in (0.1, 0.5, 0.9))
        for world in (int(x) for x in args.ranks.split(",")):
            s = simulate(rows, world, args.seed)
            table.add_row(name if world == 2 else "", str(s["rows"]) if world == 2 else "", pct if world == 2 else "",
                          str(world), str(s["steps"]), f"{statistics.mean(s['before']):.3f}",
                          f"{statistics.mean(s['after']):.3f}", f"{s['max_after'] / s['max_before']:.3f}",
                          f"{statistics.mean(s['passes_before']):.2f}", f"{statistics.mean(s['passes_after']):.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
