#!/usr/bin/env bash
# ALFWorld from a start with headroom (docs/results.md, "RL from a cloned start: ALFWorld"): the ALFWorld
# study's scope (two task types, pick_and_place_simple and look_at_obj_in_light, 20 turns, 4 groups x 8
# games an iteration) from the strong BC recipe (1200 distinct expert games x 4 epochs with the prompt's
# notes, debug=cpu_small's ALFWorld budget), validated on 256 held-out games (a pool of 256 generated
# valid_seen games, each played once) at T 0.6, top-p 0.95, top-k 20. Stages, each resumable:
#   STAGE=start bash scripts/alfworld_strong_study.sh      # the cloned policy (about 1 h at 2 threads), copied to
#                                                          # docs/results/alfworld_strong/bc_start to be committed
#   STAGE=dagger bash scripts/alfworld_strong_study.sh     # what a DAgger round does to its loops after an error,
#                                                          # against one more epoch on the expert games (each validated
#                                                          # on the 256 games, turns kept; errors table); the DAgger
#                                                          # policy becomes the RL start (bc_start_dagger, committed)
#   STAGE=calibrate bash scripts/alfworld_strong_study.sh  # SAMPO and GRPO, lr {1e-4, 1e-5} x penalty-only
#                                                          # {normalise, center}, selection seeds 1-2 (16 runs)
#   STAGE=confirm bash scripts/alfworld_strong_study.sh    # SAMPO and GRPO at the calibration's choice (ARM),
#                                                          # fresh seeds 11-14 (8 runs)
# ARCHIVE=<folder> copies the finished runs there (scripts/archive_runs.sh). A run archived by an earlier
# session, on another machine, counts as done: its archived record is put back into the multirun folder
# before the sweep starts, so `ckpt_path=resume` leaves it alone and only the missing runs play.
# Run it from a pinned worktree at low priority (docs/experiments.md, "A long study from a pinned worktree").
set -euo pipefail
cd "$(dirname "$0")/.."
: "${STAGE:?STAGE=start|dagger|calibrate|confirm}"
# BASE: the cloned policy (STAGE=start); START: the RL start, BASE after one DAgger round (STAGE=dagger measured it:
# the same success as one more epoch, and far shorter runs of invalid turns after a first error). Both committed;
# the RL stages check START's hash (BC_SHA256= skips the check).
export BASE=${BASE:-docs/results/alfworld_strong/bc_start/bc_policy_hf}
export START=${START:-docs/results/alfworld_strong/bc_start_dagger/bc_policy_hf}
export BC_SHA256=${BC_SHA256-61b62741fe49b097b5c8915717758cba5add0a441f6454217e39af8e70663c1c}
export BC_EPISODES=${BC_EPISODES:-1200} BC_EPOCHS=${BC_EPOCHS:-4}
export ITERS=${ITERS:-16} VAL_EPISODES=${VAL_EPISODES:-256}
export VAL_EVERY=${VAL_EVERY:-$ITERS}
export EXTRA="+env.kwargs.num_games.valid_seen=$VAL_EPISODES ${EXTRA:-}"

