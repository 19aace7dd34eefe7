"""Size a run before it starts: ``python src/plan.py <the overrides of src/train.py>``.

Composes the config exactly as ``src/train.py`` does (the same Hydra config folder and
``train.yaml``, the same resolvers and validation) and prints, in seconds, on any machine and
without building a model or an engine:

1. this process's placement (:func:`arl.distributed.placement.resolve_placement`: launcher, rank,
   local rank, world size, device) and the run's processes;
2. the per-device memory plan (:mod:`arl.plan`, the arithmetic in :mod:`arl.plan.memory`):
   one row per part with where its number comes from, the peak of the update and generation
   phases against ``plan.gpu_memory_gb``, and, when it does not fit, the config keys to change
   ordered by how much each saves;
3. the model's architecture numbers and parameter count.

Exit status: 0 the plan fits; 3 it does not; 2 a config error (as ``src/train.py``); 4 the
launcher's variables do not say where this process runs (a placement error).
Example: ``python src/plan.py experiment=sampo_alfworld trainer.devices=8 plan.gpu_memory_gb=141``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `arl` without installing, too
os.environ.setdefault("ARL_ROOT", str(Path(__file__).resolve().parents[1]))

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")

# after the sys.path line; light (no Hydra composer, no torch): `--help` answers at once
from omegaconf import open_dict
from omegaconf.errors import OmegaConfBaseException

from arl.distributed.placement import PlacementError, export_trainer_devices, resolve_placement
from arl.run.resolvers import register_resolvers
from arl.utils.config import ConfigError, renamed_override_problems

register_resolvers()

EXIT_FITS, EXIT_CONFIG, EXIT_DOES_NOT_FIT, EXIT_PLACEMENT = 0, 2, 3, 4


def compose(overrides: list[str]):
    """The job config ``src/train.py <overrides>`` would run (Hydra's runtime filled in, its run
    folder not created), without its ``hydra`` node."""
    # lazy, as the imports of main: `--help` and a refused `-m` answer without loading Hydra's composer or torch
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(version_base="1.3", config_dir=CONFIG_DIR):
        cfg = hydra_compose(config_name="train.yaml", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(Path(cfg.hydra.run.dir))  # what the run would use; not created here
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return EXIT_FITS
    if any(a in ("-m", "--multirun") for a in argv):
        print("config error: src/plan.py plans one run: pass one job's overrides (no -m)", file=sys.stderr)
        return EXIT_CONFIG
    for problem in renamed_override_problems(argv):  # Hydra would refuse them without naming the new key
        print(f"config error: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    from hydra.errors import HydraException  # lazy: after the answers that need nothing (compose's comment)

    from arl.plan import PlanError, plan_config
    from arl.run.checks import validate_config

    try:
        cfg = compose(argv)
        validate_config(cfg)
        export_trainer_devices(cfg.trainer)
    except (ConfigError, HydraException, OmegaConfBaseException) as err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        placement = resolve_placement()
    except PlacementError as err:
        print(f"placement error: {err}", file=sys.stderr)
        return EXIT_PLACEMENT
    trainer = cfg.trainer
    print(f"placement: this process is {placement.describe()}; the run: trainer.devices={trainer.get('devices')} x "
          f"trainer.num_nodes={trainer.get('num_nodes', 1)} on {trainer.get('accelerator')}")
    try:
        report = plan_config(cfg)
    except PlanError as err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    print(report.text())
    return EXIT_FITS if report.fits else EXIT_DOES_NOT_FIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
