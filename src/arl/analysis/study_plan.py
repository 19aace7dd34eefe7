"""A study's plan, written and committed before its first run, and the departures of its runs from it.

A plan file (``docs/results/<study>/plan.yaml``) fixes what a confirmatory study runs and how it is read:
the start and its hash, the methods, the fresh seeds, the length, the validation points, every shared
override, the measures, the planned contrasts and the family Holm corrects over, and the power
statement that sized it. ``scripts/planned_study.sh`` runs exactly what the plan says
(:func:`shell_exports` hands its settings to ``scripts/study_lib.sh``'s ``rl_study``), and
``python src/report.py <runs> --plan <plan.yaml>`` prints every departure of the archived runs from it
(:func:`departures`): a planned run missing or unfinished, a run the plan does not name, an override
that differs, fewer iterations or optimiser steps than planned, validations at other iterations or on
other task counts. The keys, all required unless marked:

    name: alfworld_long_runs            # the study (its archive folder under docs/results/)
    experiment: alfworld                # the RL experiment every run composes
    start: {path: <bc_policy_hf>, sha256: <its model.safetensors>}
    methods: [sampo, grpo]              # algo presets; the first two are the primary contrast
    seeds: [31, 32, ...]                # fresh: no archived run used them
    iterations: 70
    val_every: 14                       # validations at 0, 14, ..., iterations
    val_episodes: 256
    overrides: [debug=cpu_small, ...]   # every other override the runs share
    min_optimizer_steps: 150            # the fewest optimiser steps a run may take
    parallel_runs: 2                    # optional (2): runs at a time; threads: optional (1) torch threads a run
    # free text the code does not read: question, measures, contrasts, family, power, cost, history
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from arl.analysis.runs import Run, parse_overrides

REQUIRED = ("name", "experiment", "start", "methods", "seeds", "iterations", "val_every", "val_episodes",
            "overrides", "min_optimizer_steps")


@dataclass
class StudyPlan:
    """What a plan file fixes (the keys the code reads; the rest of the file is for people)."""

    path: Path
    name: str
    experiment: str
    start_path: str
    start_sha256: str
    methods: list[str]
    seeds: list[int]
    iterations: int
    val_every: int
    val_episodes: int
    overrides: list[str]
    min_optimizer_steps: int
    parallel_runs: int = 2
    threads: int = 1
    text: dict = field(default_factory=dict)  # the whole file, for the free-text keys

    @property
    def validation_points(self) -> list[int]:
        """The iterations at which every run validates: 0 (the start), every ``val_every``-th, the last."""
        points = list(range(0, self.iterations + 1, self.val_every))
        return points if points[-1] == self.iterations else [*points, self.iterations]

    def run_overrides(self) -> dict[str, str]:
        """Every override a run of the plan carries besides ``algo`` and ``seed``, as the report parses them."""
        shared = [f"experiment={self.experiment}", *self.overrides, f"rl.iterations={self.iterations}",
                  f"rl.val_every={self.val_every}", f"rollout.val_episodes={self.val_episodes}",
                  f"threads={self.threads}"]
        return parse_overrides(",".join(shared))


def load_plan(path: Path | str) -> StudyPlan:
    """Read and check a plan file; a missing or ill-typed key is a ValueError naming it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no plan file at {path}")
    text = yaml.safe_load(path.read_text()) or {}
    if not isinstance(text, dict):
        raise ValueError(f"{path}: a plan is a mapping of keys, got {type(text).__name__}")  # noqa: TRY004 - a file's fault
    missing = [k for k in REQUIRED if k not in text]
    if missing:
        raise ValueError(f"{path}: the plan lacks {', '.join(missing)} (see arl.analysis.study_plan)")
    start = text["start"]
    if not isinstance(start, dict) or not {"path", "sha256"} <= set(start):
        raise ValueError(f"{path}: start needs path and sha256 (the weights' hash the runs must come from)")
    ints = {k: text[k] for k in ("iterations", "val_every", "val_episodes", "min_optimizer_steps")}
    bad = [k for k, v in ints.items() if not isinstance(v, int) or v < 1]
    if bad:
        raise ValueError(f"{path}: {', '.join(bad)} must be positive integers")
    if not text["methods"] or not text["seeds"] or not all(isinstance(s, int) for s in text["seeds"]):
        raise ValueError(f"{path}: methods and seeds must be non-empty lists (seeds of integers)")
    if len(set(text["seeds"])) != len(text["seeds"]):
        raise ValueError(f"{path}: a seed is listed twice")
    return StudyPlan(path=path, name=str(text["name"]), experiment=str(text["experiment"]),
                     start_path=str(start["path"]), start_sha256=str(start["sha256"]),
                     methods=[str(m) for m in text["methods"]], seeds=list(text["seeds"]),
                     iterations=ints["iterations"], val_every=ints["val_every"], val_episodes=ints["val_episodes"],
                     overrides=[str(o) for o in text["overrides"] or []],
                     min_optimizer_steps=ints["min_optimizer_steps"],
                     parallel_runs=int(text.get("parallel_runs", 2)), threads=int(text.get("threads", 1)), text=text)


