"""``LazyEngine``: built once, on first use, and it lets go of what it was built from."""

from __future__ import annotations

import gc
import weakref

from arl.rollout.engine import LazyEngine


class _Module:
    """Stands in for the policy module a factory closes over (only its lifetime is checked)."""


class _Engine:
    def __init__(self, module):
        self.built_from = type(module).__name__

    def generate(self, prompts, params, seeds=None):
        return [p.upper() for p in prompts]


def test_built_once_on_first_use_and_the_factory_is_dropped():
    module = _Module()
    calls = []

    def factory(m=module):
        calls.append(1)
        return _Engine(m)

    lazy = LazyEngine(factory)
    assert lazy.engine is None and not calls
    assert lazy.generate(["a"], None) == ["A"] and lazy.generate(["b"], None) == ["B"]
    assert len(calls) == 1 and lazy.engine.built_from == "_Module"
    # the module the factory closed over (a policy that training shards and replaces) is free to go
    ref = weakref.ref(module)
    del module, factory
    gc.collect()
    assert ref() is None
