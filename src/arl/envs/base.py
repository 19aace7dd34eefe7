"""The environment contract shared by every text environment (docs/design.md section 4).

An environment is a plain Python object: ``reset(seed) -> (observation, info)`` and
``step(action) -> StepResult``. ``reset`` is deterministic in ``seed`` so that the G members of a
group start from the same state. ``info`` always carries the keys of :data:`INFO_KEYS`.

Each environment also carries an :class:`EnvSpec` that tells the agent loop how to talk to it:
how to render a prompt, which action to send when the model's output does not parse, and how many
turns an episode may take.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
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
        tools: the functions the env offers as native tool calls (OpenAI tool schemas, ``{"type":
            "function", "function": {"name", "description", "parameters"}}``); empty: the env reads its
            actions from ``<action>`` text. With tools, the conversation is chat messages: the chat
            template renders the tools, the rollout's tool parser reads the calls in an answer, and
            ``step`` receives them as :func:`format_call_action` blocks (or the answer's text when it
            made no call); the observation goes back as one ``tool`` message a call, or a ``user``
            message after an answer without calls.
    """

    name: str
    max_turns: int
    invalid_action: str
    render_prompt: Callable[[str, str, dict[str, Any]], str]
    check_admissible: bool = True
    render_observation: Callable[[str, dict[str, Any]], str] | None = None
    graded: bool = False
    tools: tuple[dict[str, Any], ...] = ()

    def observation_message(self, observation: str, info: dict[str, Any]) -> str:
        """The user message of a later turn in ``trajectory`` mode."""
        if self.render_observation is not None:
            return self.render_observation(observation, info)
        return self.render_prompt(observation, "", info)


@dataclass(frozen=True)
class ToolCall:
    """One function call of a native tool-call answer: the function's ``name`` and its ``arguments``."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


_CALL_ACTION = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def format_call_action(call: ToolCall) -> str:
    """A call as an env with ``spec.tools`` receives it in ``step``: ``<tool_call>{"name": ..., "arguments":
    {...}}</tool_call>`` (JSON; an answer's calls are such blocks, one after the other)."""
    return f"<tool_call>{json.dumps({'name': call.name, 'arguments': dict(call.arguments)})}</tool_call>"


def parse_call_action(action: Any) -> list[ToolCall] | None:
    """The calls of an action made of :func:`format_call_action` blocks only (surrounding white space
    allowed), or None when the action is text (an answer without calls, or anything else)."""
    if not isinstance(action, str) or not action.strip().startswith("<tool_call>"):
        return None
    calls, end = [], 0
    for match in _CALL_ACTION.finditer(action):
        if action[end:match.start()].strip():
            return None
        try:
            value = json.loads(match.group(1))
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not isinstance(
                value.get("arguments", {}), dict):
            return None
        calls.append(ToolCall(value["name"], value.get("arguments", {})))
        end = match.end()
    return calls if calls and not action[end:].strip() else None


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
