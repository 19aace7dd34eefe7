#!/usr/bin/env bash
# A TextArena single-player game trained with ARL through env=textarena (docs/environments.md, "Bring your own
# environment"): Tower of Hanoi from its opening prompt, BC-free RL on the embedded tiny model, two iterations.
# Other offline games: GuessTheNumber-v0, FrozenLake-v0, Minesweeper-v0-small, Sudoku-v0, ... (configs/env/textarena.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" src/train.py env=textarena env.kwargs.id=TowerOfHanoi-v0 "env.kwargs.answer_hint='a move such as [A C]'" \
  bc.enabled=false debug=smoke "$@"
