"""EnvPool: a set of environment slots stepped together.

The agent loop talks to environments only through this pool: ``reset`` opens one slot per
episode, ``step`` advances a set of slots. Environments run in this process; a slot whose
environment raises is closed, marked as an environment error and reported as done, so one broken
episode never stops the batch.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from arl.envs.base import EnvSpec, StepResult
from arl.envs.registry import make_env

log = logging.getLogger(__name__)


class EnvPool:
    """Environment slots for one rollout."""

    def __init__(self, env_name: str, env_kwargs: dict[str, Any] | None = None):
        self.env_name = env_name
        self.env_kwargs = dict(env_kwargs or {})
        self._probe = make_env(env_name, **self.env_kwargs)
        self.spec: EnvSpec = self._probe.spec
        self._envs: list[Any] = []
        self.errors = 0

    def reset(self, seeds: Sequence[int]) -> list[tuple[str, dict[str, Any], bool]]:
        """Open one slot per seed; returns (observation, info, env_error) per slot."""
        self.close_slots()
        out = []
        for seed in seeds:
            env = make_env(self.env_name, **self.env_kwargs)
            try:
                obs, info = env.reset(int(seed))
                out.append((obs, info, False))
            except Exception:  # an environment bug must not stop the batch
                log.exception("env %s reset(seed=%s) failed", self.env_name, seed)
                self.errors += 1
                obs, info = "", {"task": "", "task_type": "unknown", "won": False, "anchor": ""}
                out.append((obs, info, True))
            self._envs.append(env)
        return out

    def step(self, actions: dict[int, str]) -> dict[int, tuple[StepResult, bool]]:
        """Step the given slots; returns slot -> (result, env_error)."""
        out = {}
        for slot, action in actions.items():
            try:
                out[slot] = (self._envs[slot].step(action), False)
            except Exception:
                log.exception("env %s step failed in slot %d", self.env_name, slot)
                self.errors += 1
                out[slot] = (StepResult("", 0.0, True, {"won": False}), True)
        return out

    def close_slots(self) -> None:
        for env in self._envs:
            try:
                env.close()
            except Exception:  # closing is best effort
                pass
        self._envs = []

    def close(self) -> None:
        self.close_slots()
        self._probe.close()
