#!/usr/bin/env bash
# Issue 42's ALFWorld study at the size of this machine (docs/results.md, "ALFWorld: RL from a cloned
# start"): about 2.5 hours on 2 cores, BC start included. Against the paper's setup (Qwen3-4B, all six
# task types, 50 turns, 16 groups x 8) it keeps two task types (pick_and_place_simple,
# look_at_obj_in_light), 20 turns, the tiny model cloned from BC_EPISODES expert games, and
# 4 groups x 8 a step; the full-scale CPU study stays scripts/alfworld_study.sh.
#   bash scripts/alfworld_cpu_study.sh                                   # BC, RL, report (resumes when run again)
#   ARCHIVE=docs/results/alfworld_cpu_study bash scripts/alfworld_cpu_study.sh   # ... and copy the runs there
#   BC=<bc run>/bc_policy_hf bash scripts/alfworld_cpu_study.sh          # RL from an earlier BC policy
# Two RL runs at a time (N_JOBS), one torch thread each; the other variables: scripts/study_lib.sh's rl_study.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=logs/alfworld_cpu_study}" "${SEEDS:=1,2,3}" "${ITERS:=12}" "${VAL_EVERY:=12}" "${VAL_EPISODES:=96}"
: "${BC_THREADS:=2}"   # the BC start runs alone: both cores (a rebuild that should give the same bits uses the same count)
: "${START:=docs/results/alfworld_cpu_study/bc_start/bc_policy_hf}"  # the committed start, when present
BC_EXPERIMENT=bc_alfworld RL_EXPERIMENT=alfworld
SETUP="debug=cpu_small env.kwargs.task_types=[pick_and_place_simple,look_at_obj_in_light] env.max_turns=20 env.kwargs.max_steps=20"
BC_ARGS="bc.episodes=${BC_EPISODES:-800} bc.epochs=${BC_EPOCHS:-3}"
# 4 groups x 8 games an iteration; SAMPO's DAPO filter from iteration 3 (the official 15 is a tenth of a
# 150-iteration run; this one has 12)
RL_ARGS="rollout.tasks_per_iteration=4 algo.filter.cold_start=2 ${ARM:-}"
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
