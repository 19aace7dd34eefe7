"""Typed config sections: frozen dataclasses whose fields are config keys with their checks.

A section is a frozen dataclass; each field is a key made by :func:`setting` (the key's one
default lives in the schema: the ``algo`` group, whose ``base.yaml`` is generated from it),
:func:`required` (the key's value, default included, lives in the yaml: the run groups ``env``,
``rollout``, ``rl``, ``bc``), :func:`absent_or` (a key that only some variants of a group have,
e.g. ``rollout.hf_cache`` of the transformers engine) or :func:`section` (a nested block). A section
with a :func:`rest` field is open: keys it does not name are collected there instead of refused
(``rollout.vllm``, whose other keys go to ``vllm.LLM`` as they are).

:func:`problems` lists every missing, unknown or invalid key of a mapping against a section (and,
once its keys are each valid, what the section's own ``section_problems(node, path)`` finds across
them, where it has one: the ``algo`` parts' signatures against their ``kwargs``) and
:func:`build` returns the typed, validated section (numbers cast to their type), so the code that
reads a config never casts or defaults a value itself. Nothing here imports a config library.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


# --------------------------------------------------------------------------------------------- checks
@dataclass(frozen=True)
class Check:
    """A validation rule: ``problem(value)`` is None or what is wrong; ``rule`` says it for the docs;
    ``cast`` turns an accepted value into the section's type (``int`` for an integer, ...)."""

    rule: str
    problem: Callable[[Any], str | None]
    cast: Callable[[Any], Any] = lambda value: value

    def __call__(self, value: Any) -> str | None:
        return self.problem(value)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def one_of(names: Callable[[], tuple[str, ...]] | tuple[str, ...]) -> Check:
    """A name from ``names`` (a tuple, or a function read when checking, so registries may grow)."""
    listed = names if callable(names) else (lambda: names)

    def problem(value: Any) -> str | None:
        choices = listed()
        if isinstance(value, str) and value in choices:
            return None
        return f"is not valid; valid: {', '.join(choices)}"

    return Check(" \\| ".join(f"`{n}`" for n in listed()), problem)


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False) -> Check:
    """A finite number in [low, high] (``low_open``: (low, ...; ``high_open``: ..., high))."""

    def problem(value: Any) -> str | None:
        if not _is_number(value):
            return "must be a finite number"
        if low is not None and (value <= low if low_open else value < low):
            return f"is out of range: must be {'>' if low_open else '>='} {low}"
        if high is not None and (value >= high if high_open else value > high):
            return f"is out of range: must be {'<' if high_open else '<='} {high}"
        return None

    parts = ([f"{'>' if low_open else '>='} {low}"] if low is not None else []) + (
        [f"{'<' if high_open else '<='} {high}"] if high is not None else []
    )
    return Check("number " + " and ".join(parts) if parts else "number", problem, float)


