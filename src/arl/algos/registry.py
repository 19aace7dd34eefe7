"""Name -> function registries (verl style), and the contract an outside function meets.

Every algorithm component (policy loss, advantage estimator, KL estimator, filter) is a small
function registered under a string name, so a config value selects it::

    POLICY_LOSSES = Registry("policy loss", Contract(keywords=("log_prob", ...)))

    @POLICY_LOSSES.register("ppo_clip")
    def ppo_clip(...): ...

    POLICY_LOSSES.get("ppo_clip")            # -> the function
    POLICY_LOSSES.get("mypkg.losses:my_loss")  # -> imported: a function from outside, no fork
    POLICY_LOSSES.get("nope")                # UnknownNameError: unknown policy loss 'nope'; valid: ...

A name ``"package.module:function"`` (as ``env.name=pkg.mod:Class`` for environments) is imported
by :func:`import_function`; :class:`OutsideNameError` says why one cannot be (no such module, no
such attribute, not callable). Each registry holds the :class:`Contract` its caller calls with,
in one place: the start-up validation (:mod:`arl.algos.schema`) checks an outside function's
signature against it, with the section's ``kwargs``, before any model loads.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Callable[..., Any])

#: how a name from outside is spelt (the hint of the error messages)
OUTSIDE_FORM = "package.module:function"


class UnknownNameError(KeyError, ValueError):
    """Raised for a name that is not registered. Both a ``KeyError`` and a ``ValueError``.

    ``str(err)`` is the plain message (``KeyError`` would otherwise quote it).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class OutsideNameError(UnknownNameError):
    """A ``"package.module:function"`` name that does not give a function; ``reason`` says why
    (without the name)."""

    def __init__(self, what: str, name: str, reason: str) -> None:
        super().__init__(f"{what} {name!r}: {reason}")
        self.reason = reason


