"""A deterministic test environment that fails on purpose, by seed (for EnvPool tests).

``seed % 10`` picks the behaviour at the second step (``step`` number 2):

- 3: raises ``RuntimeError``;
- 4: returns a reward of NaN (valid JSON to Python, and what a buggy env computes);
- 5: hangs in Python (``time.sleep``), which the worker's ``SIGALRM`` interrupts;
- 7: kills its own process (``os._exit``), as a segfault would;
- 8: hangs with ``SIGALRM`` blocked, as C code that no signal interrupts, so only the parent's
  deadline catches it.

Every other seed is a healthy counter game: the observation is ``seed:step``, the reward is the
step number, and the episode ends (won) at ``length`` steps.
"""

from __future__ import annotations

import os
import signal
import time

from arl.envs.base import EnvSpec, StepResult


def _prompt(observation: str, history: str, info: dict) -> str:
    return f"Count. {history} State: {observation}. Answer <think>...</think><action>go</action>."


class FaultyEnv:
    def __init__(self, length: int = 3, fail_on_reset: bool = False):
        self.length = length
        self.fail_on_reset = fail_on_reset
        self.spec = EnvSpec("faulty", max_turns=length, invalid_action="noop", render_prompt=_prompt, check_admissible=False)
        self.seed = 0
        self.steps = 0

    def _info(self, won: bool = False) -> dict:
        obs = f"{self.seed}:{self.steps}"
        return {"task": "count", "task_type": "count", "admissible_actions": None, "won": won, "score": float(won), "anchor": obs}

    def reset(self, seed: int):
        if self.fail_on_reset and seed % 10 == 3:
            raise RuntimeError(f"reset failure for seed {seed}")
        self.seed, self.steps = seed, 0
        return f"{seed}:0", self._info()

    def step(self, action: str) -> StepResult:
        self.steps += 1
        kind = self.seed % 10
        if self.steps == 2:
            if kind == 3:
                raise RuntimeError(f"env bug at seed {self.seed}")
            if kind == 4:
                return StepResult(f"{self.seed}:{self.steps}", float("nan"), False, self._info())
            if kind == 5:
                time.sleep(3600)
            if kind == 7:
                os._exit(13)
            if kind == 8:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
                time.sleep(3600)
        done = self.steps >= self.length
        return StepResult(f"{self.seed}:{self.steps}", float(self.steps), done, self._info(won=done))

    def close(self) -> None:
        pass


def where(env: FaultyEnv) -> str:
    """For ``EnvPool.call`` tests: the env's state and the process it lives in."""
    return f"{env.seed}:{env.steps}@{os.getpid()}"


def broken(env: FaultyEnv) -> str:
    """For ``EnvPool.call`` tests: a function that fails on every env."""
    raise ValueError(f"no answer for {env.seed}")
