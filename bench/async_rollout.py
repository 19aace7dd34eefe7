"""Benchmark: the synchronous loop on both cores against asynchronous RL, one core a side.

The same RL job (by default the default job's RL stage: Sokoban, the embedded tiny model, debug=cpu_small's
budget, from the committed BC start of the Sokoban study) runs twice as a subprocess:

- **synchronous**, ``threads=2``: rollout, then update, both on both cores;
- **asynchronous**, ``rl.max_staleness=K``: the rollout process and the learner, one thread each.

From each run's TensorBoard scalars and wall clock the table prints optimiser steps per second and
episodes per second over the timed iterations (the first ``--warmup`` left out: process start, first
allocations), the idle shares of the rollout side and of the learner (asynchronous run), and the
**limit**: the synchronous iteration time over the slower side's time as the asynchronous run measured
it (its rollout seconds a batch, or its update seconds: the one that paces the pair), i.e. the best
speed-up two overlapped sides could give; ``of limit`` is the measured speed-up over that.

Run: ``python bench/async_rollout.py [--iterations 12] [--staleness 2] [--start <bc_policy_hf>]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = ROOT / "docs/results/sokoban_rl_study/bc_start/bc_policy_hf"


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard" / "rl"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _run(args: argparse.Namespace, extra: list[str], log_dir: Path) -> tuple[float, dict]:
    cmd = [sys.executable, str(ROOT / "src/train.py"), "experiment=sokoban", "debug=cpu_small", "bc.enabled=false",
           f"rl.iterations={args.iterations}", f"rl.val_every={args.iterations}", "rollout.val_episodes=8",
           "rl.ckpt_every=0", f"paths.log_dir={log_dir}", "task_name=bench", *extra]
    if args.start:
        cmd.append(f"model.init_from={args.start}")
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"the run failed:\n{done.stderr[-3000:]}")
    (run_dir,) = (log_dir / "bench" / "runs").iterdir()
    return wall, _scalars(run_dir)


def _mean(scalars: dict, tag: str, warmup: int) -> float:
    values = [v for step, v in scalars.get(tag, []) if step > warmup]
    return statistics.fmean(values) if values else float("nan")


def _total(scalars: dict, tag: str, warmup: int) -> float:
    """``tag`` summed over the timed iterations (divided by their seconds, a rate per second)."""
    return sum(v for s, v in scalars.get(tag, []) if s > warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--staleness", type=int, default=2)
    parser.add_argument("--start", default=str(START) if (START / "model.safetensors").exists() else "")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("synchronous, 2 threads", ["threads=2"]),
                            (f"asynchronous, k={args.staleness}, 1 + 1 threads",
                             ["threads=1", f"rl.max_staleness={args.staleness}"])):
            wall, s = _run(args, extra, Path(tmp) / name.split(",")[0])
            timed = [step for step, _ in s["perf/update_s"] if step > args.warmup]
            # wall time of the timed iterations: the learner's clock between taking them (sync: rollout + step)
            per_iteration = _mean(s, "perf/iteration_s", args.warmup)
            if "async/queue_wait_s" in s:  # the learner's iteration: its wait for the batch plus its own step
                per_iteration = _mean(s, "async/queue_wait_s", args.warmup) + _mean(s, "perf/iteration_s", args.warmup) - \
                    _mean(s, "perf/rollout_s", args.warmup)
            rows.append({
                "name": name, "wall": wall, "iteration_s": per_iteration,
                "rollout_s": _mean(s, "perf/rollout_s", args.warmup),
                "update_s": _mean(s, "perf/iteration_s", args.warmup) - _mean(s, "perf/rollout_s", args.warmup),
                "steps_per_s": _total(s, "actor/optimizer_steps", args.warmup) / (per_iteration * len(timed)),
                "episodes_per_s": _total(s, "rollout/episodes", args.warmup) / (per_iteration * len(timed)),
                "engine_idle": _mean(s, "async/engine_idle_share", args.warmup),
                "learner_idle": _mean(s, "async/learner_idle_share", args.warmup),
                "staleness": _mean(s, "async/staleness_mean", args.warmup),
            })
    sync, asyn = rows
    limit = sync["iteration_s"] / max(asyn["rollout_s"], asyn["update_s"])
    speedup = sync["iteration_s"] / asyn["iteration_s"]
    print("| run | s / iteration | rollout s | update s | optimiser steps / s | episodes / s | rollout idle | "
          "learner idle | staleness (mean) | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['iteration_s']:.2f} | {r['rollout_s']:.2f} | {r['update_s']:.2f} | "
              f"{r['steps_per_s']:.3f} | {r['episodes_per_s']:.2f} | {r['engine_idle']:.2f} | {r['learner_idle']:.2f} | "
              f"{r['staleness']:.2f} | {r['wall']:.0f} |")
    print(f"\nspeed-up {speedup:.2f}x; limit {limit:.2f}x (synchronous iteration over the slower side's seconds); "
          f"{100 * speedup / limit:.0f} % of the limit")


if __name__ == "__main__":
    main()
