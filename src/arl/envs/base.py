"""The environment contract shared by every text environment (docs/design.md section 4).

An environment is a plain Python object: ``reset(seed) -> (observation, info)`` and
``step(action) -> StepResult``. ``reset`` is deterministic in ``seed`` so that the G members of a
group start from the same state. ``info`` always carries the keys of :data:`INFO_KEYS`.

Each environment also carries an :class:`EnvSpec` that tells the agent loop how to talk to it:
how to render a prompt, which action to send when the model's output does not parse, and how many
turns an episode may take.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

INFO_KEYS = ("task", "task_type", "admissible_actions", "won", "score", "anchor")

# Validation task seeds are VAL_SEED_BASE + i (arl.datamodules.rollout_datamodule); training seeds
# lie below it. Envs with a fixed dataset use this to play held-out tasks on validation seeds.
VAL_SEED_BASE = 2**30


@dataclass
class StepResult:
    """What ``TextEnv.step`` returns."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvSpec:
    """Static facts about an environment that the agent loop needs.

    Attributes:
        name: registry name (``sokoban``, ``math_tool``, ...).
        max_turns: hard cap on the number of turns of one episode.
        invalid_action: the action sent to ``step`` when the model output is invalid (a no-op).
        render_prompt: ``(observation, history_text, info) -> str``: the user message of a turn.
        check_admissible: when true, a parsed action must be one of ``info["admissible_actions"]``.
        render_observation: ``(observation, info) -> str``: the user message of a later turn in
            ``trajectory`` sample mode, where the conversation already holds the task and the
            rules; None uses ``render_prompt(observation, "", info)``.
        graded: the env grades an episode beyond winning it (``info["score"]`` in [0, 1]; WebShop's
            purchase score): the metrics then carry ``score``, the mean final score x 100 (the
            paper's WebShop score), beside the success rate.
    """

    name: str
    max_turns: int
    invalid_action: str
    render_prompt: Callable[[str, str, dict[str, Any]], str]
    check_admissible: bool = True
    render_observation: Callable[[str, dict[str, Any]], str] | None = None
    graded: bool = False

    def observation_message(self, observation: str, info: dict[str, Any]) -> str:
        """The user message of a later turn in ``trajectory`` mode."""
        if self.render_observation is not None:
            return self.render_observation(observation, info)
        return self.render_prompt(observation, "", info)


@runtime_checkable
class TextEnv(Protocol):
    """A multi-turn text environment."""

    spec: EnvSpec

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        """Start the task given by ``seed``; returns (observation, info)."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply ``action`` (already parsed, or ``spec.invalid_action``)."""
        ...

    def close(self) -> None:
        """Free resources (processes, files)."""
        ...
