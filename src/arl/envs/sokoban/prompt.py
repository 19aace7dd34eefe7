"""The Sokoban prompt: a few sentences of rules, the history, the current grid.

Kept short on purpose: a tiny model reads it every turn.
"""

from __future__ import annotations

from typing import Any

from arl.envs.sokoban.level import LEGEND

TASK = "Push every box onto a target."

SYSTEM_RULES = (
    f"You are playing Sokoban. {TASK} Walking into a box pushes it; "
    f"boxes cannot be pulled. Symbols: {LEGEND}."
)


def answer_format(max_actions: int = 1) -> str:
    """The required answer format for one action, or up to ``max_actions`` joined by ``||``."""
    if max_actions <= 1:
        return "Answer as <think>...</think><action>one of up, down, left, right</action>."
    return (
        f"Answer as <think>...</think><action>up to {max_actions} moves joined by ||, "
        "e.g. up || left</action>; moves are up, down, left, right."
    )


def render_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The user message of one turn.

    Args:
        observation: the current grid (``render_grid``).
        history_text: earlier turns, already rendered by the agent loop ("" for none).
        info: the env's latest info; ``max_actions_per_turn`` (default 1) selects the format.
    """
    max_actions = int(info.get("max_actions_per_turn", 1) or 1)
    parts = [SYSTEM_RULES, answer_format(max_actions)]
    if history_text and history_text.strip():
        parts.append(history_text.strip())
    parts.append(f"Current state:\n{observation}")
    return "\n".join(parts)


def render_observation(observation: str, info: dict[str, Any]) -> str:
    """A later turn's user message in ``trajectory`` mode: the rules are already in the stream."""
    return f"Current state:\n{observation}"


PROMPT_STYLES = ("full", "compact")
COMPACT_HEADER = "Sokoban. Answer <think>...</think><action>up|down|left|right</action>."


def render_compact_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``compact`` user message: a one-line header, the history, the grid.

    For models that learn the game from behaviour cloning rather than from the rules (the
    embedded tiny model): it keeps the answer format but drops the prose rules and legend.
    """
    parts = [COMPACT_HEADER]
    if history_text and history_text.strip():
        parts.append(history_text.strip())
    parts.append(f"Current state:\n{observation}")
    return "\n".join(parts)
