#!/usr/bin/env bash
# The default job (make train) under the official protocol: 3 seeds, then eval of BC and RL policies on 512 levels.
cd /work/main
export ARL_CACHE=/work/main/.cache/arl
PY=.venv/bin/python
OUT=logs/default_job
run() { $PY src/train.py experiment=sampo_sokoban debug=cpu_small seed=$1 hydra.run.dir=$OUT/seed$1 > $OUT/seed$1.out 2>&1; }
run 1 & run 2 & wait
run 3
for s in 1 2 3; do
  for p in bc_policy_hf policy_hf; do
    $PY src/eval.py "ckpt_path='$OUT/seed$s/$p'" rollout.val_episodes=512 hydra.run.dir=$OUT/eval/seed$s-$p > $OUT/eval-seed$s-$p.out 2>&1
    $PY src/eval.py "ckpt_path='$OUT/seed$s/$p'" rollout.val_episodes=512 rollout.val_temperature=0 hydra.run.dir=$OUT/eval/seed$s-$p-greedy > $OUT/eval-seed$s-$p-greedy.out 2>&1
  done
done
echo done > $OUT/DONE
