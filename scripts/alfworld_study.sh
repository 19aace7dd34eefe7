#!/usr/bin/env bash
# Issue 22's ALFWorld study (docs/results.md, "ALFWorld: RL from the cloned policy"): the tiny model
# cloned with the cpu_small recipe (debug/budget/cpu_small_alfworld.yaml: 1200 expert games, notes,
# 4 epochs), then RL from that one policy with each method on the same paired seeds, then the report
# (gain over the BC start with its interval, success per task type, SAMPO against GRPO):
#   bash scripts/alfworld_study.sh                                   # BC (unless $BC exists), RL, report
#   BC=<bc run>/bc_policy_hf bash scripts/alfworld_study.sh            # RL from an earlier BC policy
#   BC_SHA256=<hash> bash scripts/alfworld_study.sh                  # stop unless the start is that one
# The RL runs are one Hydra multirun (hydra/launcher=joblib_local, N_JOBS at a time, seed first: every
# method finishes seed 1 before seed 2) with ckpt_path=resume in a fixed sweep folder: the same command
# resumes an interrupted study (run folders <algo>_seed<k>). A run is about 30 iterations x 5-6 min on one core (docs/results.md).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=logs/alfworld_study}" "${SEEDS:=1,2,3}" "${ITERS:=30}" "${VAL_EVERY:=15}"
: "${VAL_EPISODES:=128}"   # 128 distinct held-out games (valid_seen's generated pool is 140)
: "${N_JOBS:=1}" "${RL_THREADS:=auto}"   # the BC start at one thread (BC_THREADS; 2 alone on both cores: 1.1 s a step, not 1.7)
BC_EXPERIMENT=bc_alfworld RL_EXPERIMENT=alfworld
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
