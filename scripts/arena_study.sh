#!/usr/bin/env bash
# The arena study of docs/results.md ("The arena study"), on Sokoban with the tiny model, two runs
# at a time on two cores (hydra/launcher=joblib_local, one torch thread each):
#   bash scripts/arena_study.sh                 # stages 0, 1 and 2, each followed by its report
#   STAGE=0 bash scripts/arena_study.sh         # calibration only
#   STAGE=2 bash scripts/arena_study.sh         # credit assignment on a longer-horizon Sokoban only
#   STAGE=2b bash scripts/arena_study.sh        # the stage-aware filter against DAPO, from a start
#                                               # that has not learned the answer format
# Every multirun uses ckpt_path=resume with a fixed sweep folder: after an interruption, the same
# command resumes the unfinished runs (finished ones stop at once). All runs start from one
# behaviour-cloned policy (BC=<folder> to give another; a missing one stops the script): the default
# job's BC stage, seed 1.
# Stage 1's regime (LR, MB) is the one stage 0 chose; SEEDS are paired (every method runs every seed).
# Stage 2 plays 7x7 rooms with two boxes and 20 turns (LONG) from its own BC start (BC2), at the
# default CPU regime (LR2, MB2): it compares advantages and filters, not clipping under stress.
# Stage 2b plays stage 2's Sokoban from a barely cloned start (WEAK_BC expert episodes, one epoch:
# valid-action ratio 0.74, success 0), the regime the stage-aware filter is for (METHODS2B).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-logs/study}
STAGE=${STAGE:-all}
LR=${LR:-3.0e-4}
MB=${MB:-8}
SEEDS=${SEEDS:-1,2,3,4}
ITERS=${ITERS:-40}
VAL_EVERY=${VAL_EVERY:-10}
VAL_EPISODES=${VAL_EPISODES:-64}
METHODS=${METHODS:-grpo,gspo,cispo,sapo,cispo_seqmask,sapo_seqmask,sampo}
# stage_aware_gigpo is dapo_gigpo while the valid-format ratio is >= 0.9, as it is from this BC start
# (1.000): it runs in stage 2b, from a start that has not learned the format yet
METHODS2=${METHODS2:-grpo,gigpo,dapo_grpo,dapo_gigpo,sampo}
ITERS2=${ITERS2:-60}
LR2=${LR2:-1.0e-4}
MB2=${MB2:-2}
VAL_EVERY2=${VAL_EVERY2:-20}
VAL_EPISODES2=${VAL_EPISODES2:-128}
METHODS2B=${METHODS2B:-dapo_gigpo,stage_aware_gigpo}
WEAK_BC=${WEAK_BC:-96}
LONG=(env.max_turns=20 "env.kwargs.dim_room=[7,7]" env.kwargs.num_boxes=2 env.kwargs.search_depth=100 env.kwargs.max_steps=20)
EXTRA=${EXTRA:-}   # overrides for every run; hydra.launcher.* ones reach the multiruns only
source scripts/study_lib.sh  # single_run, check_start
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# paths go to Hydra quoted: a folder name may hold ',', '=' or brackets (a multirun job's name does)
start() {  # <variable name> <default folder name> <BC arguments...>: the BC start's bc_policy_hf, built
           # once into $OUT/<name> when the variable is not set; a given folder that is missing stops here.
           # One thread: float sums then do not depend on what else runs, so a rebuild on another machine
           # of the same kind gives the same weights bit for bit (docs/results.md, stage 2) and runs
           # from either pair with each other
  local var=$1 name=$2 given=${!1:-} sha=${1}_SHA256 policy
  shift 2
  if [ -n "$given" ]; then
    if [ ! -d "$given" ]; then echo "$var=$given: no such folder (a BC run's bc_policy_hf)" >&2; exit 2; fi
    policy=$(cd "$given" && pwd)
  else
    policy=$OUT/$name/bc_policy_hf
    if [ ! -d "$policy" ]; then
      "$PY" src/train.py experiment=sampo_sokoban debug=cpu_small seed=1 rl.enabled=false threads=1 "$@" \
        "hydra.run.dir='$OUT/$name'" $(single_run "$EXTRA") > "$OUT/$name.out" 2>&1 ||
        { echo "the BC start $name failed: see $OUT/$name.out" >&2; exit 1; }
      sha256sum "$policy/model.safetensors" > "$OUT/$name.sha256"  # to compare with another build
    fi
  fi
  check_start "$policy" "$name" "$sha"  # <var>_SHA256: the start the archived runs came from
  echo "$policy"
}
if [ "$STAGE" = 0 ] || [ "$STAGE" = 1 ] || [ "$STAGE" = all ]; then  # stage 2 and 2b have their own starts
  BC=$(start BC bc_start)  # the same BC as `make train` seed 1 makes before its RL stage
