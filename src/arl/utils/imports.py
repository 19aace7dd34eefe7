"""``"package.module:attribute"`` paths, imported with errors that say what was asked for."""

from __future__ import annotations

import importlib
from typing import Any


def import_attribute(module_name: str, attr: str, what: str) -> Any:
    """``module_name.attr``, imported; an ``ImportError`` naming ``what`` (the setting that asked for it) when
    the module does not import or has no such attribute."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ImportError(f"{what}: cannot import {module_name!r} ({err})") from err
    try:
        return getattr(module, attr)
    except AttributeError as err:
        raise ImportError(f"{what}: module {module_name!r} has no attribute {attr!r}") from err
