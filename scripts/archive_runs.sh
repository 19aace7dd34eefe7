#!/usr/bin/env bash
# Copy the finished runs of a multirun folder (those whose rl_results.json, the last thing a run
# writes, is there) into the repository, without checkpoints: TensorBoard events, the Hydra config,
# the results record, each validation's episodes (val_episodes/, when the run wrote them) and the best
# checkpoint's name (best_checkpoint.txt): enough for `python src/report.py <dest>` to rebuild every
# table and plot. Unfinished runs are counted and left for a later call; runs archived before with the same
# rl_results.json are left as they are. The episodes keep their summaries (seed, task type, won, return,
# turns) and lose their turn-by-turn text (turn_log: about 1 MB per ALFWorld validation), which stays in
# the run folder for `python src/view.py <run>`; KEEP_TURNS=1 archives it too.
#   bash scripts/archive_runs.sh logs/study/stage1 docs/results/arena_stage1/runs
set -euo pipefail
SRC=${1:?multirun folder}
DEST=${2:?destination folder}
mkdir -p "$DEST"
n=0
skipped=0
same=0
for run in "$SRC"/*/; do
  [ -d "$run/.hydra" ] || continue
  # rl_results.json: a run drops it when it trains on, so a finished run extended later is not finished
  if [ ! -f "$run/rl_results.json" ]; then skipped=$((skipped + 1)); continue; fi
  name=$(basename "$run")
  # the same record as the archived one: the run was archived before (and perhaps copied back onto a new
  # machine, where resuming the multirun rewrote its .hydra launcher settings): the archive stays as it was
  if cmp -s "$run/rl_results.json" "$DEST/$name/rl_results.json"; then same=$((same + 1)); continue; fi
  parts=("$run/tensorboard" "$run/.hydra" "$run/rl_results.json")
  if [ -d "$run/val_episodes" ]; then parts+=("$run/val_episodes"); fi
  mkdir -p "$DEST/$name"
  for part in "${parts[@]}"; do  # each part replaced whole (plain cp: rsync is not on every machine)
    rm -rf "$DEST/$name/$(basename "$part")"
    cp -a "$part" "$DEST/$name/"
  done
  if [ -d "$DEST/$name/val_episodes" ] && [ "${KEEP_TURNS:-0}" != 1 ]; then
    for file in "$DEST/$name"/val_episodes/iter*.jsonl; do
      [ -e "$file" ] || continue  # no validation file: nothing to strip
      python3 -c 'import json, os, sys
path = sys.argv[1]
rows = [json.loads(line) for line in open(path) if line.strip()]
with open(path + ".tmp", "w") as f:
    f.writelines(json.dumps({k: v for k, v in r.items() if k != "turn_log"}) + "\n" for r in rows)
os.replace(path + ".tmp", path)' "$file"
    done
  fi
  # -d: a sharded best checkpoint is a folder, named itself rather than listed
  best=$(ls -td "$run"/checkpoints/best-*.ckpt 2>/dev/null | head -1 || true)
  if [ -n "$best" ]; then basename "$best" > "$DEST/$name/best_checkpoint.txt"; fi
  n=$((n + 1))
done
echo "archived $n finished runs of $SRC in $DEST ($same archived before and unchanged, $skipped not finished, left out)"