case "$STAGE" in
  start)
    export OUT=${OUT:-logs/alfworld_strong} START_ONLY=1
    START=$BASE BC_SHA256= bash scripts/alfworld_cpu_study.sh
    if [ -d "$OUT/bc/.hydra" ]; then  # the run config and record beside it: src/eval.py plays it as its run did
      cp -a "$OUT/bc/.hydra" "$OUT/bc/bc_results.json" "$(dirname "$BASE")/"
      cp "$OUT/bc.sha256" "$(dirname "$BASE")/"
    fi
    exit 0 ;;
  dagger)
    # three policies validated alike (seed 1: the same sampling draws): the start; the start after one DAgger
    # round (the policy plays 128 fresh training games at T 0.4, the expert labels every state it reached, one SFT
    # epoch on the expert games and those turns); the start after one more epoch on the expert games alone (the
    # control: the DAgger round's SFT epoch without its data)
    OUT=${OUT:-logs/alfworld_strong_dagger} PY=${PY:-.venv/bin/python}
    [ -f "$(dirname "$BASE")/.hydra/config.yaml" ] ||
      { echo "BASE=$BASE: no .hydra/config.yaml beside it (STAGE=start puts its run config there)" >&2; exit 2; }
    mkdir -p "$OUT"
    scope="debug=cpu_small env.kwargs.task_types=[pick_and_place_simple,look_at_obj_in_light] env.max_turns=20"
    scope+=" env.kwargs.max_steps=20 rollout.val_episodes=$VAL_EPISODES $EXTRA seed=1 threads=1"
    # the expert games again (the same seeds give the same games), or the start's own dataset when it is here
    data="bc.episodes=$BC_EPISODES"
    [ -f "${BC_DATASET:-logs/alfworld_strong/bc/bc_dataset.jsonl}" ] &&
      data="bc.dataset_path='${BC_DATASET:-logs/alfworld_strong/bc/bc_dataset.jsonl}'"
    bc="experiment=bc_alfworld model.path='$BASE' bc.val_untrained=false bc.bootstrap.enabled=false $data"
    [ -f "$OUT/dagger/bc_results.json" ] ||
      # shellcheck disable=SC2086
      "$PY" src/train.py $bc $scope bc.epochs=0 bc.dagger.enabled=true "hydra.run.dir='$OUT/dagger'" \
        > "$OUT/dagger.out" 2>&1 &
    [ -f "$OUT/extra_epoch/bc_results.json" ] ||
      # shellcheck disable=SC2086
      "$PY" src/train.py $bc $scope bc.epochs=1 bc.dagger.enabled=false "hydra.run.dir='$OUT/extra_epoch'" \
        > "$OUT/extra_epoch.out" 2>&1 &
    eval_extra=""  # eval.py takes the env and rollout keys (the model and env come from the start's own run config)
    for a in $EXTRA; do case $a in env.*|+env.*|rollout.*) eval_extra+=" $a" ;; esac; done
    [ -f "$OUT/start/val_episodes.jsonl" ] ||
      # shellcheck disable=SC2086
      "$PY" src/eval.py "ckpt_path='$BASE'" rollout.val_episodes="$VAL_EPISODES" $eval_extra seed=1 threads=1 \
        "hydra.run.dir='$OUT/start'" > "$OUT/start.out" 2>&1
    wait
    "$PY" src/report.py errors "$OUT/start" "$OUT/dagger" "$OUT/extra_epoch" --name start --name "DAgger round" \
      --name "one more epoch" | tee "$OUT/errors.md"
    if [ ! -f "$START/model.safetensors" ]; then  # the RL start: the DAgger policy, its run config, record and hash
      mkdir -p "$(dirname "$START")"
      cp -a "$OUT/dagger/bc_policy_hf/." "$START/"
      cp -a "$OUT/dagger/.hydra" "$OUT/dagger/bc_results.json" "$(dirname "$START")/"
      (cd "$(dirname "$START")" && sha256sum "$(basename "$START")/model.safetensors" > bc.sha256)
      echo "study: the RL start (the DAgger round's policy) copied to $START (commit it)"
    fi
    exit 0 ;;
  calibrate)
    export OUT=${OUT:-logs/alfworld_strong_calibration} SEEDS=${SEEDS:-1,2} METHODS=${METHODS:-sampo,grpo}
    export GRID=${GRID:-"rl.optimizer.lr=1e-4,1e-5 algo.advantage.penalty_only_groups=normalise,center"}
    ENV=alfworld exec bash scripts/calibrate.sh ;;  # rl_study restores the runs ARCHIVE holds
  confirm)
    export OUT=${OUT:-logs/alfworld_strong_confirmation} SEEDS=${SEEDS:-11,12,13,14}
    : "${ARM:?ARM=<the setting the calibration chose, e.g. rl.optimizer.lr=1e-5 algo.advantage.penalty_only_groups=center>}"
    export ARM
    exec bash scripts/alfworld_cpu_study.sh ;;  # rl_study restores the runs ARCHIVE holds
  *) echo "STAGE=$STAGE: start, dagger, calibrate or confirm" >&2; exit 2 ;;
esac
