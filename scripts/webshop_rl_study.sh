#!/usr/bin/env bash
# WebShop from a cloned start on the embedded default (docs/results/webshop_copy/README.md): the tiny model
# cloned by debug=cpu_small's WebShop recipe (expert episodes with the product clicks repeated, so that the
# policy copies ids), then SAMPO and GRPO from that one start on paired seeds, validated on 256 held-out
# tasks (the official val_data_size) at T 0.6, top-p 0.95, top-k 20; success and the WebShop score (mean
# final reward x 100) per run, game by game. Steps, each resumable:
#   START_ONLY=1 bash scripts/webshop_rl_study.sh            # the start (about 40 min at 2 threads), copied to
#                                                           # docs/results/webshop_rl_study/bc_start (commit it)
#   ENV=webshop SEEDS=1,2 bash scripts/calibrate.sh          # lr x penalty grid on selection seeds
#   ARM="<the setting chosen>" SEEDS=11,12,13,14 ARCHIVE=docs/results/webshop_rl_study bash scripts/webshop_rl_study.sh
# Two RL runs at a time (N_JOBS), one torch thread each; the other variables: scripts/study_lib.sh's rl_study.
# Run it from a pinned worktree at low priority (docs/experiments.md, "A long study from a pinned worktree").
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=logs/webshop_rl_study}" "${SEEDS:=11,12,13,14}" "${ITERS:=20}" "${VAL_EVERY:=20}" "${VAL_EPISODES:=256}"
: "${BC_THREADS:=2}"   # the BC start runs alone: both cores (a rebuild that should give the same bits uses the same count)
: "${START:=docs/results/webshop_rl_study/bc_start/bc_policy_hf}"  # the committed start, when present
# the committed start's weights (built 2026-12-06 by START_ONLY=1: 4,138 SFT steps in 36.1 min on 2 threads, 0.586 at
# T 0.6 on 128 held-out tasks); a run from other weights would not pair with the archived ones (BC_SHA256= skips it)
export BC_SHA256=${BC_SHA256-4f03b00b445cc46c5e6f987100a1d228b83891bf625f81c44dbd26d644140b89}
BC_EXPERIMENT=bc_webshop RL_EXPERIMENT=webshop
BC_ARGS=""   # the recipe is debug/budget/cpu_small_webshop.yaml's
RL_ARGS="${ARM:-}"
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
