#!/usr/bin/env bash
# The default job (make train: experiment=sampo_sokoban debug=cpu_small) for seeds 1-3, then every
# seed's BC and RL policies on 512 held-out levels, sampled (the paper's T 0.6, top-p 0.95, top-k 20)
# and greedy: the numbers of docs/results.md ("The default job"). About 50 minutes on 2 cores
# (two seeds side by side, then the third, then 12 evaluations).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-logs/default_job}
mkdir -p "$OUT"
run() { $PY src/train.py experiment=sampo_sokoban debug=cpu_small seed=$1 hydra.run.dir=$OUT/seed$1 > $OUT/seed$1.out 2>&1; }
run 1 & p1=$!
run 2 & p2=$!
wait $p1 && wait $p2
run 3
for s in 1 2 3; do
  for p in bc_policy_hf policy_hf; do
    $PY src/eval.py "ckpt_path='$OUT/seed$s/$p'" rollout.val_episodes=512 hydra.run.dir=$OUT/eval/seed$s-$p > $OUT/eval-seed$s-$p.out 2>&1
    $PY src/eval.py "ckpt_path='$OUT/seed$s/$p'" rollout.val_episodes=512 rollout.val_temperature=0 \
      hydra.run.dir=$OUT/eval/seed$s-$p-greedy > $OUT/eval-seed$s-$p-greedy.out 2>&1
  done
done
grep -H "val/success_rate " $OUT/eval-*.out
