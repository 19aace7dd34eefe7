"""Train an LLM agent: ``python src/train.py experiment=sampo_sokoban`` (the default).

Composes the Hydra config, validates it before anything heavy is built, and hands it to
``arl.pipeline.train``. Returns the optimised metric for Hydra sweepers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `arl` without installing, too
os.environ.setdefault("ARL_ROOT", str(Path(__file__).resolve().parents[1]))  # logs/ under the repo

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")

from arl.utils.config import register_resolvers  # noqa: E402 - after the sys.path line

register_resolvers()


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train.yaml")
def main(cfg: DictConfig) -> float | None:
    from arl.utils.config import ConfigError, validate_config
    from arl.utils.threads import configure_threads

    try:
        validate_config(cfg)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    configure_threads(cfg.get("threads", "auto"))  # before any torch work
    from arl.pipeline import train

    try:
        return train(cfg)["optimized_metric"]
    except ConfigError as err:  # e.g. ckpt_path=last with no run to resume
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
