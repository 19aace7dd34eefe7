"""The ``logger`` config group as Lightning loggers, one set per stage (``bc``, ``rl``).

Every logger gets the same metric names at the same steps (the RL module and the callbacks call
``log_metrics`` on each of ``trainer.loggers``), so a curve read from TensorBoard, the CSV file,
W&B or MLflow is the same curve. What differs per tracker is where a stage's records go:

==============  =====================================================  ==============================
logger          records of stage ``<stage>``                           package (extra)
==============  =====================================================  ==============================
tensorboard     ``<run>/tensorboard/<stage>/events.*``                 tensorboard (core)
csv             ``<run>/csv/<stage>/metrics.csv``, ``hparams.yaml``    (core)
wandb           ``<run>/wandb/offline-run-*``: offline unless           wandb (``arl[trackers]``)
                ``WANDB_API_KEY`` is set; run name ``<task>-<stage>``,
                closed when the stage ends (:func:`end_stage`)
mlflow          ``<run>/mlruns`` (a local file store, which MLflow 3    mlflow (``arl[trackers]``)
                opts into with ``MLFLOW_ALLOW_FILE_STORE``: set here
                for ``file:`` URIs); run name ``<task>-<stage>``
==============  =====================================================  ==============================

The resolved config is logged once per stage as hyperparameters (flattened dotted keys). A resumed
RL stage continues TensorBoard's and the CSV file's curves (the steps from the resumed iteration on
are dropped first); W&B and MLflow start a new run for it, as they do for each BC round (bootstrap,
DAgger) under MLflow.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import Any

from hydra.utils import instantiate

from arl.run.settings import RunSettings
from arl.utils.config import ConfigError

# logger class -> (module it needs, the extra that installs it)
TRACKER_PACKAGES = {
    "WandbLogger": ("wandb", "trackers"),
    "MLFlowLogger": ("mlflow", "trackers"),
    "CometLogger": ("comet_ml", None),
    "NeptuneLogger": ("neptune", None),
}
STAGE_AS_VERSION = ("TensorBoardLogger", "CSVLogger")  # these take the stage as their version folder


def _class_name(lg_cfg: Mapping[str, Any]) -> str:
    return str(lg_cfg["_target_"]).rsplit(".", 1)[-1]


def configured_loggers(logger: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The entries of the ``logger`` group that build a logger (``_target_`` set, not null), by name."""
    return {name: dict(lg) for name, lg in (logger or {}).items() if lg is not None and "_target_" in lg}


def tracker_problem(logger: Mapping[str, Any]) -> str | None:
    """Why the loggers of the ``logger`` group cannot be built on this machine (a tracker's package
    is not installed), or None. ``check_machine`` raises it at start-up."""
    for name, lg in configured_loggers(logger).items():
        need = TRACKER_PACKAGES.get(_class_name(lg))
        if need is not None and importlib.util.find_spec(need[0]) is None:
            module, extra = need
            how = f"pip install -e '.[{extra}]' (or pip install 'arl[{extra}]')" if extra else f"pip install {module}"
            return f"logger.{name} ({_class_name(lg)}) needs the {module} package, which is not installed: {how}"
    return None


def build_loggers(run: RunSettings, stage: str, purge_step: int | None = None) -> list:
    """Instantiate the ``logger`` group of ``run`` for ``stage`` (``bc``, ``rl``).

    TensorBoard and CSV get the stage as their version folder; W&B and MLflow a run per stage named
    ``<task_name>-<stage>`` (W&B offline unless its ``offline`` is set or ``WANDB_API_KEY`` is).
    ``purge_step`` (resumed runs): TensorBoard drops the steps >= it that an earlier event file of
    the same version holds, so a curve has no duplicated iteration after a resume.
    """
    problem = tracker_problem(run.logger)
    if problem:
        raise ConfigError(problem)
    run_name = f"{run.task_name}-{stage}"
    loggers = []
    for lg_cfg in configured_loggers(run.logger).values():
        kwargs: dict[str, Any] = {}
        cls = _class_name(lg_cfg)
        if cls in STAGE_AS_VERSION:
            kwargs["version"] = stage
        if cls == "TensorBoardLogger" and purge_step is not None:
            kwargs["purge_step"] = purge_step
        if cls == "CSVLogger" and purge_step is not None:
            purge_csv_rows(os.path.join(str(lg_cfg.get("save_dir")), str(lg_cfg.get("name") or ""), stage, "metrics.csv"),
                           purge_step)
        if cls == "WandbLogger":
            kwargs["name"] = lg_cfg.get("name") or run_name
            kwargs["job_type"] = stage
            if lg_cfg.get("offline") is None:
                kwargs["offline"] = not os.environ.get("WANDB_API_KEY")
            os.makedirs(lg_cfg.get("save_dir") or ".", exist_ok=True)
            _join_or_finish_wandb_run((run.paths.output_dir, stage))
        if cls == "MLFlowLogger":
            kwargs["run_name"] = lg_cfg.get("run_name") or run_name
            if str(lg_cfg.get("tracking_uri") or "").startswith("file:"):
                # MLflow 3 keeps its file store in maintenance mode and refuses it without this opt-in;
                # a local folder is what a run without a tracking server needs
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        loggers.append(instantiate(lg_cfg, **kwargs))
    return loggers


_WANDB_STAGE: tuple[str, str] | None = None  # (run folder, stage) of this process's open W&B run


def _join_or_finish_wandb_run(stage_key: tuple[str, str]) -> None:
    """Before a W&B logger is built: close this process's open W&B run unless it is this stage's
    of this run folder (Lightning's WandbLogger joins an open run: BC's rounds share theirs, but the
    RL stage, or the next job of a multirun in this process, must not write into it)."""
    global _WANDB_STAGE
    import wandb  # optional: the trackers extra (logger=wandb)

    if wandb.run is not None and _WANDB_STAGE != stage_key:
        wandb.finish()
    _WANDB_STAGE = stage_key


def end_stage() -> None:
    """A stage is over: close its W&B run (its records complete on disk; the next stage opens its
    own). Nothing to do for the other trackers, whose files are written as they log."""
    global _WANDB_STAGE
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()
    _WANDB_STAGE = None


def purge_csv_rows(path: str, purge_step: int) -> None:
    """Drop the rows of a CSVLogger file at steps >= ``purge_step`` (a resumed run logs them again),
    as TensorBoard's ``purge_step`` drops its events; written whole or not at all."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "step" not in rows[0]:
        return
    col = rows[0].index("step")
    kept = [rows[0]] + [r for r in rows[1:] if not (len(r) > col and r[col] != "" and int(float(r[col])) >= purge_step)]
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        csv.writer(f).writerows(kept)
    os.replace(tmp, path)


def flat_hyperparameters(c: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config as ``{dotted.key: value}``: lists become their string, None the string ``null``
    (what every tracker can store)."""
    out: dict[str, Any] = {}
    for key, value in c.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_hyperparameters(value, name + "."))
        elif value is None:
            out[name] = "null"
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


def log_hyperparameters(loggers: list, c: Mapping[str, Any]) -> None:
    """The composed config ``c`` (``RunSettings.config``), flattened, once to each logger (rank 0
    only: Lightning's loggers are rank-zero). ``hydra`` and ``paths`` are left out: they say where,
    not what, was run."""
    params = flat_hyperparameters({k: v for k, v in c.items() if k not in ("hydra", "paths")})
    for logger in loggers:
        logger.log_hyperparams(params)
