#!/usr/bin/env bash
# Issue 22's ALFWorld study (docs/results.md, "ALFWorld: RL from the cloned policy"): the tiny model
# cloned with the cpu_small recipe (debug/budget/cpu_small_alfworld.yaml: 1200 expert games, notes,
# 4 epochs), then RL from that one policy with each method on the same paired seeds, then the report
# (gain over the BC start with its interval, success per task type, SAMPO against GRPO):
#   bash scripts/alfworld_study.sh                                   # BC (unless $BC exists), RL, report
#   BC=<bc run>/bc_policy_hf bash scripts/alfworld_study.sh            # RL from an earlier BC policy
#   BC_SHA256=<hash> bash scripts/alfworld_study.sh                  # stop unless the start is that one
# The RL runs are one Hydra multirun (hydra/launcher=joblib_local, N_JOBS at a time, seed first: every
# method finishes seed 1 before seed 2) with ckpt_path=resume in a fixed sweep folder: the same command
# resumes an interrupted study. A run is about 30 iterations x 5-6 min on one core (docs/results.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-logs/alfworld_study}
SEEDS=${SEEDS:-1,2,3}
METHODS=${METHODS:-sampo,grpo}
ITERS=${ITERS:-30}
VAL_EVERY=${VAL_EVERY:-15}
VAL_EPISODES=${VAL_EPISODES:-128}   # 128 distinct held-out games (valid_seen's generated pool is 140)
N_JOBS=${N_JOBS:-1}
BC_THREADS=${BC_THREADS:-1}          # the BC start's torch threads (2 alone on both cores: 1.1 s a step, not 1.7)
EXTRA=${EXTRA:-}   # overrides for every run; hydra.launcher.* ones reach the RL multirun only
source scripts/study_lib.sh  # single_run, check_start
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -z "${BC:-}" ]; then  # the study's own BC start (the ninth attempt's run), once
  BC=$OUT/bc/bc_policy_hf
  if [ ! -d "$BC" ]; then
    # a fixed thread count (BC_THREADS): float sums then do not depend on what else runs, so a rebuild on
    # another machine of the same kind can give the same weights (checked with BC_SHA256)
    "$PY" src/train.py experiment=bc_alfworld debug=cpu_small seed=1 bc.val_untrained=false threads="$BC_THREADS" \
      "hydra.run.dir='$OUT/bc'" $(single_run "$EXTRA") > "$OUT/bc.out" 2>&1 ||
      { echo "the BC run failed: see $OUT/bc.out" >&2; exit 1; }
    sha256sum "$BC/model.safetensors" > "$OUT/bc.sha256"
  fi
elif [ ! -d "$BC" ]; then
  echo "BC=$BC: no such folder (a BC run's bc_policy_hf)" >&2
  exit 2
fi
BC=$(cd "$BC" && pwd)
check_start "$BC" "$BC" BC_SHA256  # the start the archived runs came from, when given
# paths go to Hydra quoted: a folder name may hold ',', '=' or brackets (a multirun job's name does)
"$PY" src/train.py -m hydra/launcher=joblib_local hydra.launcher.n_jobs="$N_JOBS" experiment=alfworld debug=cpu_small \
  ckpt_path=resume "model.init_from='$BC'" "seed=$SEEDS" "algo=$METHODS" rl.iterations="$ITERS" rl.val_every="$VAL_EVERY" \
  rollout.val_episodes="$VAL_EPISODES" "hydra.sweep.dir='$OUT/rl'" $EXTRA > "$OUT/rl.out" 2>&1 ||
  { echo "the RL multirun failed: see $OUT/rl.out (the same command resumes it)" >&2; exit 1; }
"$PY" src/report.py "$OUT/rl" --contrast "algo=sampo - algo=grpo"
