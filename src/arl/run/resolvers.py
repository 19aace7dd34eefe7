"""The OmegaConf resolvers the configs use, registered by each entry point before Hydra composes:
``arl_dirname`` (a run folder's name cut to the file system's limit, :func:`arl.utils.config.short_dirname`)
and ``arl_run_stamp`` (the run folder's stamp, the same on every rank, :func:`arl.distributed.placement.run_stamp`),
both in ``configs/hydra/default.yaml``; ``arl_env_names`` (the envs a run plays, :func:`env_names`), in
``configs/debug/cpu_small.yaml``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from arl.distributed.placement import run_stamp
from arl.envs.registry import MIX_ENV
from arl.utils.config import short_dirname


def env_names(env: Mapping[str, Any]) -> list[str]:
    """The envs an ``env`` section plays: ``[env.name]``, or a mix's member envs (each once, in member order);
    the tiny model's tokenizer learns their text (``model.tiny.corpus_envs`` under ``debug=cpu_small``)."""
    if env.get("name") != MIX_ENV:
        return [env["name"]]
    return list(dict.fromkeys(m["name"] for m in (env.get("members") or {}).values()))


def register_resolvers() -> None:
    """Register ``arl_dirname``, ``arl_run_stamp`` and ``arl_env_names`` (each once per process)."""
    if not OmegaConf.has_resolver("arl_dirname"):
        OmegaConf.register_new_resolver("arl_dirname", short_dirname)
    if not OmegaConf.has_resolver("arl_run_stamp"):
        OmegaConf.register_new_resolver("arl_run_stamp", lambda: run_stamp(), use_cache=True)
    if not OmegaConf.has_resolver("arl_env_names"):
        OmegaConf.register_new_resolver("arl_env_names", env_names)
