"""Ground-floor config helpers: the error type of a bad config value, the config as plain
containers, a typed section read from a config node, and a run folder's short name (the resolvers
that use it: :mod:`arl.run.resolvers`).

The start-up validation of the composed config sits above every room, in :mod:`arl.run.checks`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from arl.utils.schema import build, problems


def container(cfg: Any) -> dict[str, Any]:
    """The config as plain containers (resolved); a mapping passes through as a dict."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)  # type: ignore[return-value]


RUN_DIRNAME_LIMIT = 200  # bytes; file systems allow 255 per name


def short_dirname(name: str, limit: int = RUN_DIRNAME_LIMIT) -> str:
    """A multirun's run-folder name (its overrides) that fits the file system.

    A name of at most ``limit`` bytes is kept as is; a longer one keeps its first bytes and ends in
    ``~`` and a 10-digit hash of the whole name, so distinct runs keep distinct folders (the
    report reads a run's exact overrides from ``.hydra/overrides.yaml``, not from the name).
    """
    raw = name.encode()
    if len(raw) <= limit:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:10]
    return raw[: limit - 11].decode(errors="ignore") + "~" + digest


class ConfigError(ValueError):
    """A config value is invalid; the message names the key."""


# keys renamed since runs were archived: old dotted name -> new. A config (or a command-line override)
# that still gives the old name stops at start-up naming the new one; readers of archived runs' configs
# find the value under either name (:func:`lookup`).
RENAMED_KEYS = {
    "rollout.groups_per_step": "rollout.tasks_per_iteration",  # tasks an iteration: "step" is an optimiser step
    "algo.entropy_coeff": "algo.entropy_coef",  # as kl.coef
}


def _get(node: Any, path: str) -> Any:
    for key in path.split("."):
        node = node.get(key) if hasattr(node, "get") else None
    return node


def lookup(config: Any, path: str) -> Any:
    """The value at the dotted ``path`` of a config mapping (None where it lacks it), read under the
    key's old name (:data:`RENAMED_KEYS`) in a config written before the rename."""
    value = _get(config, path)
    if value is None:
        old = next((o for o, new in RENAMED_KEYS.items() if new == path), None)
        value = _get(config, old) if old else None
    return value


def _has(config: Any, path: str) -> bool:
    parent, key = path.rsplit(".", 1)
    node = _get(config, parent)
    return hasattr(node, "keys") and key in node


def _renamed(given: Callable[[str], bool]) -> list[str]:
    return [f"{old} was renamed {new}: give {new} instead" for old, new in RENAMED_KEYS.items() if given(old)]


def renamed_key_problems(config: Any) -> list[str]:
    """A sentence for each renamed key the config still gives by its old name (a config file
    written before the rename)."""
    return _renamed(lambda old: _has(config, old))


def renamed_override_problems(overrides: list[str]) -> list[str]:
    """A sentence for each command-line override (``key=value``, ``+key=value``, ``~key``) that sets
    a renamed key by its old name: Hydra would refuse it as an unknown key without naming the new one."""
    keys = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    return _renamed(keys.__contains__)


def typed_section(cls: type, node: Any, path: str) -> Any:
    """The checked, typed section ``cls`` (:mod:`arl.utils.schema`) of the config node ``node`` at
    ``path`` (plain containers or a ``DictConfig``; an instance of ``cls`` is returned as it is).

    Raises:
        ConfigError: listing every missing, unknown or invalid key of the node.
    """
    if isinstance(node, cls):
        return node
    node = container(node)
    errors = problems(node, cls, path)
    if errors:
        raise ConfigError(f"invalid {path} config:\n  - " + "\n  - ".join(errors))
    return build(cls, node)
