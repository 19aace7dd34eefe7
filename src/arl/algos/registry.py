"""Name -> function registries (verl style).

Every algorithm component (policy loss, advantage estimator, KL estimator, filter) is a small
function registered under a string name, so a config value selects it::

    POLICY_LOSSES = Registry("policy loss")

    @POLICY_LOSSES.register("ppo_clip")
    def ppo_clip(...): ...

    POLICY_LOSSES.get("ppo_clip")  # -> the function
    POLICY_LOSSES.get("nope")      # UnknownNameError: unknown policy loss 'nope'; valid: ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Callable[..., Any])


class UnknownNameError(KeyError, ValueError):
    """Raised for a name that is not registered. Both a ``KeyError`` and a ``ValueError``.

    ``str(err)`` is the plain message (``KeyError`` would otherwise quote it).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """A named mapping from string keys to functions.

    Args:
        name: what the entries are, used in error messages ("policy loss", "advantage estimator").
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._entries: dict[str, T] = {}

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Decorator registering ``fn`` under ``name`` (and optional aliases)."""

        def decorator(fn: T) -> T:
            for key in (name, *aliases):
                if key in self._entries:
                    raise ValueError(f"{self.name} {key!r} is already registered")
                self._entries[key] = fn
            return fn

        return decorator

    def get(self, name: str) -> T:
        """The function registered under ``name``; unknown names raise :class:`UnknownNameError`."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: unhashable name, e.g. a list from a bad config
            raise UnknownNameError(f"unknown {self.name} {name!r}; valid: {', '.join(self.names())}") from None

    def names(self) -> tuple[str, ...]:
        """All registered names (aliases included), sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.name!r}, names={list(self.names())})"


def keyword_parameters(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Names of the parameters of ``fn`` that can be passed by keyword."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(name for name, p in inspect.signature(fn).parameters.items() if p.kind in kinds)