def import_function(name: str, what: str = "function") -> Callable[..., Any]:
    """The callable at ``"package.module:function"`` (``function`` may be dotted: ``Class.method``),
    imported now. Raises :class:`OutsideNameError` naming what is missing; ``what`` names the kind
    of part in the message ("policy loss")."""
    module_name, _, attr = name.partition(":")
    if not module_name or not attr or ":" in attr:
        raise OutsideNameError(what, name, f"expected '{OUTSIDE_FORM}'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module is someone's code: it may fail in any way while it imports
        raise OutsideNameError(what, name, f"cannot import {module_name!r} ({type(exc).__name__}: {exc})") from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise OutsideNameError(what, name, f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(value):
        raise OutsideNameError(what, name, f"{module_name}.{attr} is not callable (it is of type {type(value).__name__})")
    return value


def _plain(value: Any) -> Any:
    """``value`` with mappings as dicts and sequences as lists, nested (config nodes become plain)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(item) for item in value]
    return value


class Kwargs(Mapping[str, Any]):
    """The extra keyword arguments a section hands its function (``algo.loss.kwargs``): an
    immutable mapping, so a frozen config section can hold it (and default to it). Nested config
    nodes are stored as plain dicts and lists; ``repr`` is the dict's (``{}``, as YAML writes it)."""

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self._items: dict[str, Any] = _plain(dict(items or {}))

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:  # by the keys: a value may be a list (equal mappings have equal keys)
        return hash(tuple(sorted(self._items)))

    def __repr__(self) -> str:
        return repr(self._items)


@dataclass(frozen=True)
class Contract:
    """How the code calls the functions of one registry: what a function from outside must take.

    Attributes:
        positional: the inputs passed by position, in this order (named as the docs name them; the
            function may name its parameters otherwise).
        keywords: the inputs passed by keyword (the function's parameters must have these names).
        returns: what the function returns (docs and error messages).
        settings: the keys of the function's config section that are passed by keyword to a
            function naming them as parameters (a filter's ``atol``), read when checking.
        kwargs: whether the section's ``kwargs`` entries are passed as extra keywords.
    """

    positional: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    returns: str = ""
    settings: Callable[[], tuple[str, ...]] = tuple
    kwargs: bool = True

    def describe(self, what: str) -> str:
        """``"the policy loss is called with log_prob, ... (keywords)"``."""
        parts = []
        if self.positional:
            parts.append(f"{', '.join(self.positional)} (positional)")
        if self.keywords:
            parts.append(f"{', '.join(self.keywords)} (keywords)")
        text = f"the {what} is called with {' and '.join(parts)}"
        if self.settings():
            text += " and the keys of its section it names as parameters"
        return text

    def problems(self, fn: Callable[..., Any], kwargs: Mapping[str, Any], where: str) -> list[str]:
        """What keeps ``fn`` from being called as this contract says with the extra keywords
        ``kwargs`` (the entries of ``<where>.kwargs``): an input it lacks, a parameter the call
        does not give, a kwarg it does not take or that sets an input or a section key. Empty when
        ``inspect.signature(fn).bind(...)`` of the call succeeds; a callable without a signature
        (a builtin) is not checked."""
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return []
        params = signature.parameters
        kind = inspect.Parameter
        fname = getattr(fn, "__name__", type(fn).__name__)
        var_keyword = any(p.kind is kind.VAR_KEYWORD for p in params.values())
        by_position = [p.name for p in params.values() if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)]
        n = len(self.positional)
        out = []
        if len(by_position) < n and not any(p.kind is kind.VAR_POSITIONAL for p in params.values()):
            out.append(f"{fname} takes {len(by_position)} positional parameter(s), the call gives {n}")
        filled = set(by_position[:n])

        def takes(name: str) -> bool:
            p = params.get(name)
            if name in filled:
                return False
            if p is not None and p.kind in (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY):
                return True
            return var_keyword and (p is None or p.kind is kind.POSITIONAL_ONLY)

        lacks = [key for key in self.keywords if not takes(key)]
        if lacks:
            out.append(f"{fname} lacks {', '.join(repr(key) for key in lacks)}")
        settings = self.settings()
        named = [key for key in settings if key in params and takes(key)]
        out += self._kwarg_problems(kwargs, where, fname, takes, filled | set(self.keywords), settings)
        given = filled | set(self.keywords) | set(named) | set(kwargs)
        required = [p.name for p in params.values() if p.default is kind.empty
                    and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD) and p.name not in given]
        if required:
            where_from = f"set it in {where}.kwargs" if self.kwargs else "this part takes no kwargs"
            out.append(f"{fname} requires {', '.join(repr(p) for p in required)}, which the call does not give "
                       f"({where_from})")
        if not out:  # what the checks above do not name: bind the call itself
            try:
                signature.bind(*[None] * n, **dict.fromkeys((*self.keywords, *named)), **kwargs)
            except TypeError as err:
                out.append(f"{fname}: {err}")
        return out


    @staticmethod
    def _kwarg_problems(kwargs: Mapping[str, Any], where: str, fname: str, takes: Callable[[str], bool],
                        inputs: set[str], settings: tuple[str, ...]) -> list[str]:
        """What is wrong with each of ``<where>.kwargs``: it sets an input of the call, or a key of the section,
        or a parameter ``fname`` does not take."""
        out = []
        for key in kwargs:
            if key in inputs:
                out.append(f"{where}.kwargs.{key} sets {key!r}, an input the call gives itself")
            elif key in settings:
                out.append(f"{where}.kwargs.{key}: {key!r} is a key of {where}: set {where}.{key} instead")
            elif not takes(key):
                out.append(f"{fname} has no parameter {key!r} ({where}.kwargs.{key})")
        return out


class Registry(Generic[T]):
    """A named mapping from string keys to functions.

    Args:
        name: what the entries are, used in error messages ("policy loss", "advantage estimator").
        contract: how the caller calls them (checked against a function from outside).
    """

    def __init__(self, name: str, contract: Contract | None = None) -> None:
        self.name = name
        self.contract = contract or Contract()
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
        """The function registered under ``name``, or imported from ``"package.module:function"``;
        an unknown name raises :class:`UnknownNameError`, a path that does not import
        :class:`OutsideNameError` (one of them)."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: unhashable name, e.g. a list from a bad config
            if isinstance(name, str) and ":" in name:
                return import_function(name, self.name)  # type: ignore[return-value]
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
