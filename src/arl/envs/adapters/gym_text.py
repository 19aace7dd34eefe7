"""``env=gym``: a gymnasium environment with text observations behind the env contract.

``GymTextEnv(id="my_pkg.envs:Guess-v0", kwargs={...})`` makes the environment with ``gymnasium.make`` (a
``module:`` prefix in the id imports the package that registers it, gymnasium's own convention) and
maps it onto :class:`~arl.envs.base.TextEnv`:

- ``reset(seed)`` -> ``env.reset(seed=seed)``; the observation as text (``str`` of anything else);
- ``step(action)`` -> ``env.step(action)``; done is ``terminated or truncated``;
- the action space (checked at start-up, :func:`action_converter`) decides what reaches the env:

  - ``Text``: the action as given, checked against the space's length limits, and against its
    charset only where the env's author set one: gymnasium's default charset (letters and digits, no
    space, no punctuation) is taken as unset, since an env that kept it still takes any string and
    refusing "go north" would refuse every multi-word action;
  - ``Discrete(n, start)``: the action must be an integer (``"3"``; white space around it is
    ignored) from ``start`` to ``start + n - 1``, and the env gets that ``int``; the prompt's answer hint,
    left at its default, says so;
  - a space class of the env's own package (not one of gymnasium's): its ``contains`` decides;
  - every other gymnasium space (``Box``, ``MultiDiscrete``, ``Dict``, ``Tuple``...) is refused at
    start-up: a text policy has no mapping onto it;

- an action outside the space, or one ``env.step`` raises on, is rejected: the state is kept (the env
  is assumed to have raised before changing it), the turn scores ``invalid_reward`` and is marked
  ``info["invalid_action"]``, which the agent loop counts as an invalid turn (the format penalty, the
  valid-action ratio); a parse failure or a rejected action never ends the run;
- an env may reject an action itself: ``info["invalid_action"]`` true in what its ``step`` returns
  marks the turn invalid the same way (its observation, reward and done stand as it returned them);
- a step that runs past the env pool's ``rollout.step_timeout`` is no rejection: the interrupted step
  may have changed the state, so the episode fails (``env_error``: counted, left out of the update)
  and the rollout goes on (:class:`arl.envs.pool.EnvTimeout` is a ``BaseException``, which the
  rejection path does not catch);
- won: ``info["won"]``, else gymnasium's ``info["is_success"]``, else ``info["success"]``;
- task type: ``info["task_type"]`` when the env gives one, else the id; admissible actions:
  ``info["admissible_actions"]`` when given (then checked by the parser), else any text;
- the anchor (GiGPO's state key): ``info["anchor"]`` when given, else the observation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gymnasium
from gymnasium import spaces

from arl.envs.adapters import generic_prompt
from arl.envs.base import EnvSpec, StepResult

DEFAULT_HINT = "your action"
# gymnasium.spaces.Text's charset when the env's author gives none (letters and digits)
DEFAULT_CHARSET = frozenset(spaces.Text(max_length=1).character_set)
_INTEGER = re.compile(r"[+-]?\d+")


class RejectedAction(ValueError):
    """An action outside the env's action space (an invalid turn, the state kept)."""


def _text_action(space: spaces.Text) -> Callable[[str], str]:
    """The action as given, within the space's length limits and (where the author set one) its charset."""
    charset = None if frozenset(space.character_set) == DEFAULT_CHARSET else frozenset(space.character_set)

    def convert(action: str) -> str:
        if not space.min_length <= len(action) <= space.max_length:
            raise RejectedAction(f"{len(action)} characters: the action space takes {space.min_length} to "
                                 f"{space.max_length}")
        outside = sorted(set(action) - charset) if charset is not None else []
        if outside:
            raise RejectedAction(f"{''.join(outside)!r} outside the action space's characters")
        return action

    return convert


def _discrete_action(space: spaces.Discrete) -> Callable[[str], int]:
    """The action as an integer from ``start`` to ``start + n - 1``."""
    low, high = int(space.start), int(space.start) + int(space.n) - 1

    def convert(action: str) -> int:
        text = action.strip()
        if not _INTEGER.fullmatch(text):
            raise RejectedAction(f"{action!r} is not an integer: the action space takes {low} to {high}")
        value = int(text)
        if not low <= value <= high:
            raise RejectedAction(f"{value} is outside the action space ({low} to {high})")
        return value

    return convert


