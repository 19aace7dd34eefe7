"""The OmegaConf resolvers the configs use, registered by each entry point before Hydra composes:
``arl_dirname`` (a run folder's name cut to the file system's limit, :func:`arl.utils.config.short_dirname`)
and ``arl_run_stamp`` (the run folder's stamp, the same on every rank, :func:`arl.distributed.placement.run_stamp`),
both in ``configs/hydra/default.yaml``."""

from __future__ import annotations

from omegaconf import OmegaConf

from arl.distributed.placement import run_stamp
from arl.utils.config import short_dirname


def register_resolvers() -> None:
    """Register ``arl_dirname`` and ``arl_run_stamp`` (each once per process)."""
    if not OmegaConf.has_resolver("arl_dirname"):
        OmegaConf.register_new_resolver("arl_dirname", short_dirname)
    if not OmegaConf.has_resolver("arl_run_stamp"):
        OmegaConf.register_new_resolver("arl_run_stamp", lambda: run_stamp(), use_cache=True)
