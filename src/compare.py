"""Two policies game by game on the same held-out games, once per pair of validations.

    python src/eval.py ckpt_path=<bc run>/bc_policy_hf seed=1 rollout.val_episodes=512 hydra.run.dir=logs/cmp/start_s1
    python src/eval.py ckpt_path=<rl run>/checkpoints/last.ckpt seed=1 rollout.val_episodes=512 hydra.run.dir=logs/cmp/rl_s1
    python src/compare.py logs/cmp/start_s1 logs/cmp/rl_s1 [logs/cmp/start_s2 logs/cmp/rl_s2 ...]

Each argument is an eval run folder (its ``val_episodes.jsonl``) or an episodes file (a training
run's ``val_episodes/iter<k>.jsonl``), taken two at a time as (before, after). Prints a markdown
table: per pair the games gained and lost with McNemar's exact test, then the gain over the pairs
with its 95 % t interval, the pooled games with a sign test over games (each game one unit), and
success per task type (``arl.analysis.games.compare_table``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `arl` without installing, too

from arl.analysis.games import compare_table  # after the sys.path line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("validations", type=Path, nargs="+", help="BEFORE AFTER [BEFORE AFTER ...]")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    if len(args.validations) % 2:
        print("compare: give the validations in pairs, BEFORE AFTER [BEFORE AFTER ...]", file=sys.stderr)
        return 2
    pairs = list(zip(args.validations[::2], args.validations[1::2]))
    try:
        table = compare_table(pairs)
    except (FileNotFoundError, ValueError) as err:
        print(f"compare: {err}", file=sys.stderr)
        return 2
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
