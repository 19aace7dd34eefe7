#!/usr/bin/env bash
# Issue 42's ALFWorld study at the size of this machine (docs/results.md, "ALFWorld: RL from a cloned
# start"): about 2.5 hours on 2 cores, BC start included. Against the paper's setup (Qwen3-4B, all six
# task types, 50 turns, 16 groups x 8) it keeps two task types (pick_and_place_simple,
# look_at_obj_in_light), __TURNS__ turns, the tiny model cloned from BC_EPISODES expert games, and
# __GROUPS__ groups x 8 a step; the full-scale CPU study stays scripts/alfworld_study.sh.
#   bash scripts/alfworld_cpu_study.sh                                   # BC, RL, report (resumes when run again)
#   ARCHIVE=docs/results/alfworld_cpu_study bash scripts/alfworld_cpu_study.sh   # ... and copy the runs there
#   BC=<bc run>/bc_policy_hf bash scripts/alfworld_cpu_study.sh          # RL from an earlier BC policy
# Two RL runs at a time (N_JOBS), one torch thread each. EXTRA: overrides for every run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-logs/alfworld_cpu_study}
SEEDS=${SEEDS:-1,2,3}
METHODS=${METHODS:-sampo,grpo}
ITERS=${ITERS:-__ITERS__}
VAL_EVERY=${VAL_EVERY:-__VAL_EVERY__}
VAL_EPISODES=${VAL_EPISODES:-__VAL_EPISODES__}
N_JOBS=${N_JOBS:-2}
BC_THREADS=${BC_THREADS:-1}
RL_THREADS=${RL_THREADS:-1}
BC_EPISODES=${BC_EPISODES:-__BC_EPISODES__}
BC_EPOCHS=${BC_EPOCHS:-__BC_EPOCHS__}
BC_EXPERIMENT=bc_alfworld
RL_EXPERIMENT=alfworld
SETUP="debug=cpu_small env.kwargs.task_types=[pick_and_place_simple,look_at_obj_in_light] env.max_turns=__TURNS__ env.kwargs.max_steps=__TURNS__"
BC_ARGS="bc.episodes=$BC_EPISODES bc.epochs=$BC_EPOCHS"
EXTRA=${EXTRA:-}
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
