#!/usr/bin/env bash
# The ALFWorld recipe confirmed on fresh seeds (docs/results.md, "RL from a cloned start: ALFWorld at this
# machine's size"): SAMPO and GRPO at debug=cpu_small's calibrated ALFWorld recipe
# (debug/budget/cpu_small_alfworld.yaml, chosen by `make calibrate ENV=alfworld` on seeds 1-2) from the
# ALFWorld study's committed start (its sha256 checked), on seeds 4-7, which no calibration or pilot of that
# start used; the ALFWorld study's scope otherwise (two task types, 20 turns, 12 iterations of 4 x 8, 96
# held-out games at T 0.6, top-p 0.95, top-k 20, at iterations 0 and 12), then the report (each method's gain over the start,
# SAMPO - GRPO, per task type, game by game):
#   bash scripts/alfworld_confirmation_study.sh                                              # runs, report (resumes)
#   ARCHIVE=docs/results/alfworld_confirmation bash scripts/alfworld_confirmation_study.sh   # ... and archive them
# About 2.7 h on 2 cores (8 runs of about 40 min, 2 at a time); a run stopped part-way resumes from its last
# checkpoint when the script is started again with the same OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-logs/alfworld_confirmation} SEEDS=${SEEDS:-4,5,6,7}
# the ALFWorld study's start (alfworld_cpu_study/bc_start/bc.sha256); BC_SHA256= (empty) skips the check
export BC_SHA256=${BC_SHA256-88293e6315142d366dddf3729d184f41b154c62b5fafa191d340dd7f2a07992c}
exec bash scripts/alfworld_cpu_study.sh
