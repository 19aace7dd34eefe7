#!/usr/bin/env bash
# Why RL lowered the cloned start on math (docs/results.md, "RL from a cloned start: tool-integrated math"):
# GRPO from the math study's own start (rebuilt here and checked against its archived sha256) in three arms
# on seeds 1-4, one thing changed at a time against the math study's setting:
#   arm "base": lr 1e-4, T 1.0, the math study's GRPO (its runs are rerun here, and must equal the archived ones)
#   arm "lr":   rl.optimizer.lr=1e-5 (lr 1e-4 was calibrated on Sokoban, not on math)
#   arm "temp": rollout.temperature=0.6 (the start wins 0.69 of its problems at T 0.6 but 0.109-0.297 at T 1.0,
#               so at T 1.0 most groups it learns from are failures)
# Everything else as the math study (30 iterations of 8 x 8, validation at 0, 15, 30 on 512 problems at
# T 0.6). Then one report over the three arms (gain over the start per arm, each arm minus the base, game
# by game):
#   bash scripts/math_diagnosis_study.sh                                       # the three arms, report
#   ARCHIVE=docs/results/math_diagnosis bash scripts/math_diagnosis_study.sh   # ... and archive the runs
# Run again, it resumes. About 1 h on 2 cores (the BC start about 7 min, each arm 4 runs of about 8 min, 2 at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${ROOT:=logs/math_diagnosis}" "${PY:=.venv/bin/python}"
export SEEDS=${SEEDS:-1,2,3,4} METHODS=grpo PY
# the math study's start (math_study/bc_start/bc.sha256); BC_SHA256= (empty) skips the check (a shortened test)
export BC_SHA256=${BC_SHA256-462561e2b7d97e2b63bc2ecc9a9bad9f917bcf1a7f6564b4bf29888854bcb637}
archive=${ARCHIVE:-}
unset ARCHIVE  # the arms are archived together below, not one by one
# every arm states lr and temperature, so the report's settings name both; the first builds the start
arm() {  # <folder> <lr> <temperature> <run folders' prefix>
  local bc=()
  [ -d "$ROOT/lr/bc/bc_policy_hf" ] && [ "$1" != lr ] && bc=(BC="$ROOT/lr/bc/bc_policy_hf")
  env "${bc[@]}" OUT="$ROOT/$1" ARM="rl.optimizer.lr=$2 rollout.temperature=$3" SUBDIR="$4"'_seed${seed}' \
    bash scripts/math_study.sh
}
arm lr 1e-5 1.0 lr1e-5
arm temp 1e-4 0.6 temp0.6
arm base 1e-4 1.0 base
all=$ROOT/all  # one folder with the three arms' runs
rm -rf "$all" && mkdir -p "$all"
for a in base lr temp; do
  for run in "$ROOT/$a/rl/"*_seed*; do ln -s "$(cd "$run" && pwd)" "$all/$(basename "$run")"; done
done
# the settings as the runs' .hydra/overrides.yaml name them (Hydra writes 1e-4 as 0.0001, 1e-5 as 1e-05)
base="rl.optimizer.lr=0.0001,rollout.temperature=1.0"
lr="rl.optimizer.lr=1e-05,rollout.temperature=1.0"
temp="rl.optimizer.lr=0.0001,rollout.temperature=0.6"
contrasts=(--contrast "$lr - $base" --contrast "$temp - $base" --contrast "$lr" --contrast "$temp" --contrast "$base")
"$PY" src/report.py "$all" "${contrasts[@]}"
if [ -n "$archive" ]; then
  for a in base lr temp; do bash scripts/archive_runs.sh "$ROOT/$a/rl" "$archive/runs"; done
  "$PY" src/report.py "$archive/runs" --out "$archive" "${contrasts[@]}" > /dev/null
  echo "study: archived in $archive (runs/, report.md, plots)"
fi
