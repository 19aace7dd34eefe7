#!/usr/bin/env bash
# The CPU-scale study of docs/results.md: every method of the matrix on Sokoban with the tiny model,
# two seeds, each seed's RL runs starting from its own behaviour-cloning run.
#   bash scripts/sokoban_study.sh            # BC for seeds 1 and 2, then 2 x 10 RL runs, then the report
# The two seeds run side by side, one torch thread each (a 2-core machine). Budgets: ITERS RL
# iterations, validation every VAL_EVERY on VAL_EPISODES held-out levels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-logs/study}
ITERS=${ITERS:-10}
VAL_EVERY=${VAL_EVERY:-5}
VAL_EPISODES=${VAL_EPISODES:-128}
METHODS=${METHODS:-grpo,sampo,cispo,cispo_seqmask,sapo,sapo_seqmask,gigpo,dapo_grpo,dapo_gigpo,gspo}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

for seed in 1 2; do
  if [ ! -d "$OUT/bc_sokoban/seed$seed/bc_policy_hf" ]; then
    $PY src/train.py experiment=bc_sokoban debug=cpu_small seed=$seed hydra.run.dir="$OUT/bc_sokoban/seed$seed" \
      > "$OUT/bc_sokoban_seed$seed.out" 2>&1 &
  fi
done
wait

experiments=$(echo "$METHODS" | sed 's/\([a-z_]*\)/\1_sokoban/g')
for seed in 1 2; do
  $PY src/train.py -m "experiment=$experiments" debug=cpu_small seed=$seed \
    model.init_from="$PWD/$OUT/bc_sokoban/seed$seed/bc_policy_hf" \
    rl.iterations=$ITERS rl.val_every=$VAL_EVERY rollout.val_episodes=$VAL_EPISODES \
    hydra.sweep.dir="$OUT/sokoban_matrix" > "$OUT/sokoban_matrix_seed$seed.out" 2>&1 &
done
wait
$PY src/report.py "$OUT/sokoban_matrix"
