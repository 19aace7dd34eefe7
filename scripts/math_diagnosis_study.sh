#!/usr/bin/env bash
# Why RL lowered the cloned start on math (docs/results.md, "RL from a cloned start: tool-integrated math"):
# GRPO from the math study's own start (rebuilt here and checked against its archived sha256) with one
# thing changed at a time, on the study's seeds 1-4, paired with its archived GRPO runs (lr 1e-4, T 1.0):
#   arm "lr":   rl.optimizer.lr=1e-5 (lr 1e-4 was calibrated on Sokoban, not on math)
#   arm "temp": rollout.temperature=0.6 (the start wins 0.69 of its problems at T 0.6 but 0.14-0.30 at T 1.0,
#               so at T 1.0 most groups it learns from are failures)
# Everything else as the math study (30 iterations of 8 x 8, validation at 0, 15, 30 on 512 problems at
# T 0.6). Then one report over the archived baseline and both arms (gain over the start per arm, each arm
# minus the baseline, game by game):
#   bash scripts/math_diagnosis_study.sh                                       # both arms, report
#   ARCHIVE=docs/results/math_diagnosis bash scripts/math_diagnosis_study.sh   # ... and archive the runs
# Run again, it resumes. About 1.5 h on 2 cores (the BC start about 20 min, each arm 4 runs 2 at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${ROOT:=logs/math_diagnosis}" "${PY:=.venv/bin/python}"
BASELINE=docs/results/math_study/runs  # the math study's archived GRPO runs: lr 1e-4, T 1.0
export SEEDS=${SEEDS:-1,2,3,4} METHODS=grpo PY
export BC_SHA256=462561e2b7d97e2b63bc2ecc9a9bad9f917bcf1a7f6564b4bf29888854bcb637  # math_study/bc_start/bc.sha256
archive=${ARCHIVE:-}
unset ARCHIVE  # the arms are archived together below, not one by one
# both arms state lr and temperature, so the report's settings name them
OUT=$ROOT/lr ARM="rl.optimizer.lr=1e-5 rollout.temperature=1.0" SUBDIR='lr1e-5_seed${seed}' \
  bash scripts/math_study.sh
BC=$ROOT/lr/bc/bc_policy_hf OUT=$ROOT/temp ARM="rl.optimizer.lr=1e-4 rollout.temperature=0.6" \
  SUBDIR='temp0.6_seed${seed}' bash scripts/math_study.sh
# one folder with the three settings: the new runs, and copies of the baseline's whose overrides gain the
# two values those runs had from their config (lr 1e-4 from debug=cpu_small, T 1.0 from rollout/base.yaml)
all=$ROOT/all
rm -rf "$all" && mkdir -p "$all"
for seed in ${SEEDS//,/ }; do
  cp -a "$BASELINE/grpo_seed$seed" "$all/baseline_seed$seed"
  printf -- '- rl.optimizer.lr=1e-4\n- rollout.temperature=1.0\n' >> "$all/baseline_seed$seed/.hydra/overrides.yaml"
  ln -s "$(cd "$ROOT/lr/rl/lr1e-5_seed$seed" && pwd)" "$all/lr1e-5_seed$seed"
  ln -s "$(cd "$ROOT/temp/rl/temp0.6_seed$seed" && pwd)" "$all/temp0.6_seed$seed"
done
base="rl.optimizer.lr=1e-4,rollout.temperature=1.0"
lr="rl.optimizer.lr=1e-5,rollout.temperature=1.0"
temp="rl.optimizer.lr=1e-4,rollout.temperature=0.6"
contrasts=(--contrast "$lr - $base" --contrast "$temp - $base" --contrast "$lr" --contrast "$temp" --contrast "$base")
"$PY" src/report.py "$all" "${contrasts[@]}"
if [ -n "$archive" ]; then
  for arm in lr temp; do bash scripts/archive_runs.sh "$ROOT/$arm/rl" "$archive/runs"; done
  "$PY" src/report.py "$all" --out "$archive" "${contrasts[@]}" > /dev/null
  echo "study: archived in $archive (runs/, report.md, plots)"
fi
