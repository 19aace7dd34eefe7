"""``make_env(name, **cfg)``: environments by name, imported lazily.

Heavy engines (alfworld, webshop) are imported only when asked for, so that importing the
registry, e.g. to validate a config, costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

from arl.envs.base import TextEnv

# name -> "module:attribute" of the environment class
_ENVS: dict[str, str] = {
    "sokoban": "arl.envs.sokoban.env:SokobanEnv",
}


def env_names() -> list[str]:
    """The registered environment names, sorted."""
    return sorted(_ENVS)


def env_class(name: str) -> type:
    """The environment class registered as ``name``; a clear error for unknown names."""
    if name not in _ENVS:
        raise KeyError(f"unknown env {name!r}; valid envs: {', '.join(env_names())}")
    module_name, attr = _ENVS[name].split(":")
    return getattr(importlib.import_module(module_name), attr)


def make_env(name: str, **cfg: Any) -> TextEnv:
    """Build the environment ``name`` with keyword configuration ``cfg``."""
    return env_class(name)(**cfg)