def shell_exports(plan: StudyPlan) -> str:
    """``export`` lines for ``scripts/study_lib.sh``'s ``rl_study``: the plan's settings, nothing else."""
    values = {
        "PLAN_NAME": plan.name, "RL_EXPERIMENT": plan.experiment, "START": plan.start_path,
        "BC_SHA256": plan.start_sha256, "METHODS": ",".join(plan.methods),
        "SEEDS": ",".join(str(s) for s in plan.seeds), "ITERS": str(plan.iterations),
        "VAL_EVERY": str(plan.val_every), "VAL_EPISODES": str(plan.val_episodes),
        "SETUP": " ".join(plan.overrides), "N_JOBS": str(plan.parallel_runs), "RL_THREADS": str(plan.threads),
    }
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in values.items())


def start_hash(start: Path) -> str | None:
    """The sha256 of ``<start>/model.safetensors`` (None when the file is absent)."""
    weights = Path(start) / "model.safetensors"
    if not weights.exists():
        return None
    return hashlib.sha256(weights.read_bytes()).hexdigest()


def departures(plan: StudyPlan, runs: Iterable[Run], root: Path | None = None) -> list[str]:
    """Every way the runs depart from the plan, one sentence each (``[]``: none).

    ``runs`` are :func:`arl.analysis.runs.find_runs`' (their ``common`` overrides put back); ``root``
    is where the plan's start path is read from (its hash checked) when given.
    """
    out: list[str] = []
    if root is not None:
        got = start_hash(root / plan.start_path)
        if got is None:
            out.append(f"the start {plan.start_path} is not in this checkout (its hash unchecked)")
        elif got != plan.start_sha256:
            out.append(f"the start {plan.start_path} has sha256 {got}, the plan {plan.start_sha256}")
    want = plan.run_overrides()
    seen: dict[tuple[str, int], Run] = {}
    for run in runs:
        overrides = {**run.common, **run.overrides}
        method, seed = overrides.get("algo", "?"), overrides.get("seed", "?")
        where = f"`{run.name}`"
        if method not in plan.methods or not str(seed).lstrip("-").isdigit() or int(seed) not in plan.seeds:
            out.append(f"{where}: algo={method}, seed={seed} is not a planned run")
            continue
        seen[(method, int(seed))] = run
        for key in sorted(set(want) | set(overrides) - {"algo", "seed"}):
            if want.get(key) != overrides.get(key):
                out.append(f"{where}: {key}={overrides.get(key, '(unset)')}, the plan {want.get(key, '(unset)')}")
        done = max((s for s, _ in run.scalars.get("perf/iteration_s", [])), default=0)
        if done < plan.iterations:
            out.append(f"{where}: {done} of {plan.iterations} iterations")
        steps = run.final("train/optimizer_steps") or sum(v for _, v in run.scalars.get("actor/optimizer_steps", []))
        if steps < plan.min_optimizer_steps:
            out.append(f"{where}: {steps:.0f} optimiser steps, the plan at least {plan.min_optimizer_steps}")
        points = [s for s, _ in run.scalars.get("val/success_rate", [])]
        if points != plan.validation_points:
            out.append(f"{where}: validations at iterations {points}, the plan {plan.validation_points}")
        if run.val_episodes is not None and run.val_episodes != plan.val_episodes:
            out.append(f"{where}: {run.val_episodes} validation episodes, the plan {plan.val_episodes}")
    for method in plan.methods:
        for seed in plan.seeds:
            if (method, seed) not in seen:
                out.append(f"algo={method}, seed={seed}: planned, not (yet) run")
    return out


def departures_section(plan: StudyPlan, runs: Iterable[Run], root: Path | None = None) -> str:
    """The report's section on the plan: its file and every departure, or that there is none."""
    found = departures(plan, runs, root)
    shown = plan.path.resolve()
    if root is not None and shown.is_relative_to(Path(root).resolve()):
        shown = shown.relative_to(Path(root).resolve())
    head = f"## Departures from the plan\n\nThe plan: `{shown}` ({plan.name}).\n\n"
    if not found:
        return head + "None: every planned run is here, as planned.\n"
    return head + "\n".join(f"- {d}" for d in found) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m arl.analysis.study_plan exports <plan.yaml>``: the plan's settings as shell ``export`` lines."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "exports":
        print("usage: python -m arl.analysis.study_plan exports <plan.yaml>", file=sys.stderr)
        return 2
    try:
        print(shell_exports(load_plan(argv[1])))
    except (FileNotFoundError, ValueError) as err:
        print(f"study plan: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
