"""Prompt rendering shared by all environments.

A turn's prompt is one user message: the environment renders the task, the rules and the current
observation (``EnvSpec.render_prompt``); this module renders the history window that goes in it
and turns the message into token ids with the tokenizer's chat template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from arl.envs.base import EnvSpec


@dataclass(frozen=True)
class HistoryItem:
    """One past turn as the next prompt shows it."""

    observation: str  # the observation the action was taken in
    action: str  # the parsed action, or the raw reason when invalid
    reward: float


def render_history(items: Sequence[HistoryItem], window: int, show_observations: bool = False) -> str:
    """The last ``window`` turns as text ("" when the window is 0 or there is no history).

    Without observations: ``Previous actions: up, left (invalid)``. With observations, one block
    per turn: ``[Turn k] Observation: ...`` then ``Action: ...``.
    """
    if window <= 0 or not items:
        return ""
    recent = list(items)[-window:]
    first = len(items) - len(recent) + 1
    if not show_observations:
        return "Previous actions: " + ", ".join(item.action for item in recent)
    blocks = [
        f"[Turn {first + i}] Observation:\n{item.observation}\nAction: {item.action}" for i, item in enumerate(recent)
    ]
    return "\n".join(blocks)


def build_messages(spec: EnvSpec, observation: str, history_text: str, info: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages of one turn."""
    return [{"role": "user", "content": spec.render_prompt(observation, history_text, info)}]


def encode_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of ``messages`` with the assistant turn opened (chat template, no extra BOS)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
