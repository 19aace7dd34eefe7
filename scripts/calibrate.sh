#!/usr/bin/env bash
# Calibrate RL for an environment (docs/experiments.md, "Calibrating RL for an env or a model"): short RL runs
# from the env study's BC start over a grid of settings, on selection seeds, then one table row per setting
# (gain over the start, final success, peak KL, valid actions, same-outcome groups, zero advantages) naming the
# best (arl.analysis.calibration). The seeds that choose a setting cannot confirm it: confirm it with the env's
# study on fresh seeds, then make it the env's debug/budget/cpu_small_<env>.yaml values.
#   ENV=math_tool bash scripts/calibrate.sh                                            # the default grid
#   ENV=alfworld GRID="rl.optimizer.lr=1e-4,1e-5 algo.advantage.invalid_penalty=-0.1,0" bash scripts/calibrate.sh
#   ENV=sokoban SEEDS=1,2 ITERS=20 ARCHIVE=docs/results/sokoban_calibration bash scripts/calibrate.sh
# GRID is Hydra sweep overrides (every combination runs, for each seed); METHODS (default sampo) the recipe;
# the rest of the env study's variables (ITERS, VAL_EVERY, VAL_EPISODES, START, BC, N_JOBS, OUT, ARCHIVE) pass
# through. Each env study's own scope applies (scripts/<env>_*study.sh): its BC start, task types, templates.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${ENV:?ENV=sokoban|math_tool|alfworld|webshop}" "${SEEDS:=1,2}" "${METHODS:=sampo}"
: "${GRID:=rl.optimizer.lr=1e-4,3e-5,1e-5 algo.advantage.invalid_penalty=-0.1,0}"
case "$ENV" in
  sokoban) study=scripts/sokoban_rl_study.sh ;;
  math_tool) study=scripts/math_study.sh ;;
  alfworld) study=scripts/alfworld_cpu_study.sh ;;
  webshop) study=scripts/webshop_rl_study.sh ;;
  *) echo "ENV=$ENV: no study to calibrate from (sokoban, math_tool, alfworld, webshop)" >&2; exit 2 ;;
esac
subdir='${algo.name}'
for override in $GRID; do  # each grid key names the run folders: <algo>_<last key part><value>..._seed<k>
  key=${override%%=*}
  subdir+="_${key##*.}\${$key}"
done
export SEEDS METHODS OUT=${OUT:-logs/calibrate_$ENV} ARM="$GRID ${ARM:-}" SUBDIR="${subdir}_seed\${seed}" REPORT=calibration
exec bash "$study"
