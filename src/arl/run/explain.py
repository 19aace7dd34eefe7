"""Which file decided this key? The chain of config files and command-line overrides that set one
key of a composed config, in the order Hydra merged them (``src/train.py ... explain=<key>``).

Hydra composes a config from a defaults list (the primary config, its groups, the experiment, the
presets it pulls in, the debug budget ...) and then the command line; the last writer of a key
wins. Hydra itself shows the defaults list (``--info defaults``) but not which of those files set
a given key. :func:`explain_key` walks the same defaults list Hydra computed for the run, reads
each file's own content (its ``defaults`` list aside) under the file's package, and records every
file that sets the key or a mapping containing it, then every command-line override that does.
Values are shown as written (interpolations unresolved).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

_ABSENT = object()


@dataclass(frozen=True)
class Setting:
    """One place that sets the key: ``source`` (``configs/<path>.yaml (package p)`` or
    ``command line``) and the value it writes there (raw)."""

    source: str
    value: Any


def _lookup(tree: Any, dotted: str) -> Any:
    node = tree
    for part in dotted.split(".") if dotted else []:
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _relative(key: str, package: str) -> str | None:
    """``key`` inside a file of ``package`` ('' for _global_), or None when the file cannot set it."""
    if not package:
        return key
    if key == package:
        return ""
    return key[len(package) + 1:] if key.startswith(package + ".") else None


def explain_key(key: str, config_name: str, overrides: Sequence[str]) -> list[Setting]:
    """Every setting of ``key`` for ``config_name`` composed with ``overrides``, in merge order.

    Needs an initialised Hydra (inside ``@hydra.main`` or ``hydra.initialize_config_dir``).
    Hydra's own groups (``hydra/*``) are left out.
    """
    loader = GlobalHydra.instance().config_loader()
    defaults = loader.compute_defaults_list(config_name=config_name, overrides=list(overrides), run_mode=RunMode.RUN)
    found: list[Setting] = []
    for entry in defaults.defaults:
        path = entry.config_path
        if path is None or path.startswith("hydra/") or entry.package is None or entry.package.startswith("hydra"):
            continue
        rel = _relative(key, entry.package)
        if rel is None:
            continue
        loaded = loader.repository.load_config(path)
        if loaded is None:
            continue
        content = OmegaConf.to_container(loaded.config, resolve=False)
        content.pop("defaults", None)
        value = _lookup(content, rel)
        if value is not _ABSENT:
            name = path if path.endswith(".yaml") else f"{path}.yaml"
            where = f"configs/{name}" + (f" (package {entry.package})" if entry.package else " (global)")
            found.append(Setting(where, value))
    parsed = OverridesParser.create().parse_overrides([o for o in overrides if "=" in o])
    for o in parsed:
        target = o.key_or_group
        if o.is_delete():
            if key == target or key.startswith(target + "."):
                found.append(Setting(f"command line: {o.input_line}", "(deleted)"))
            continue
        if target == key:
            found.append(Setting(f"command line: {o.input_line}", o.value()))
        elif key.startswith(target + "."):
            value = _lookup(o.value(), key[len(target) + 1:])
            if value is not _ABSENT:
                found.append(Setting(f"command line: {o.input_line}", value))
    return found


def format_explanation(key: str, settings: Sequence[Setting], final: Any) -> str:
    """The chain as numbered lines, then the final (resolved) value."""
    lines = [f"explain {key}: set by {len(settings)} place(s), in the order Hydra merges them (the last wins)"]
    for i, s in enumerate(settings, 1):
        lines.append(f"  {i}. {s.source}: {s.value!r}")
    if not settings:
        lines.append("  (no config file and no override sets it)")
    lines.append(f"  final value: {final!r}" if final is not _ABSENT else "  final value: (no such key)")
    return "\n".join(lines)


def final_value(cfg, key: str) -> Any:
    """The key's value in the composed config (resolved), or the absent marker."""
    value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
    if value is _ABSENT:
        return _ABSENT
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


__all__ = ["Setting", "explain_key", "final_value", "format_explanation"]
