"""Benchmark: episodes played by an agent program through the recording gateway against the built-in agent loop.

The same Sokoban rollout (``--tasks`` levels x ``--group`` members, the example agent's prompts: the full
prompt, the last turn as history, at most 10 turns) is played three ways by one policy (by default the
Sokoban study's committed BC start) on one engine:

- **agent loop**: :class:`~arl.agent.loop.AgentLoop`, every episode's turn in one engine call (lockstep);
- **gateway, turn samples**: :class:`~arl.agent.programs.ProgramLoop` running ``examples/openai_sokoban_agent.py``
  once per episode (all at once), each talking to its session of the gateway with the ``openai`` client; the
  gateway batches the requests that wait into engine calls;
- **gateway, trajectory samples**: the same with ``rollout.sample_mode=trajectory`` (the example rewrites its
  prompt every turn, so each call begins a stream: this row measures the splice check's cost, not a splice).

The table prints the rollout's wall time, episodes and turns per second, engine calls and the mean requests a
call, the share of the wall time spent generating, and what the rest costs a turn (process start, HTTP, the
program's own work). Run: ``python bench/gateway.py [--tasks 8] [--group 2] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
START = ROOT / "docs/results/sokoban_rl_study/bc_start/bc_policy_hf"
AGENT = ["python", str(ROOT / "examples" / "openai_sokoban_agent.py")]


def _loops(model, tok):
    from arl.agent.loop import AgentLoop, LoopOptions
    from arl.agent.programs import ProgramLoop
    from arl.rollout.hf_engine import HFEngine

    built_in = AgentLoop(HFEngine(model, tok), tok, "sokoban", {"prompt_style": "full"},
                         LoopOptions(history_window=1, max_turns=10))
    turn = ProgramLoop(HFEngine(model, tok), tok, AGENT)
    trajectory = ProgramLoop(HFEngine(model, tok), tok, AGENT)
    trajectory.use_trajectory_samples()
    return {"agent loop": built_in, "gateway, turn samples": turn, "gateway, trajectory samples": trajectory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="rollouts a way (the table takes the median)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--start", default=str(START), help="the policy (a bc_policy_hf folder)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from arl.agent.loop import Task
    from arl.models.loading import load_policy
    from arl.rollout.engine import SamplingParams

    torch.set_num_threads(args.threads)
    model, tok = load_policy(args.start)
    model.eval()
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    tasks = [Task(i, 1000 + i) for i in range(args.tasks)]
    print(f"Sokoban, {args.tasks} levels x {args.group} members, max_new_tokens {args.max_new_tokens}, "
          f"{args.threads} threads, policy {Path(args.start).parent.name}/{Path(args.start).name}; "
          f"median of {args.repeats} rollouts\n")
    print("| way | rollout s | episodes/s | turns/s | engine calls | requests a call | generating | rest a turn |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, loop in _loops(model, tok).items():
        rows = []
        for _ in range(args.repeats):
            episodes = loop.run(tasks, args.group, params)
            stats = loop.last_stats
            failed = sum(e.env_error for e in episodes)
            if failed:
                raise SystemExit(f"{name}: {failed} failed episodes")
            rows.append((stats.seconds, len(episodes), stats.env_steps, stats.engine_calls, stats.generate_seconds))
        seconds, episodes, turns, calls, generate = (statistics.median(column) for column in zip(*rows))
        print(f"| {name} | {seconds:.1f} | {episodes / seconds:.2f} | {turns / seconds:.1f} | {calls:.0f} | "
              f"{turns / calls:.1f} | {generate / seconds:.0%} | {1000 * (seconds - generate) / turns:.0f} ms |")
        loop.close()


if __name__ == "__main__":
    main()
