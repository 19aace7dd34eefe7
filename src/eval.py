"""Evaluate a policy on held-out validation episodes and print the success table.

    python src/eval.py ckpt_path=logs/sampo_sokoban/runs/<time>/checkpoints/last.ckpt
    python src/eval.py ckpt_path=logs/sampo_sokoban/runs/<time>/policy_hf

A Lightning checkpoint is read together with the config of the run that wrote it (its
``.hydra/config.yaml``), so model and environment settings match the training run; an HF folder is
loaded directly. Command-line overrides (``env.kwargs.num_boxes=2``, ``rollout.val_episodes=256``)
apply on top.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("ARL_ROOT", str(Path(__file__).resolve().parents[1]))  # logs/ under the repo

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="eval.yaml")
def main(cfg: DictConfig) -> float:
    from arl.evaluation import evaluate_from_config

    return evaluate_from_config(cfg)["val/success_rate"]


if __name__ == "__main__":
    main()
