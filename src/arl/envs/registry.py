"""``make_env(name, **cfg)``: environments by name, imported lazily.

Heavy engines (alfworld, webshop) are imported only when asked for, so that importing the
registry, e.g. to validate a config, costs nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

from arl.envs.base import TextEnv
from arl.utils.imports import import_attribute

# name -> "module:attribute" of the environment class
_ENVS: dict[str, str] = {
    "sokoban": "arl.envs.sokoban.env:SokobanEnv",
    "alfworld": "arl.envs.alfworld.env:AlfWorldEnv",
    "math_tool": "arl.envs.math_tool.env:MathToolEnv",
    "webshop": "arl.envs.webshop.env:WebShopEnv",
    "gym": "arl.envs.adapters.gym_text:GymTextEnv",  # the ecosystem extra
    "textarena": "arl.envs.adapters.textarena_env:TextArenaEnv",  # the ecosystem extra
    "openenv": "arl.envs.adapters.openenv_env:OpenEnvEnv",  # the openenv extra
}


#: env.name of the episodes a user's agent program plays through the recording gateway (arl.agent.programs)
PROGRAM_ENV = "program"
#: env.name of the episodes of a verifiers environment, played through the gateway (arl.agent.verifiers_loop)
VERIFIERS_ENV = "verifiers"
#: env name -> "module:Class" of the loop whose episodes something else plays through the recording gateway
#: (rather than the agent loop against a TextEnv)
_GATEWAY_LOOPS: dict[str, str] = {
    PROGRAM_ENV: "arl.agent.programs:ProgramLoop",
    VERIFIERS_ENV: "arl.agent.verifiers_loop:VerifiersLoop",
}
GATEWAY_ENVS = tuple(_GATEWAY_LOOPS)
#: env.name of a mixture of the envs above, each task played in one member (env=mix, arl.agent.mix)
MIX_ENV = "mix"

# name -> (the packages an env needs, the extra that brings them): checked at start-up (arl.run.checks)
_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "gym": (("gymnasium",), "ecosystem"),
    "textarena": (("textarena",), "ecosystem"),
    "openenv": (("openenv", "uvicorn"), "openenv"),  # openenv-core (its client; uvicorn serves env.kwargs.app)
    PROGRAM_ENV: (("uvicorn", "starlette"), "ecosystem"),  # the recording gateway's HTTP server
    VERIFIERS_ENV: (("verifiers", "uvicorn", "starlette"), "ecosystem"),  # verifiers.v1, through the gateway
}


def missing_package(name: str) -> str | None:
    """Why env ``name`` cannot run here (a package of an optional extra not installed), or None."""
    packages, extra = _PACKAGES.get(name, ((), ""))
    if name == VERIFIERS_ENV and sys.version_info < (3, 11):
        return f"env={name} needs Python 3.11 or newer (verifiers 0.4); this is {sys.version.split()[0]}"
    for package in packages:
        if importlib.util.find_spec(package) is None:
            return f"env={name} needs the {package!r} package: pip install -e '.[{extra}]' (make install brings it)"
    return None


def gateway_loop_class(name: str) -> type:
    """The loop class of gateway env ``name`` (``program``, ``verifiers``), imported now: its optional packages
    are checked at start-up (:func:`missing_package`)."""
    module_name, attr = _GATEWAY_LOOPS[name].split(":", 1)
    return getattr(importlib.import_module(module_name), attr)


def env_names() -> list[str]:
    """The registered environment names, sorted."""
    return sorted(_ENVS)


def env_path(name: str) -> str:
    """``"module:Class"`` of ``name``: a registered name, or already a ``"module:Class"`` path.

    The path form lets a project plug in its own environment class without editing the registry
    (``env.name=mypkg.envs:MyEnv``).
    """
    if ":" in name:
        return name
    if name not in _ENVS:
        raise KeyError(f"unknown env {name!r}; valid envs: {', '.join(env_names())} (or 'package.module:Class')")
    return _ENVS[name]


def env_class(name: str) -> type:
    """The environment class registered as ``name`` (or at ``"module:Class"``); clear errors."""
    missing = missing_package(name)
    if missing:
        raise ImportError(missing)
    module_name, attr = env_path(name).split(":", 1)
    return import_attribute(module_name, attr, f"env {name!r}")


def make_env(name: str, **cfg: Any) -> TextEnv:
    """Build the environment ``name`` with keyword configuration ``cfg``."""
    return env_class(name)(**cfg)
