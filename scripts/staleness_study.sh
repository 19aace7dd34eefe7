#!/usr/bin/env bash
# Staleness and its correction on Sokoban (docs/results.md, "Asynchronous RL: what staleness costs"):
# SAMPO from the committed BC start of the Sokoban study, in the arena's stage-1 regime (lr 3e-4, 8
# mini-batches a rollout, 40 iterations of 8 x 8 levels), asynchronous with rl.max_staleness 0, 2 and 4,
# each without a correction (pi_old = the behaviour log-probs the engine recorded, the plain ratio) and
# with decoupled PPO's (pi_old recomputed by the learner before the update, the proximal policy; each row
# weighted by pi_prox / pi_behav at the geometric level, GSPO's scale, masked past 5 as AReaL does), on
# SEEDS paired seeds fixed before any run (21-24: no Sokoban study or calibration used them). Validation on
# 256 held-out levels at iterations 0, 20 and 40 at T 0.6. One run at a time (a run is two processes, one
# core each); the seeds outermost, so each seed's six runs land together:
#   bash scripts/staleness_study.sh                                          # runs and report (resumes)
#   ARCHIVE=docs/results/staleness_study bash scripts/staleness_study.sh     # ... and archive the runs (a fresh
#                                                                            # clone resumes from the archived ones)
# About 12 minutes a run on 2 cores, 24 runs; the report's contrasts are CONTRASTS below.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=logs/staleness_study}" "${SEEDS:=21,22,23,24}" "${ITERS:=40}" "${VAL_EVERY:=20}" "${VAL_EPISODES:=256}"
: "${START:=docs/results/sokoban_rl_study/bc_start/bc_policy_hf}"
BC_EXPERIMENT=bc_sokoban RL_EXPERIMENT=sokoban
METHODS=sampo N_JOBS=1
# the planned contrasts, paired by seed (docs/results/findings.yaml's family): what staleness costs without the
# correction, and what the correction recovers at each bound
K0=rl.max_staleness=0,algo.rollout_correction.enabled=False
CONTRASTS="rl.max_staleness=2,algo.rollout_correction.enabled=False - $K0;rl.max_staleness=4,algo.rollout_correction.enabled=False - $K0"
CONTRASTS+=";rl.max_staleness=2,algo.rollout_correction.enabled=True - rl.max_staleness=2,algo.rollout_correction.enabled=False"
CONTRASTS+=";rl.max_staleness=4,algo.rollout_correction.enabled=True - rl.max_staleness=4,algo.rollout_correction.enabled=False"
# shellcheck disable=SC2016  # Hydra interpolations, not shell ones
SUBDIR='sampo_k${rl.max_staleness}_is${algo.rollout_correction.enabled}_seed${seed}'
RL_ARGS="rl.optimizer.lr=3.0e-4 rl.mini_batches=8 rl.max_staleness=0,2,4 algo.rollout_correction.enabled=false,true \
algo.rollout_correction.level=geometric algo.rollout_correction.mode=mask algo.rollout_correction.cap=5 ${ARM:-}"
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
