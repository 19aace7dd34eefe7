#!/usr/bin/env bash
# The default job's recipe as a study (docs/results.md, "RL from a cloned start: Sokoban"): the tiny model
# cloned on Sokoban (debug=cpu_small's budget, seed 1, as `make train` clones it), then SAMPO and GRPO from
# that one start on SEEDS paired seeds (5-8: no calibration or pilot of this start used them) at
# debug=cpu_small's Sokoban recipe (lr 1e-4, 30 iterations of 8 x 8 levels), validated on 512 held-out
# levels at T 0.6 at iterations 0, 15 and 30, then the report (each method's gain over the start, SAMPO - GRPO,
# level by level):
#   bash scripts/sokoban_rl_study.sh                                         # BC start, RL, report (resumes)
#   ARCHIVE=docs/results/sokoban_rl_study bash scripts/sokoban_rl_study.sh   # ... and archive the runs
# The start is the committed one (START) when present, else built in $OUT/bc and copied there to be
# committed. About 30 min on 2 cores (the BC start about 5 min, 8 runs two at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=logs/sokoban_rl_study}" "${SEEDS:=5,6,7,8}" "${ITERS:=30}" "${VAL_EVERY:=15}" "${VAL_EPISODES:=512}"
: "${START:=docs/results/sokoban_rl_study/bc_start/bc_policy_hf}"
BC_EXPERIMENT=bc_sokoban RL_EXPERIMENT=sokoban
RL_ARGS="${ARM:-}"
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
