"""Benchmark of the default job's RL iteration: where the seconds go, alone and beside another run.

Runs ``src/train.py experiment=sampo_sokoban debug=cpu_small`` (the default job, ``make train``)
from a behaviour-cloned policy, for ``--iterations`` RL iterations without validation, and reads
the run's own ``perf/*`` scalars from TensorBoard. Scenarios (``--scenarios``, comma-separated):

* ``alone``: one run, the project's thread setting (``threads=auto``);
* ``alone-omp1``: one run forced to one thread (``OMP_NUM_THREADS=1``);
* ``pair``: two runs side by side (seeds 1 and 2), default threads;
* ``pair-omp1``: the same two forced to one thread each;
* ``ddp`` / ``ddp-omp1``: one run with ``trainer=ddp`` (2 gloo ranks).

Columns: seconds per iteration (median wall time between iterations, everything included:
rollout, scoring, update, sync, checkpoint) and the median of each part the run logs: rollout
(all rounds of the DAPO filter) and its generate share, scoring (old and reference log-probs,
then each alone), update, sync, checkpoint. ``--src`` runs another checkout's
``src/train.py`` (e.g. a ``git worktree`` of an older commit) for before/after tables; parts an
older tree does not log are shown as ``-``.

Run: ``python bench/iteration.py [--iterations 6] [--scenarios alone,pair,pair-omp1]``
(about 2 minutes per scenario on 2 cores, plus a one-off behaviour-cloning run of about 3
minutes whose policy is cached in ``$ARL_CACHE/bench/bc_sokoban``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = (
    ("rollout", "perf/rollout_s"),
    ("generate", "perf/generate_s"),
    ("scoring", "perf/logprob_s"),
    ("old logp", "perf/old_logprob_s"),
    ("ref logp", "perf/ref_logprob_s"),
    ("update", "perf/update_s"),
    ("sync", "perf/sync_s"),
    ("ckpt", "perf/checkpoint_s"),
)
SCENARIOS = ("alone", "alone-omp1", "pair", "pair-omp1", "ddp", "ddp-omp1")


def cache_dir() -> Path:
    return Path(os.environ.get("ARL_CACHE", Path.home() / ".cache" / "arl")) / "bench"


def bc_policy(python: str, train_py: Path) -> Path:
    """A behaviour-cloned Sokoban policy (the default job's first stage), built once and cached."""
    out = cache_dir() / "bc_sokoban"
    policy = out / "bc_policy_hf"
    if not (policy / "config.json").exists():
        print(f"building the BC policy once into {out} (about 3 minutes)", flush=True)
        subprocess.run(
            [python, str(train_py), "experiment=bc_sokoban", "debug=cpu_small", "seed=1",
             "rollout.val_episodes=8", f"hydra.run.dir={out}"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    return policy


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """``tag -> [(step, wall_time, value)]`` of the run's RL TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float, float]]] = {}
    for events in (run_dir / "tensorboard").glob("rl*"):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.wall_time, e.value) for e in acc.Scalars(tag))
    return out


def launch(python: str, train_py: Path, run_dir: Path, seed: int, args, extra: list[str], omp1: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if omp1:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [
        python, str(train_py), "experiment=sampo_sokoban", "debug=cpu_small", f"seed={seed}",
        f"model.init_from={args.init_from}", f"rl.iterations={args.iterations}",
        f"rl.val_every={args.iterations + 1}", "rollout.val_episodes=8", f"hydra.run.dir={run_dir}", *extra,
        *args.overrides,
    ]
    log = open(run_dir.with_suffix(".log"), "w")  # noqa: SIM115 - the child writes to it after we return
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(train_py.parents[1]))


def summarise(run_dir: Path) -> dict[str, float | None]:
    s = read_scalars(run_dir)
    iters = sorted({step: wall for step, wall, _ in s.get("perf/iteration_s", [])}.items())
    walls = [b[1] - a[1] for a, b in itertools.pairwise(iters)]  # everything between two iterations' ends
    row: dict[str, float | None] = {"iteration": statistics.median(walls) if walls else None}
    for name, tag in PARTS:
        values = [v for step, _, v in s.get(tag, []) if step > 1]  # the first iteration warms up
        row[name] = statistics.median(values) if values else None
    return row


def run_scenario(name: str, python: str, train_py: Path, args, tmp: Path) -> list[dict[str, float | None]]:
    omp1 = name.endswith("-omp1")
    base = name.removesuffix("-omp1")
    extra = ["trainer=ddp"] if base == "ddp" else []
    seeds = (1, 2) if base == "pair" else (1,)
    procs = []
    for seed in seeds:
        run_dir = tmp / f"{name}-seed{seed}"
        procs.append((run_dir, launch(python, train_py, run_dir, seed, args, extra, omp1)))
    t0 = time.perf_counter()
    for run_dir, p in procs:
        if p.wait() != 0:
            raise SystemExit(f"{name}: the run failed, see {run_dir.with_suffix('.log')}")
    print(f"{name}: {time.perf_counter() - t0:.0f}s", flush=True)
    return [summarise(run_dir) for run_dir, _ in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--scenarios", default="alone,pair,pair-omp1", help=f"comma-separated: {', '.join(SCENARIOS)}")
    ap.add_argument("--src", default=str(ROOT / "src"), help="the src/ folder whose train.py runs (another checkout's)")
    ap.add_argument("--init-from", default=None, help="the policy RL starts from (default: a cached BC run)")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = ap.parse_args()
    python = sys.executable
    train_py = Path(args.src).resolve() / "train.py"
    if args.init_from is None:
        args.init_from = str(bc_policy(python, ROOT / "src" / "train.py"))
    from rich.console import Console
    from rich.table import Table

    table = Table(title=(
        f"default job (experiment=sampo_sokoban debug=cpu_small) RL iteration, {args.label}: median seconds over "
        f"{args.iterations} iterations (the first is warm-up), {os.cpu_count()} cores"
    ))
    for col in ("scenario", "run", "iteration s", *(name for name, _ in PARTS)):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory(prefix="arl-bench-") as tmp:
        for name in args.scenarios.split(","):
            if name not in SCENARIOS:
                raise SystemExit(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}")
            for k, row in enumerate(run_scenario(name, python, train_py, args, Path(tmp)), start=1):
                cells = [f"{row[c]:.2f}" if row.get(c) is not None else "-" for c in ("iteration", *(n for n, _ in PARTS))]
                table.add_row(name, str(k), *cells)
    Console(width=max(Console().width, 160)).print(table)


if __name__ == "__main__":
    main()
