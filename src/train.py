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

import logging
import os
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `arl` without installing, too
os.environ.setdefault("ARL_ROOT", str(Path(__file__).resolve().parents[1]))  # logs/ under the repo

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")

# after the sys.path line; light enough for `explain=` and the dry run (the stages' modules load after the checks)
from arl.distributed.placement import export_trainer_devices
from arl.distributed.threads import configure_threads
from arl.plan import startup_check
from arl.run.checks import check_machine, validate_config
from arl.run.explain import explain_key, final_value, format_explanation
from arl.run.resolvers import register_resolvers
from arl.run.resume import finished_results, resolve_ckpt_path
from arl.run.settings import RunSettings
from arl.utils.config import ConfigError, renamed_override_problems

register_resolvers()


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train.yaml")
def main(cfg: DictConfig) -> float | None:
    if cfg.get("explain"):  # which file decided this key? (before validation: an invalid config is explained too)
        return explain(cfg)
    try:
        run = validate_config(cfg)  # the config checked and typed, once: everything below reads `run`
        export_trainer_devices(run.trainer)  # a listed trainer.devices places the engines on the trainer's GPUs
        configure_threads(run.config.get("threads", "auto"))  # before any torch work
        check_machine(run)
        plan_verdict = startup_check(run.config)  # the memory plan (src/plan.py): a GPU run that does not fit stops here
        if cfg.get("dry_run"):
            return dry_run(run, plan_verdict)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    from arl.run.pipeline import train  # lazy: the stages (Lightning, the models) load once the checks passed

    try:
        return train(run)["optimized_metric"]
    except ConfigError as err:  # e.g. ckpt_path=last with no run to resume
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)


def explain(cfg: DictConfig) -> None:
    """Print the chain of config files and command-line overrides that set ``cfg.explain``, in the
    order Hydra merged them, and the final value; nothing runs."""
    key = str(cfg.explain)
    hc = HydraConfig.get()
    overrides = [o for o in hc.overrides.task if not o.startswith(("explain=", "+explain="))]
    print(format_explanation(key, explain_key(key, str(hc.job.config_name), overrides), final_value(cfg, key)))
    _remove_empty_run_folder(Path(str(cfg.paths.output_dir)))


def dry_run(run: RunSettings, plan_verdict: str = "") -> None:
    """Print what the run would be and the memory plan's verdict; nothing is built (the config is
    valid for this machine)."""
    out = run.paths.output_dir
    if finished_results(run.ckpt_path, out, run.rl.iterations) is not None:
        print(f"dry run: {run.task_name}: {out} finished earlier (rl_results.json); nothing to run")
        return
    ckpt = resolve_ckpt_path(run.ckpt_path, run.paths.log_dir, run.task_name, out)
    stages = [s for s, on in (("bc", run.bc.enabled and not run.model.init_from and ckpt is None),
                              ("rl", run.rl.enabled)) if on]
    model = run.model.init_from or run.model.path or run.model.name
    print(
        f"dry run: {run.task_name}: algo={run.algo.name} env={run.env.name} model={model} "
        f"trainer={run.trainer.get('accelerator')}x{run.trainer.get('devices')} rollout={run.rollout.engine} "
        f"stages={'+'.join(stages) or 'none'} iterations={run.rl.iterations}"
        + (f" resume={ckpt}" if ckpt is not None else "")
        + " -- config valid for this machine; nothing was run"
    )
    if plan_verdict:
        print(plan_verdict)
    _remove_empty_run_folder(Path(out))


def _remove_empty_run_folder(out: Path) -> None:
    """A dry run leaves no run folder behind: Hydra made one for its config and log before the
    app started; it goes when it holds nothing else (a multirun's job folders stay, as the sweep)."""
    try:
        if str(HydraConfig.get().mode) != "RunMode.RUN":
            return
    except ValueError:
        return
    if out.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in out.iterdir()):
        logging.shutdown()  # close the file handler of the log before its folder goes
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    if problems := renamed_override_problems(sys.argv[1:]):  # Hydra would refuse them without naming the new key
        print("config error: " + "; ".join(problems), file=sys.stderr)
        sys.exit(2)
    main()
