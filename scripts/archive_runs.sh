#!/usr/bin/env bash
# Copy the finished runs of a multirun folder (those that wrote policy_hf/, the last thing a run
# does) into the repository, without checkpoints: TensorBoard events, the Hydra config, each
# validation's episodes (val_episodes/, when the run wrote them) and the best checkpoint's name (best_checkpoint.txt): enough for `python src/report.py <dest>` to
# rebuild every table and plot.
#   bash scripts/archive_runs.sh logs/study/stage1 docs/results/arena_stage1/runs
set -euo pipefail
SRC=${1:?multirun folder}
DEST=${2:?destination folder}
mkdir -p "$DEST"
n=0
for run in "$SRC"/*/; do
  [ -d "$run/policy_hf" ] || continue
  name=$(basename "$run")
  parts=("$run/tensorboard" "$run/.hydra")
  if [ -d "$run/val_episodes" ]; then parts+=("$run/val_episodes"); fi
  mkdir -p "$DEST/$name"
  for part in "${parts[@]}"; do  # each part replaced whole (plain cp: rsync is not on every machine)
    rm -rf "$DEST/$name/$(basename "$part")"
    cp -a "$part" "$DEST/$name/"
  done
  best=$(ls -t "$run"/checkpoints/best-*.ckpt 2>/dev/null | head -1 || true)
  [ -n "$best" ] && basename "$best" > "$DEST/$name/best_checkpoint.txt"
  n=$((n + 1))
done
echo "archived $n finished runs of $SRC in $DEST"