def _own_space_action(space: gymnasium.Space) -> Callable[[str], str]:
    """The action as given, where the env's own space class contains it."""

    def convert(action: str) -> str:
        try:
            inside = bool(space.contains(action))
        except Exception as err:  # a space that cannot judge a string does not contain it
            raise RejectedAction(f"the action space cannot take {action!r}: {type(err).__name__}: {err}") from err
        if not inside:
            raise RejectedAction(f"{action!r} is not in the action space")
        return action

    return convert


def action_converter(space: gymnasium.Space | None, env_id: str = "") -> Callable[[str], Any]:
    """What turns a parsed text action into the env's action for ``space`` (module docstring): it raises
    :class:`RejectedAction` for an action outside the space. A gymnasium space a text action cannot
    map onto raises ``ValueError`` here, at start-up."""
    if space is None:
        return lambda action: action
    if isinstance(space, spaces.Text):
        return _text_action(space)
    if isinstance(space, spaces.Discrete):
        return _discrete_action(space)
    if type(space).__module__.split(".")[0] != "gymnasium":
        return _own_space_action(space)
    raise ValueError(
        f"env=gym: {env_id or 'the env'} has action space {space}; the adapter needs a gymnasium.spaces.Text "
        "(the action as text) or a Discrete (the action as an integer) action space, or a space class of the "
        "env's own package whose contains() takes strings")


def answer_hint_for(space: gymnasium.Space | None, answer_hint: str) -> str:
    """The prompt's answer hint: ``answer_hint``, or for a ``Discrete`` space left at the default hint, the
    integers it takes."""
    if answer_hint == DEFAULT_HINT and isinstance(space, spaces.Discrete):
        return f"an integer from {int(space.start)} to {int(space.start) + int(space.n) - 1}"
    return answer_hint


class GymTextEnv:
    """A gymnasium text environment (module docstring).

    Args:
        id: the gymnasium id (``"package.module:Name-v0"`` imports the package first).
        kwargs: keyword arguments of ``gymnasium.make``.
        max_turns: turns per episode (the env's own time limit may end it sooner).
        task: the task's text at the top of every prompt (the env's ``info["task"]`` wins).
        answer_hint: what goes between the action tags, for the prompt.
        invalid_reward: the reward of a turn whose action the adapter or the env rejected by raising
            (an answer that did not parse is sent as the empty action, which the env may take or reject).
    """

    def __init__(self, id: str, kwargs: dict[str, Any] | None = None, max_turns: int = 20, task: str = "",
                 answer_hint: str = DEFAULT_HINT, invalid_reward: float = 0.0):
        self.id = str(id)
        self.env = gymnasium.make(self.id, **dict(kwargs or {}))
        space = getattr(self.env, "action_space", None)
        try:
            self._convert = action_converter(space, self.id)
        except ValueError:
            self.env.close()
            raise
        self.invalid_reward = float(invalid_reward)
        self.task = task
        self.spec = EnvSpec(
            name="gym", max_turns=int(max_turns), invalid_action="",
            render_prompt=generic_prompt(task, answer_hint_for(space, answer_hint)), check_admissible=True,
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
        info["invalid_action"] = bool(raw.get("invalid_action", False))
        return info

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        observation, raw = self.env.reset(seed=int(seed))
        self._observation = str(observation)
        self._info = self._info_of(raw or {}, self._observation)
        return self._observation, self._info

    def _rejected(self, why: str) -> StepResult:
        """An invalid, state-keeping turn."""
        info = {**self._info, "invalid_action": True, "error": why}
        return StepResult(self._observation, self.invalid_reward, False, info)

    def step(self, action: str) -> StepResult:
        try:
            env_action = self._convert(str(action))
        except RejectedAction as err:
            return self._rejected(f"RejectedAction: {err}")
        try:
            observation, reward, terminated, truncated, raw = self.env.step(env_action)
        except Exception as err:  # noqa: BLE001 - the env refused the action; EnvTimeout is no Exception and fails the episode
            return self._rejected(f"{type(err).__name__}: {err}")
        self._observation = str(observation)
        self._info = self._info_of(raw or {}, self._observation)
        return StepResult(self._observation, float(reward), bool(terminated or truncated), self._info)

    def close(self) -> None:
        self.env.close()