fi
COMMON=(hydra/launcher=joblib_local experiment=sokoban debug=cpu_small ckpt_path=resume)
failed() {  # <sweep name>: a multirun that failed stops the study with where to look
  echo "the multirun $1 failed: see $OUT/$1.out (the same command resumes it)" >&2
  exit 1
}
long_multirun() {  # <BC start> <methods> <sweep name>: stage 2's protocol on the long Sokoban
  "$PY" src/train.py -m "${COMMON[@]}" "model.init_from='$1'" "${LONG[@]}" "seed=$SEEDS" "algo=$2" \
    rl.iterations=$ITERS2 rl.val_every=$VAL_EVERY2 rollout.val_episodes=$VAL_EPISODES2 rl.optimizer.lr=$LR2 \
    rl.mini_batches=$MB2 "hydra.sweep.dir='$OUT/$3'" $EXTRA > "$OUT/$3.out" 2>&1 || failed "$3"
}

if [ "$STAGE" = 0 ] || [ "$STAGE" = all ]; then
  # stage 0: where does IS clipping act? token clip (GRPO), sequence clip (GSPO), CISPO's cap
  "$PY" src/train.py -m "${COMMON[@]}" "model.init_from='$BC'" algo=grpo,gspo,cispo seed=1 rl.iterations=20 rl.val_every=20 \
    rollout.val_episodes=32 rl.optimizer.lr=3e-4,1e-3 rl.mini_batches=8,16 "hydra.sweep.dir='$OUT/stage0'" $EXTRA \
    > "$OUT/stage0.out" 2>&1 || failed stage0
  "$PY" src/report.py "$OUT/stage0"
fi
if [ "$STAGE" = 1 ] || [ "$STAGE" = all ]; then
  # stage 1: collapse and rescue, paired seeds (seed first: every method finishes seed 1 before seed 2)
  "$PY" src/train.py -m "${COMMON[@]}" "model.init_from='$BC'" "seed=$SEEDS" "algo=$METHODS" rl.iterations=$ITERS \
    rl.val_every=$VAL_EVERY rollout.val_episodes=$VAL_EPISODES rl.optimizer.lr=$LR rl.mini_batches=$MB \
    "hydra.sweep.dir='$OUT/stage1'" $EXTRA > "$OUT/stage1.out" 2>&1 || failed stage1
  "$PY" src/report.py "$OUT/stage1" --contrast "algo=sampo - algo=grpo" --contrast "algo=gspo - algo=grpo" \
    --contrast "algo=cispo - algo=grpo" --contrast "algo=sapo - algo=grpo" \
    --contrast "algo=cispo_seqmask - algo=cispo" --contrast "algo=sapo_seqmask - algo=sapo"
fi
if [ "$STAGE" = 2 ] || [ "$STAGE" = all ]; then
  # stage 2: credit assignment on a longer horizon (GiGPO against GRPO, with and without DAPO)
  BC2=$(start BC2 bc_start_long "${LONG[@]}")
  long_multirun "$BC2" "$METHODS2" stage2
  "$PY" src/report.py "$OUT/stage2" --contrast "algo=gigpo - algo=grpo" --contrast "algo=sampo - algo=grpo" \
    --contrast "algo=dapo_grpo - algo=grpo" --contrast "algo=dapo_gigpo - algo=gigpo" \
    --contrast "algo=dapo_gigpo - algo=gigpo - algo=dapo_grpo + algo=grpo"
fi
if [ "$STAGE" = 2b ] || [ "$STAGE" = all ]; then
  # stage 2b: the stage-aware filter keeps all-failure groups while the valid-action ratio is < 0.9;
  # from stage 2's start (1.000) it is DAPO, so it runs from a start that has not learned the format
  BC2B=$(start BC2B bc_start_weak "${LONG[@]}" bc.episodes=$WEAK_BC bc.epochs=1 bc.bootstrap.enabled=false)
  long_multirun "$BC2B" "$METHODS2B" stage2b
  "$PY" src/report.py "$OUT/stage2b" --contrast "algo=stage_aware_gigpo - algo=dapo_gigpo"
fi
