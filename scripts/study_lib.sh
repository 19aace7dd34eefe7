# Shared by the study scripts (arena_study.sh, alfworld_study.sh, alfworld_cpu_study.sh, math_study.sh, ...); sourced, not run.

single_run() {  # <overrides>: those a single run takes (it has no hydra.launcher)
  local a
  for a in $1; do case $a in hydra.launcher.*) ;; *) printf '%s\n' "$a" ;; esac; done
}

check_start() {  # <bc_policy_hf folder> <its name in the message> <variable name>: when the variable
                 # holds a sha256 (the start the archived runs came from, docs/results.md), stop with
                 # exit 1 unless the folder's weights have that hash: runs from another would not pair
  local want=${!3:-} got
  if [ -n "$want" ]; then
    got=$(sha256sum "$1/model.safetensors" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      echo "the BC start $2 differs from $3=$want (its weights: $got): runs from it would not pair with those" >&2
      exit 1
    fi
  fi
}

restore_archived() {  # <archive>: its runs/<name> -> $OUT/rl/<name>, for the finished runs (an earlier session's)
  # the multirun folder lacks; ckpt_path=resume then knows them by their record and does not run them again
  local archive=$1 run name restored=0
  [ -d "$archive/runs" ] || return 0
  mkdir -p "$OUT/rl"
  for run in "$archive"/runs/*/; do
    name=$(basename "$run")
    if [ -f "$run/rl_results.json" ] && [ ! -e "$OUT/rl/$name" ]; then
      cp -a "$run" "$OUT/rl/$name"
      restored=$((restored + 1))
    fi
  done
  [ "$restored" = 0 ] || echo "study: $restored finished runs restored from $archive/runs (not run again)"
}

rl_study() {  # the design every per-env study shares (docs/results.md, "RL from a cloned start"):
  # a BC start built once in $OUT/bc (unless $BC names one), its sha256 in $OUT/bc.sha256 (checked against
  # $BC_SHA256 when set), then METHODS on SEEDS paired seeds from it as one Hydra multirun in $OUT/rl
  # (ckpt_path=resume: the same command resumes an interrupted study; run folders <algo>_seed<k>), then
  # the report (the first two METHODS' difference, and each one's gain over the start per seed), and, when
  # ARCHIVE is set, the finished runs, the BC start's record and the report copied there
  # (scripts/archive_runs.sh); runs already in $ARCHIVE/runs (an earlier session's) are copied into $OUT/rl first and
  # not run again. Reads OUT SEEDS ITERS VAL_EVERY VAL_EPISODES BC_EXPERIMENT RL_EXPERIMENT, and
  # SEEDS_FIRST=1 runs the methods of one seed side by side; PLAN (a plan file) adds the departures to the report;
  # with defaults: PY (.venv/bin/python) METHODS (sampo,grpo) N_JOBS (2) BC_THREADS (1) RL_THREADS (1)
  # SETUP (debug=cpu_small: the study's scale, both stages) BC_ARGS RL_ARGS (each stage's own) EXTRA (the
  # caller's, for every run; hydra.launcher.* ones reach the RL multirun only) SUBDIR (the run folders' name,
  # a Hydra interpolation) BC BC_SHA256 ARCHIVE START (a committed bc_policy_hf folder: the start when it holds
  # weights and BC is unset; when it does not, the study's start is copied there to be committed; START_ONLY=1
  # stops there: the start built, checked and kept, no RL). With one
  # method in METHODS, the report gives its gain; CONTRASTS ("A - B;C - D", settings as the report names them)
  # replaces those contrasts. REPORT=calibration: the calibration table instead (one row per
  # setting of a grid, scripts/calibrate.sh).
  : "${PY:=.venv/bin/python}" "${METHODS:=sampo,grpo}" "${N_JOBS:=2}" "${BC_THREADS:=1}" "${RL_THREADS:=1}"
  : "${SETUP:=debug=cpu_small}" "${BC_ARGS:=}" "${RL_ARGS:=}" "${EXTRA:=}"
  # shellcheck disable=SC2016  # a Hydra interpolation, not a shell one
  [ -n "${SUBDIR:-}" ] || SUBDIR='${algo.name}_seed${seed}'
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  if [ -z "${BC:-}" ] && [ -n "${START:-}" ] && [ -f "$START/model.safetensors" ]; then
    BC=$START  # the start committed beside the archive: the same bytes on any machine, no rebuild
    echo "study: the committed BC start $START"
  fi
  if [ -z "${BC:-}" ]; then  # the study's own BC start, once
    BC=$OUT/bc/bc_policy_hf
    if [ ! -d "$BC" ]; then
      # a fixed thread count (BC_THREADS): float sums then do not depend on what else runs, so a rebuild on
      # another machine of the same kind can give the same weights (checked with BC_SHA256)
      echo "study: the BC start ($BC_EXPERIMENT) in $OUT/bc, log $OUT/bc.out"
      # shellcheck disable=SC2086  # SETUP, BC_ARGS and EXTRA are lists of overrides
      "$PY" src/train.py experiment="$BC_EXPERIMENT" $SETUP $BC_ARGS seed=1 bc.val_untrained=false \
        threads="$BC_THREADS" "hydra.run.dir='$OUT/bc'" $(single_run "$EXTRA") > "$OUT/bc.out" 2>&1 ||
        { echo "the BC run failed: see $OUT/bc.out" >&2; exit 1; }
      sha256sum "$BC/model.safetensors" > "$OUT/bc.sha256"
    fi
  elif [ ! -d "$BC" ]; then
    echo "BC=$BC: no such folder (a BC run's bc_policy_hf)" >&2
    exit 2
  fi
  BC=$(cd "$BC" && pwd)
  check_start "$BC" "$BC" BC_SHA256  # the start the archived runs came from, when given
  if [ -n "${START:-}" ] && [ ! -f "$START/model.safetensors" ]; then  # keep the start's weights (a few MB) to commit
    mkdir -p "$START" && cp -a "$BC/." "$START/"
    echo "study: the BC start copied to $START (commit it: later studies start from these bytes on any machine)"
  fi
  [ "${START_ONLY:-0}" = 1 ] && { echo "study: START_ONLY=1: the start only"; return 0; }
  [ -n "${ARCHIVE:-}" ] && restore_archived "$ARCHIVE"
  echo "study: $METHODS on seeds $SEEDS from $BC, $N_JOBS at a time, in $OUT/rl, log $OUT/rl.out"
  # the methods before the seeds: Hydra varies the last key fastest, so the jobs that run together are one method
  # on several seeds, and the start validation one of them plays is read back by the other methods' runs of its
  # seed (rl.start_validation_cache, docs/experiments.md); SEEDS_FIRST=1 turns it round (the methods of one seed
  # side by side, so that each pair finishes together: a long study cut off between sessions keeps whole pairs)
  local sweep=("algo=$METHODS" "seed=$SEEDS")
  [ "${SEEDS_FIRST:-0}" = 1 ] && sweep=("seed=$SEEDS" "algo=$METHODS")
  # paths go to Hydra quoted: a folder name may hold ',', '=' or brackets
  # shellcheck disable=SC2086
  "$PY" src/train.py -m hydra/launcher=joblib_local hydra.launcher.n_jobs="$N_JOBS" experiment="$RL_EXPERIMENT" $SETUP \
    ckpt_path=resume "model.init_from='$BC'" "${sweep[@]}" rl.iterations="$ITERS" rl.val_every="$VAL_EVERY" \
    rollout.val_episodes="$VAL_EPISODES" threads="$RL_THREADS" "hydra.sweep.dir='$OUT/rl'" \
    "rl.start_validation_cache='$OUT/start_validation'" \
    "hydra.sweep.subdir=$SUBDIR" ${RL_ARGS:-} $EXTRA > "$OUT/rl.out" 2>&1 ||
    { echo "the RL multirun failed: see $OUT/rl.out (the same command resumes it)" >&2; exit 1; }
  if [ "${REPORT:-contrasts}" = calibration ]; then  # a grid (scripts/calibrate.sh): one row per setting
    "$PY" src/report.py calibration "$OUT/rl"
    if [ -n "${ARCHIVE:-}" ]; then
      bash scripts/archive_runs.sh "$OUT/rl" "$ARCHIVE/runs"
      "$PY" src/report.py calibration "$ARCHIVE/runs" --out "$ARCHIVE" > /dev/null
      echo "study: archived in $ARCHIVE (runs/, calibration.md)"
    fi
    return 0
  fi
  local first=${METHODS%%,*} rest=${METHODS#*,}
  # the difference of the first two methods, then each one's own value per seed (its gain over the start)
  local contrasts=(--contrast "algo=$first - algo=${rest%%,*}" --contrast "algo=$first" --contrast "algo=${rest%%,*}")
  [ "$METHODS" = "$first" ] && contrasts=(--contrast "algo=$first")  # one method: its gain over the start
  if [ -n "${CONTRASTS:-}" ]; then  # the study's own planned contrasts instead, ';' between them
    local spec specs
    IFS=';' read -ra specs <<< "$CONTRASTS"
    contrasts=()
    for spec in "${specs[@]}"; do contrasts+=(--contrast "$spec"); done
  fi
  local plan=()  # a planned study (scripts/planned_study.sh): the report prints every departure from its plan
  [ -n "${PLAN:-}" ] && plan=(--plan "$PLAN")
  "$PY" src/report.py "$OUT/rl" "${contrasts[@]}" "${plan[@]}"
  if [ -n "${ARCHIVE:-}" ]; then
    bash scripts/archive_runs.sh "$OUT/rl" "$ARCHIVE/runs"
    if [ -d "$OUT/bc/.hydra" ]; then  # the study's own start: its config, results record and hash
      mkdir -p "$ARCHIVE/bc_start"
      cp -a "$OUT/bc/.hydra" "$OUT/bc/bc_results.json" "$ARCHIVE/bc_start/"
      cp "$OUT/bc.sha256" "$ARCHIVE/bc_start/"
    fi
    "$PY" src/report.py "$ARCHIVE/runs" --out "$ARCHIVE" "${contrasts[@]}" "${plan[@]}" > /dev/null
    echo "study: archived in $ARCHIVE (runs/, report.md, plots)"
  fi
}
