"""Benchmark of arl.algos on this machine: one table of milliseconds per call.

- each policy loss on a (B=256, T=1024) batch, forward (loss + token-mean aggregation) and
  forward + backward;
- the full ``actor_loss`` (SAMPO settings: gspo + KL k3 + entropy);
- each advantage estimator on N=20,000 turn samples (groups of 8 episodes x ~10 turns, shuffled,
  anchors with repeats), and the dapo filter on the episodes.

Run: ``python bench/algos.py [--repeats 5] [--check]``. With ``--check`` the script
exits non-zero if the GiGPO advantage of 20,000 turn samples takes 50 ms or more (median).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

try:
    from arl.algos import advantages, aggregation, filters, objective, policy_losses, schema
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from arl.algos import advantages, aggregation, filters, objective, policy_losses, schema

GIGPO_BUDGET_MS = 50.0


def time_ms(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median wall-clock milliseconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def loss_batch(batch: int, length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random (B, T) batch with ragged response lengths and per-sample advantages."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=g) * 3.0
    lengths = torch.randint(length // 4, length + 1, (batch,), generator=g)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return {
        "log_prob": old + 0.05 * torch.randn(batch, length, generator=g),
        "old_log_prob": old,
        "ref_log_prob": old + 0.05 * torch.randn(batch, length, generator=g),
        "advantages": torch.randn(batch, 1, generator=g).expand(batch, length),
        "response_mask": mask,
        "entropy": torch.rand(batch, length, generator=g),
    }


def turn_batch(num_samples: int, group_size: int = 8, mean_turns: int = 10, seed: int = 0) -> dict[str, torch.Tensor]:
    """About ``num_samples`` shuffled turn samples: groups of ``group_size`` episodes of 5..15 turns.

    Anchor states repeat across the episodes of a group (a few states per turn position).
    """
    g = torch.Generator().manual_seed(seed)
    num_groups = max(1, num_samples // (group_size * mean_turns))
    num_episodes = num_groups * group_size
    lengths = torch.randint(mean_turns // 2, mean_turns + mean_turns // 2 + 1, (num_episodes,), generator=g)
    episode = torch.repeat_interleave(torch.arange(num_episodes), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    turn = torch.arange(episode.numel()) - starts[episode]
    group = episode // group_size
    state = torch.randint(0, 3, (episode.numel(),), generator=g)
    anchor = (group * 1_000_003 + turn * 101 + state) * 0x9E3779B97F4A7C15 % (2**62)
    rewards = torch.where(torch.rand(episode.numel(), generator=g) < 0.1, 1.0, -0.1)
    valid = torch.rand(episode.numel(), generator=g) > 0.05
    order = torch.randperm(episode.numel(), generator=g)
    return {
        "step_rewards": rewards[order],
        "episode_ids": episode[order],
        "turn_idx": turn[order],
        "group_ids": group[order],
        "anchor_keys": anchor[order],
        "valid": valid[order],
    }


def bench_losses(batch: int, length: int, repeats: int) -> list[tuple[str, str, float, float | None]]:
    data = loss_batch(batch, length)
    cfg = schema.LossConfig()
    rows: list[tuple[str, str, float, float | None]] = []
    for name in policy_losses.REGISTRY.names():
        fn = policy_losses.get(name)

        def forward(requires_grad: bool, fn=fn) -> torch.Tensor:
            log_prob = data["log_prob"].clone().requires_grad_(requires_grad)
            loss_mat, _ = fn(
                log_prob=log_prob,
                old_log_prob=data["old_log_prob"],
                advantages=data["advantages"],
                response_mask=data["response_mask"],
                cfg=cfg,
            )
            return aggregation.agg_loss(loss_mat, data["response_mask"], "token-mean", horizon=None)

        with torch.no_grad():
            fwd = time_ms(lambda: forward(False), repeats)
        both = time_ms(lambda: forward(True).backward(), repeats)
        rows.append((f"loss/{name}", f"B={batch} T={length}", fwd, both))

    sampo = schema.replace(
        schema.AlgoConfig(),
        **{"loss.name": "gspo", "loss.clip_ratio_low": 3e-3, "loss.clip_ratio_high": 4e-3, "seq_mask.enabled": True},
    )  # the schema's KL (0.01) and entropy (0.001)

    def actor(requires_grad: bool) -> torch.Tensor:
        log_prob = data["log_prob"].clone().requires_grad_(requires_grad)
        batch = objective.TokenBatch(
            log_prob=log_prob,
            old_log_prob=data["old_log_prob"],
            advantages=data["advantages"],
            response_mask=data["response_mask"],
            ref_log_prob=data["ref_log_prob"],
            entropy=data["entropy"],
        )
        loss, _ = objective.actor_loss(batch, sampo)
        return loss

    with torch.no_grad():
        fwd = time_ms(lambda: actor(False), repeats)
    both = time_ms(lambda: actor(True).backward(), repeats)
    rows.append(("actor_loss (gspo+seqmask+kl+ent)", f"B={batch} T={length}", fwd, both))
    return rows


def bench_advantages(num_samples: int, repeats: int) -> list[tuple[str, str, float, float | None]]:
    data = turn_batch(num_samples)
    n = data["step_rewards"].numel()
    rows: list[tuple[str, str, float, float | None]] = []
    table = advantages.TurnTable(**data)
    for name in advantages.ESTIMATORS.names():
        fn, cfg = advantages.get(name), schema.AdvantageConfig(name=name)
        rows.append((f"advantage/{name}", f"N={n}", time_ms(lambda fn=fn, cfg=cfg: fn(table, cfg), repeats), None))
    rows.append(
        (
            "step_returns",
            f"N={n}",
            time_ms(
                lambda: advantages.step_returns(data["step_rewards"], data["episode_ids"], data["turn_idx"], 0.95),
                repeats,
            ),
            None,
        )
    )
    episodes, inverse = torch.unique(data["episode_ids"], return_inverse=True)
    returns = torch.zeros(episodes.numel()).index_add_(0, inverse, data["step_rewards"])
    episode_group = torch.zeros(episodes.numel(), dtype=torch.long)
    episode_group[inverse] = data["group_ids"]
    rows.append(
        (
            "filter/dapo",
            f"E={episodes.numel()}",
            time_ms(lambda: filters.get("dapo")(returns=returns, group_ids=episode_group, atol=0.0), repeats),
            None,
        )
    )
    return rows


def render(rows: list[tuple[str, str, float, float | None]]) -> None:
    header = ("component", "size", "forward ms", "fwd+bwd ms")
    cells = [(a, b, f"{c:.2f}", "-" if d is None else f"{d:.2f}") for a, b, c, d in rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(r[i]) for r in [header, *cells]) for i in range(4)]
        for r in [header, *cells]:
            padded = (c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            print("  ".join(padded))
        return
    title = f"arl.algos on CPU (torch {torch.__version__}, {torch.get_num_threads()} threads)"
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i < 2 else "right")
    for r in cells:
        table.add_row(*r)
    Console().print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--threads", default="auto", help="torch threads: auto (the cores shared among ARL processes) or N")
    parser.add_argument("--check", action="store_true", help=f"fail if gigpo >= {GIGPO_BUDGET_MS} ms")
    args = parser.parse_args()
    from arl.distributed.threads import configure_threads

    configure_threads(args.threads)

    rows = bench_losses(args.batch, args.length, args.repeats) + bench_advantages(args.samples, args.repeats)
    render(rows)
    gigpo_ms = next(r[2] for r in rows if r[0] == "advantage/gigpo")
    if args.check and gigpo_ms >= GIGPO_BUDGET_MS:
        print(f"gigpo advantage took {gigpo_ms:.1f} ms >= {GIGPO_BUDGET_MS} ms", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
