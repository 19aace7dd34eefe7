"""The WebShop prompts.

``full``: verl-agent's WebShop prompt (the reference setup of ARLArena): the task, the number of
steps taken and the recent history, the current page, the admissible actions as a quoted list,
and the answer instructions. ``compact``: a header line, the task, the history, the page and the
actions with item ids and option values folded into ``click[<id>]`` / ``click[<option>]``; for
the embedded tiny model, whose context is short.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arl.envs.webshop.pages import BUTTONS, SEARCH_ACTION

INTRO = "You are an expert autonomous agent operating in the WebShop e-commerce platform."
ANSWER_RULES = (
    "Now it's your turn to take one action for the current step.\n"
    "You should first reason step-by-step about the current situation, then think carefully which "
    "admissible action best advances the shopping goal. This reasoning process MUST be enclosed "
    "within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags."
)
COMPACT_HEADER = "WebShop. Answer <think>...</think><action>search[...] or click[...]</action>."


def format_actions(actions: Sequence[str] | None) -> str:
    """The admissible actions as verl-agent lists them: one ``'action',`` per line."""
    return "\n".join(f"'{a}'," for a in actions or ())


def render_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``full`` user message of one turn.

    Args:
        observation: the current page text.
        history_text: earlier turns, rendered by the agent loop ("" for none).
        info: the env's latest info (``task``, ``admissible_actions``, ``steps``).
    """
    task = str(info.get("task", "")).strip()
    lines = [INTRO, f"Your task is to: {task}."]
    steps = int(info.get("steps", 0) or 0)
    if history_text and history_text.strip():
        lines.append(
            f"Prior to this step, you have already taken {steps} step(s). Below are the most recent "
            f"observations and the corresponding actions you took:\n{history_text.strip()}"
        )
        lines.append(f"You are now at step {steps + 1} and your current observation is: {observation}.")
    else:
        lines.append(f"Your current observation is: {observation}.")
    lines.append(f"Your admissible actions of the current situation are:\n[\n{format_actions(info.get('admissible_actions'))}\n].")
    lines.append("")
    lines.append(ANSWER_RULES)
    return "\n".join(lines)


def compact_actions(actions: Sequence[str] | None, page: str = "") -> str:
    """The actions of the compact prompt: buttons verbatim, item ids and option values folded."""
    out: list[str] = []
    for action in actions or ():
        if action == SEARCH_ACTION:
            item = "search[<query>]"
        elif action.startswith("click[") and action[6:-1] in BUTTONS:
            item = action
        elif page == "results":
            item = "click[<id>]"
        else:
            item = "click[<option>]"
        if item not in out:
            out.append(item)
    return ", ".join(out) if out else "none"


def render_compact_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``compact`` user message: header, task, history, page, actions."""
    parts = [COMPACT_HEADER, f"Task: {str(info.get('task', '')).strip()}"]
    if history_text and history_text.strip():
        parts.append(history_text.strip())
    parts.append(f"Page: {observation}")
    parts.append(f"Actions: {compact_actions(info.get('admissible_actions'), str(info.get('page', '')))}")
    return "\n".join(parts)
