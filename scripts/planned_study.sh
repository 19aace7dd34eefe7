#!/usr/bin/env bash
# Run the study a plan file fixes (arl.analysis.study_plan), and nothing else: its start (hash checked), methods,
# seeds, length, validation points and shared overrides come from the plan, so the runs cannot drift from what
# was committed before them. The runs go seed by seed (SAMPO and GRPO of one seed side by side: each finished
# pair is a paired seed), into logs/<plan name>/rl; the report prints every departure from the plan.
#   PLAN=docs/results/alfworld_long_runs/plan.yaml bash scripts/planned_study.sh   # runs, resumes, reports, archives
# ARCHIVE (default: the plan's folder) receives the finished runs at the end; runs it already holds (an earlier
# session's, another machine's) are put back first and not run again. While the study runs, archive each run as
# it ends: bash scripts/archive_runs.sh logs/<plan name>/rl <plan folder>/runs (then commit it).
# Run it from a pinned worktree at low priority (docs/experiments.md, "A long study from a pinned worktree").
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PLAN:?PLAN=docs/results/<study>/plan.yaml}"
PY=${PY:-.venv/bin/python}
exports=$(PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m arl.analysis.study_plan exports "$PLAN")
eval "$exports"
export OUT=${OUT:-logs/$PLAN_NAME} ARCHIVE=${ARCHIVE-$(dirname "$PLAN")} SEEDS_FIRST=1 PLAN PY
source scripts/study_lib.sh  # single_run, check_start, rl_study
rl_study
