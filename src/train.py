"""Train an LLM agent: ``python src/train.py experiment=sampo_sokoban debug=cpu_small`` (= ``make train``).

Composes the Hydra config, validates it and checks that this machine has what it needs (a GPU,
vLLM, the model folder) and, for a run on a GPU, that the memory plan fits (``src/plan.py``,
``plan.check``) before anything heavy is built, and hands it to ``arl.run.pipeline.train``.
Returns the optimised metric for Hydra sweepers. ``explain=<key>`` prints which config files
and overrides set that key, in merge order, and stops. ``dry_run=true`` stops after those checks
(and after resolving ``ckpt_path``), printing what the run would be: every job of a multirun
is checked in seconds.
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

# after the sys.path line; light enough for `explain=` and the dry run (the stages' modules load after the checks)
from arl.distributed.placement import export_trainer_devices
from arl.distributed.threads import configure_threads
from arl.plan import startup_check
from arl.run.checks import check_machine, validate_config
from arl.run.resolvers import register_resolvers
from arl.utils.config import ConfigError

register_resolvers()


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train.yaml")
def main(cfg: DictConfig) -> float | None:
    if cfg.get("explain"):  # which file decided this key? (before validation: an invalid config is explained too)
        return explain(cfg)
    try:
        validate_config(cfg)
        export_trainer_devices(cfg.trainer)  # a listed trainer.devices places the engines on the trainer's GPUs
        configure_threads(cfg.get("threads", "auto"))  # before any torch work
        check_machine(cfg)
        plan_verdict = startup_check(cfg)  # the memory plan (src/plan.py): a GPU run that does not fit stops here
        if cfg.get("dry_run"):
            return dry_run(cfg, plan_verdict)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    from arl.run.pipeline import train  # lazy: the stages (Lightning, the models) load once the checks passed

    try:
        return train(cfg)["optimized_metric"]
    except ConfigError as err:  # e.g. ckpt_path=last with no run to resume
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)


def explain(cfg: DictConfig) -> None:
    """Print the chain of config files and command-line overrides that set ``cfg.explain``, in the
    order Hydra merged them, and the final value; nothing runs."""
    from hydra.core.hydra_config import HydraConfig  # lazy, as explain's own module: only this path needs them

    from arl.run.explain import explain_key, final_value, format_explanation

    key = str(cfg.explain)
    hc = HydraConfig.get()
    overrides = [o for o in hc.overrides.task if not o.startswith(("explain=", "+explain="))]
    print(format_explanation(key, explain_key(key, str(hc.job.config_name), overrides), final_value(cfg, key)))
    _remove_empty_run_folder(Path(str(cfg.paths.output_dir)))


def dry_run(cfg: DictConfig, plan_verdict: str = "") -> None:
    """Print what the run would be and the memory plan's verdict; nothing is built (the config is
    valid for this machine)."""
    from omegaconf import OmegaConf  # lazy: only the dry run reads the config as containers

    from arl.run.resume import finished_results, resolve_ckpt_path

    c = OmegaConf.to_container(cfg, resolve=True)
    if finished_results(c) is not None:
        print(f"dry run: {c['task_name']}: {c['paths']['output_dir']} finished earlier (rl_results.json); nothing to run")
        return
    ckpt = resolve_ckpt_path(c)
    stages = [s for s, on in (("bc", c["bc"]["enabled"] and not c["model"].get("init_from") and ckpt is None),
                              ("rl", c["rl"]["enabled"])) if on]
    model = c["model"].get("init_from") or c["model"].get("path") or c["model"]["name"]
    print(
        f"dry run: {c['task_name']}: algo={c['algo']['name']} env={c['env']['name']} model={model} "
        f"trainer={c['trainer'].get('accelerator')}x{c['trainer'].get('devices')} rollout={c['rollout']['engine']} "
        f"stages={'+'.join(stages) or 'none'} iterations={c['rl']['iterations']}"
        + (f" resume={ckpt}" if ckpt is not None else "")
        + " -- config valid for this machine; nothing was run"
    )
    if plan_verdict:
        print(plan_verdict)
    _remove_empty_run_folder(Path(c["paths"]["output_dir"]))


def _remove_empty_run_folder(out: Path) -> None:
    """A dry run leaves no run folder behind: Hydra made one for its config and log before the
    app started; it goes when it holds nothing else (a multirun's job folders stay, as the sweep)."""
    import shutil  # lazy: only a dry run or explain= removes its folder

    from hydra.core.hydra_config import HydraConfig

    try:
        if str(HydraConfig.get().mode) != "RunMode.RUN":
            return
    except ValueError:
        return
    if out.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in out.iterdir()):
        import logging  # lazy: the one call, at the end of a dry run

        logging.shutdown()  # close the file handler of the log before its folder goes
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