def integer(low: int) -> Check:
    """An integer >= low (a bool is not one)."""

    def problem(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return "must be an integer"
        return f"is out of range: must be >= {low}" if value < low else None

    return Check(f"integer >= {low}", problem, int)


def optional(check: Check) -> Check:
    """``null`` or what ``check`` accepts."""

    def problem(value: Any) -> str | None:
        return None if value is None else check(value)

    return Check(f"null or {check.rule}", problem, lambda value: None if value is None else check.cast(value))


def _mapping_problem(value: Any) -> str | None:
    return None if is_mapping(value) else "must be a mapping"


def _is_sequence(value: Any) -> bool:
    """A list, a tuple or a list-like config node (an OmegaConf ``ListConfig``), not a string."""
    if isinstance(value, (list, tuple)):
        return True
    list_like = hasattr(value, "__iter__") and hasattr(value, "__len__")
    return list_like and not isinstance(value, (str, bytes)) and not is_mapping(value)


def _strings_problem(value: Any) -> str | None:
    ok = _is_sequence(value) and all(isinstance(s, str) and s for s in value)
    return None if ok else "must be a list of non-empty strings"


BOOLEAN = Check("`true` \\| `false`", lambda value: None if isinstance(value, bool) else "must be true or false")
NON_EMPTY = Check(
    "non-empty string", lambda value: None if isinstance(value, str) and value else "must be a non-empty string"
)
MAPPING = Check("mapping", _mapping_problem, lambda value: dict(value))
STRINGS = Check("list of strings", _strings_problem, tuple)
INSTANTIABLE = Check(
    "mapping with `_target_`",
    lambda value: None if is_mapping(value) and "_target_" in value else "must be a mapping with a _target_",
    lambda value: dict(value),
)


# --------------------------------------------------------------------------------------------- fields
def setting(default: Any, doc: str, check: Check) -> Any:
    """A key whose one default is here, with its meaning and its check."""
    return field(default=default, metadata={"doc": doc, "check": check})


def required(check: Check, doc: str = "") -> Any:
    """A key every config of the group sets: its value (default included) lives in the yaml."""
    return field(metadata={"doc": doc, "check": check})


def absent_or(check: Check, doc: str = "") -> Any:
    """A key only some variants of the group have (None when absent; ``null`` is not accepted for it
    unless ``check`` accepts it)."""
    return field(default=None, metadata={"doc": doc, "check": check, "may_be_absent": True})


def section(cls: type, doc: str = "") -> Any:
    """A nested block of keys."""
    return field(default_factory=cls, metadata={"doc": doc, "section": cls})


def rest(doc: str = "") -> Any:
    """Not a key: the keys of the mapping that the section does not name, as a dict (an open section)."""
    return field(default_factory=dict, metadata={"doc": doc, "rest": True})


def _keyed(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("rest")]


def _is_open(cls: type) -> bool:
    return any(f.metadata.get("rest") for f in dataclasses.fields(cls))


# ----------------------------------------------------------------------------------------- walking it
def keys(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """Every leaf key of the section ``cls`` as ``(dotted path, field)``, in declaration order."""
    for f in _keyed(cls):
        if "section" in f.metadata:
            yield from keys(f.metadata["section"], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f


def key_names(cls: type) -> tuple[str, ...]:
    """The key names of one section (``key_names(AdvantageConfig)``)."""
    return tuple(f.name for f in _keyed(cls))


def is_mapping(x: Any) -> bool:
    """A dict, or a mapping-like config node (an OmegaConf ``DictConfig``)."""
    return isinstance(x, Mapping) or (hasattr(x, "keys") and hasattr(x, "__getitem__") and not isinstance(x, type))


def problems(node: Any, cls: type, path: str) -> list[str]:
    """Every missing, unknown or invalid key of the mapping ``node`` against the section ``cls``,
    each a sentence naming the dotted key (``path`` is the section's own, e.g. ``rl``)."""
    if not is_mapping(node):
        return [f"{path} must be a mapping, got {node!r}"]
    errors: list[str] = []
    known = key_names(cls)
    for key in node:
        if key not in known and not _is_open(cls):
            errors.append(f"{path}.{key} is not a known key; valid keys: {', '.join(known)}")
    for f in _keyed(cls):
        where = f"{path}.{f.name}"
        if f.name not in node:
            if not f.metadata.get("may_be_absent"):
                errors.append(f"{where} is missing")
        elif "section" in f.metadata:
            errors.extend(problems(node[f.name], f.metadata["section"], where))
        else:
            problem = f.metadata["check"](node[f.name])
            if problem is not None:
                errors.append(f"{where}={node[f.name]!r} {problem}")
    rule = getattr(cls, "section_problems", None)  # a rule across the keys of a section whose keys are each valid
    if rule is not None and not errors:
        errors.extend(rule(node, path))
    return errors


def build(cls: type, node: Any) -> Any:
    """The section ``cls`` of a mapping that :func:`problems` accepts, values cast to their type."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("rest"):
            values[f.name] = {k: v for k, v in node.items() if k not in key_names(cls)}
            continue
        if f.name not in node:
            continue  # a key that may be absent keeps its None
        value = node[f.name]
        if "section" in f.metadata:
            values[f.name] = build(f.metadata["section"], value)
        else:
            values[f.name] = f.metadata["check"].cast(value)
    return cls(**values)


def replace(cfg: Any, **changes: Any) -> Any:
    """A copy of a section with dotted changes: ``replace(AlgoConfig(), **{"kl.coef": 0.0})``."""
    nested: dict[str, dict[str, Any]] = {}
    flat: dict[str, Any] = {}
    for key, value in changes.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            flat[head] = value
    for head, inner in nested.items():
        flat[head] = replace(getattr(cfg, head), **inner)
    return dataclasses.replace(cfg, **flat)


def yaml_scalar(value: Any) -> str:
    """A default as YAML writes it (``1.0e-06``: PyYAML reads an exponent as a float only with a dot)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    return str(value)
