#!/usr/bin/env bash
# The three studies beyond the paper (docs/results/<study>/plan.md fixes each before its first run), each two arms on
# four paired seeds on this CPU, two runs at a time:
#   STUDY=adaptive_clip bash scripts/beyond_paper_study.sh   # SAMPO with its clip range fixed, or steered toward a clip
#                                                            # fraction of 0.2 by the controller (algo.clip_control)
#   STUDY=outlier_ratio bash scripts/beyond_paper_study.sh   # GSPO with the geometric or the outlier-weighted sequence
#                                                            # ratio (algo.loss.seq_ratio)
#   STUDY=curriculum bash scripts/beyond_paper_study.sh      # Sokoban 6x6 with 1 box, then 7x7 with 2 boxes once 6x6 is
#                                                            # mastered, against 7x7 from the start (env.curriculum)
#   STUDY=curriculum START_ONLY=1 bash scripts/beyond_paper_study.sh   # the curriculum's BC start only (both levels)
# adaptive_clip and outlier_ratio run in the arena's stage-1 regime, where clipping acts (lr 3e-4, 8 mini-batches a
# rollout: 320 optimiser steps in 40 iterations), from the Sokoban study's committed BC start; the curriculum runs at
# the default CPU regime (lr 1e-4, 2 mini-batches) on Sokoban at two levels (env=sokoban_levels), from a BC start
# cloned on both levels, committed beside its archive. ckpt_path=resume: the same command resumes a cut-off study;
# ARCHIVE=docs/results/<study> also archives the finished runs (and a fresh clone then does not run them again).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${STUDY:?STUDY=adaptive_clip, outlier_ratio or curriculum}"
STRESS="rl.optimizer.lr=3.0e-4 rl.mini_batches=8"  # the arena's stage-1 regime (docs/results.md, "Stage 0: calibration")
SOKOBAN_START=docs/results/sokoban_rl_study/bc_start/bc_policy_hf
SOKOBAN_START_SHA=ad73dda7de2b69788d9c5b60b7eb27bb13ddabbc3eb36cb574d57d00c7aff709
# BC_SHA256: the start's weights the plan fixed (checked before any run; BC_SHA256= with another start skips it)
BC_EXPERIMENT=bc_sokoban RL_EXPERIMENT=sokoban
# shellcheck disable=SC2016  # the run folders' names are Hydra interpolations, not shell ones
case $STUDY in
  adaptive_clip)
    : "${OUT:=logs/adaptive_clip_study}" "${SEEDS:=51,52,53,54}" "${START:=$SOKOBAN_START}"
    BC_SHA256=${BC_SHA256-$SOKOBAN_START_SHA}
    METHODS=sampo
    SUBDIR='sampo_clip_${algo.clip_control.mode}_seed${seed}'
    RL_ARGS="$STRESS algo.clip_control.mode=fixed,adaptive algo.clip_control.target_metric=clipfrac algo.clip_control.target=0.2"
    CONTRASTS="algo.clip_control.mode=adaptive - algo.clip_control.mode=fixed;algo.clip_control.mode=adaptive;algo.clip_control.mode=fixed"
    ;;
  outlier_ratio)
    : "${OUT:=logs/outlier_ratio_study}" "${SEEDS:=55,56,57,58}" "${START:=$SOKOBAN_START}"
    BC_SHA256=${BC_SHA256-$SOKOBAN_START_SHA}
    METHODS=gspo
    SUBDIR='gspo_${algo.loss.seq_ratio}_seed${seed}'
    RL_ARGS="$STRESS algo.loss.seq_ratio=geometric,outlier_weighted"
    CONTRASTS="algo.loss.seq_ratio=outlier_weighted - algo.loss.seq_ratio=geometric;algo.loss.seq_ratio=outlier_weighted;algo.loss.seq_ratio=geometric"
    ;;
  curriculum)
    : "${OUT:=logs/curriculum_study}" "${SEEDS:=59,60,61,62}" "${START:=docs/results/curriculum_study/bc_start/bc_policy_hf}"
    : "${ITERS:=60}" "${VAL_EVERY:=10}"
    BC_SHA256=${BC_SHA256-29cf8e45f4d67a04eb4871c9d42195ebf31190ec38d535cab0ea270548408f8d}  # bc_start/, committed
    METHODS=sampo
    # the 7x7 level as the arena's stage 2 plays it: 20 turns, every level solvable within 20 steps (both stages)
    SETUP="debug=cpu_small env=sokoban_levels env.members.sokoban_7x7.max_turns=20 env.members.sokoban_7x7.kwargs.max_steps=20 \
env.members.sokoban_7x7.kwargs.search_depth=100"
    # env=sokoban_levels in both stages: the start clones both levels (weights 0.5 / 0.5), so both arms start alike, and
    # the multirun's first composition (before the experiment sweep applies) knows the members
    RL_EXPERIMENT=curriculum_sokoban,curriculum_sokoban_control
    SUBDIR='${task_name}_seed${seed}'
    CONTRASTS="experiment=curriculum_sokoban - experiment=curriculum_sokoban_control;experiment=curriculum_sokoban;experiment=curriculum_sokoban_control"
    ;;
  *)
    echo "STUDY=$STUDY: no such study (adaptive_clip, outlier_ratio, curriculum)" >&2
    exit 2
    ;;
esac
: "${ITERS:=40}" "${VAL_EVERY:=20}" "${VAL_EPISODES:=256}"  # the curriculum sets its own first
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
