"""Evaluate a policy on held-out validation episodes and print the success table.

    python src/eval.py ckpt_path=logs/sampo_sokoban/runs/<time>/checkpoints/last.ckpt
    python src/eval.py ckpt_path=logs/sampo_sokoban/runs/<time>/policy_hf

A Lightning checkpoint is read together with the config of the run that wrote it (its
``.hydra/config.yaml``), so model and environment settings match the training run; an HF folder is
loaded directly. A sharded checkpoint (a folder written under ``trainer=fsdp2``/``fsdp``) is first
consolidated into ``<name>.consolidated`` next to it. Command-line overrides
(``env.kwargs.num_boxes=2``, ``rollout.val_episodes=256``) apply on top.
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

# after the sys.path line; torch-free, so that the threads are set before torch loads
from arl.distributed.threads import configure_threads
from arl.run.resolvers import register_resolvers
from arl.run.resume import checked_checkpoint, checkpoint_problem
from arl.utils.config import ConfigError, renamed_override_problems

register_resolvers()


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="eval.yaml")
def main(cfg: DictConfig) -> float:
    configure_threads(cfg.get("threads", "auto"))  # before any torch work
    from arl.run.evaluation import evaluate_from_config  # lazy: torch and the models load after the threads are set

    ckpt = Path(str(cfg.ckpt_path)).expanduser()
    if ckpt.is_file() or (ckpt.is_dir() and not (ckpt / "config.json").exists()):  # a checkpoint, not an HF folder
        try:  # a truncated or foreign file is refused at once, naming a readable checkpoint beside it
            checked_checkpoint(ckpt, cfg.ckpt_path)
        except ConfigError as err:
            print(f"config error: {err}", file=sys.stderr)
            sys.exit(2)
    if ckpt.is_dir() and (ckpt / "meta.pt").exists():  # a sharded (distributed) Lightning checkpoint
        cfg.ckpt_path = str(consolidate(ckpt))
    return evaluate_from_config(cfg)["val/success_rate"]


def consolidate(folder: Path) -> Path:
    """One ``torch.save`` file (``state_dict`` with full tensors) from a sharded checkpoint folder."""
    from torch.distributed.checkpoint.format_utils import (
        dcp_to_torch_save,  # lazy: a sharded checkpoint only; absent on some builds
    )

    out = folder.with_name(folder.name + ".consolidated")
    if not out.exists() or out.stat().st_mtime < (folder / "meta.pt").stat().st_mtime or checkpoint_problem(out):
        tmp = out.with_name(out.name + ".tmp")  # a kill mid-write must not leave a newer, broken file
        dcp_to_torch_save(folder, tmp)
        os.replace(tmp, out)
    return out


if __name__ == "__main__":
    if problems := renamed_override_problems(sys.argv[1:]):  # Hydra would refuse them without naming the new key
        print("config error: " + "; ".join(problems), file=sys.stderr)
        sys.exit(2)
    main()
