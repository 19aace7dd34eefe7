#!/usr/bin/env bash
# The CPU-scale study of docs/results.md: every method of the matrix on Sokoban with the tiny model,
# two seeds, each seed's RL runs starting from its own behaviour-cloning run.
#   bash scripts/sokoban_study.sh            # BC for seeds 1 and 2, then 2 x 10 RL runs, then the report
# The two seeds run side by side, one torch thread each (a 2-core machine). Budgets: ITERS RL
# iterations, validation every VAL_EVERY on VAL_EPISODES held-out levels; EXTRA holds further
# overrides for every run (the doc-command test shortens the whole study with it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-logs/study}
ITERS=${ITERS:-10}
VAL_EVERY=${VAL_EVERY:-5}
VAL_EPISODES=${VAL_EPISODES:-128}
METHODS=${METHODS:-grpo,sampo,cispo,cispo_seqmask,sapo,sapo_seqmask,gigpo,dapo_grpo,dapo_gigpo,gspo}
EXTRA=${EXTRA:-}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$OUT"

# the two seeds side by side; a failed run fails the study (wait on each job, not on all)
pids=()
for seed in 1 2; do
  if [ ! -d "$OUT/bc_sokoban/seed$seed/bc_policy_hf" ]; then
    $PY src/train.py experiment=bc_sokoban debug=cpu_small seed=$seed hydra.run.dir="$OUT/bc_sokoban/seed$seed" $EXTRA \
      > "$OUT/bc_sokoban_seed$seed.out" 2>&1 &
    pids+=($!)
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || { echo "study: a BC run failed, see $OUT/bc_sokoban_seed*.out" >&2; exit 1; }; done

pids=()
for seed in 1 2; do
  $PY src/train.py -m experiment=sokoban "algo=$METHODS" debug=cpu_small seed=$seed \
    model.init_from="$(cd "$OUT" && pwd)/bc_sokoban/seed$seed/bc_policy_hf" \
    rl.iterations=$ITERS rl.val_every=$VAL_EVERY rollout.val_episodes=$VAL_EPISODES \
    hydra.sweep.dir="$OUT/sokoban_matrix" $EXTRA > "$OUT/sokoban_matrix_seed$seed.out" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || { echo "study: a matrix run failed, see $OUT/sokoban_matrix_seed*.out" >&2; exit 1; }; done
$PY src/report.py "$OUT/sokoban_matrix"
