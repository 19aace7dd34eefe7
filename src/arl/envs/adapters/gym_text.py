"""``env=gym``: a gymnasium environment with text observations behind the env contract.

``GymTextEnv(id="my_pkg.envs:Guess-v0", kwargs={...})`` makes the environment with ``gymnasium.make`` (a
``module:`` prefix in the id imports the package that registers it, gymnasium's own convention) and
maps it onto :class:`~arl.envs.base.TextEnv`:

- ``reset(seed)`` -> ``env.reset(seed=seed)``; the observation as text (``str`` of anything else);
- ``step(action)`` -> ``env.step(action)``; done is ``terminated or truncated``; an action the env
  rejects (it raises, or the action space does not contain it) leaves the state as it is, scores
  ``invalid_reward`` and marks the turn's ``info["invalid_action"]``: a parse failure or an env error
  never ends the run;
- won: ``info["won"]``, else gymnasium's ``info["is_success"]``, else ``info["success"]``;
- task type: ``info["task_type"]`` when the env gives one, else the id; admissible actions:
  ``info["admissible_actions"]`` when given (then checked by the parser), else any text;
- the anchor (GiGPO's state key): ``info["anchor"]`` when given, else the observation.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from arl.envs.adapters import generic_prompt
from arl.envs.base import EnvSpec, StepResult


class GymTextEnv:
    """A gymnasium text environment (module docstring).

    Args:
        id: the gymnasium id (``"package.module:Name-v0"`` imports the package first).
        kwargs: keyword arguments of ``gymnasium.make``.
        max_turns: turns per episode (the env's own time limit may end it sooner).
        task: the task's text at the top of every prompt (the env's ``info["task"]`` wins).
        answer_hint: what goes between the action tags, for the prompt.
        invalid_reward: the reward of a turn whose action the env rejected (an answer that did not
            parse is sent as the empty action, which the env may take or reject).
    """

    def __init__(self, id: str, kwargs: dict[str, Any] | None = None, max_turns: int = 20, task: str = "",
                 answer_hint: str = "your action", invalid_reward: float = 0.0):
        self.id = str(id)
        self.env = gymnasium.make(self.id, **dict(kwargs or {}))
        self.invalid_reward = float(invalid_reward)
        self.task = task
        self.spec = EnvSpec(
            name="gym", max_turns=int(max_turns), invalid_action="",
            render_prompt=generic_prompt(task, answer_hint), check_admissible=True,
        )
        self._observation = ""
        self._info: dict[str, Any] = {}

    def _info_of(self, raw: dict[str, Any], observation: str) -> dict[str, Any]:
        info = dict(raw)
        info["task"] = str(raw.get("task", self.task))
        info["task_type"] = str(raw.get("task_type", self.id))
        info["admissible_actions"] = raw.get("admissible_actions")
        info["won"] = bool(raw.get("won", raw.get("is_success", raw.get("success", False))))
        info["score"] = float(raw.get("score", 1.0 if info["won"] else 0.0))
        info["anchor"] = str(raw.get("anchor", observation))
        return info

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        observation, raw = self.env.reset(seed=int(seed))
        self._observation = str(observation)
        self._info = self._info_of(raw or {}, self._observation)
        return self._observation, self._info

    def step(self, action: str) -> StepResult:
        space = getattr(self.env, "action_space", None)
        try:
            if space is not None and not space.contains(action):
                raise ValueError(f"{action!r} is not in the action space")
            observation, reward, terminated, truncated, raw = self.env.step(action)
        except Exception as err:  # noqa: BLE001 - any rejection is an invalid, state-keeping turn
            info = {**self._info, "invalid_action": True, "error": f"{type(err).__name__}: {err}"}
            return StepResult(self._observation, self.invalid_reward, False, info)
        self._observation = str(observation)
        self._info = self._info_of(raw or {}, self._observation)
        return StepResult(self._observation, float(reward), bool(terminated or truncated), self._info)

    def close(self) -> None:
        self.env.close()
