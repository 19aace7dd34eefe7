"""ALFWorld prompts: the reference (verl-agent / ARLArena) template, and a compact one.

``full`` is verl-agent's ALFWorld prompt, word for word (its ``observaitons`` typo included), with
the surrounding blank lines stripped: ``ALFWORLD_TEMPLATE_NO_HIS`` on the first turn (the history
is empty), ``ALFWORLD_TEMPLATE`` afterwards. The admissible actions are listed as verl-agent does,
each quoted, joined by a newline and a space, ``help`` left out. The history block is the one the
agent loop renders (``env.history_window`` turns, with observations when
``env.show_observations``).

``compact`` keeps what a small model needs to act (task, history, observation, admissible
actions, answer format) without the prose, and drops the ``-= Welcome to TextWorld, ALFRED! =-``
banner and the task line from the first observation (the task is in the header).
"""

from __future__ import annotations

import re
from typing import Any

PROMPT_STYLES = ("full", "compact")

ALFWORLD_TEMPLATE_NO_HIS = """You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags."""

ALFWORLD_TEMPLATE = """You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observaitons and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags."""

BANNER = "-= Welcome to TextWorld, ALFRED! =-"
_TURN = re.compile(r"^\[Turn \d+\]", re.MULTILINE)
_TASK_LINE = re.compile(r"\s*Your task is to: .*$", re.DOTALL)


def format_admissible(actions: list[str] | None) -> str:
    """verl-agent's rendering: ``'go to cabinet 1'\\n 'go to cabinet 2'`` (``help`` left out)."""
    return "\n ".join(f"'{a}'" for a in (actions or []) if a != "help")


def count_history_turns(history_text: str) -> int:
    """Turns in a history block rendered by ``arl.agent.prompts.render_history``."""
    text = (history_text or "").strip()
    if not text:
        return 0
    turns = len(_TURN.findall(text))
    if turns:
        return turns
    if text.startswith("Previous actions:"):
        return len([a for a in text[len("Previous actions:") :].split(",") if a.strip()])
    return 1


def render_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``full`` (reference) user message of one turn.

    Args:
        observation: the env's current observation.
        history_text: earlier turns rendered by the agent loop ("" on the first turn).
        info: the env's latest info (``task``, ``admissible_actions``, ``steps``).
    """
    actions = format_admissible(info.get("admissible_actions"))
    if not (history_text and history_text.strip()):
        return ALFWORLD_TEMPLATE_NO_HIS.format(current_observation=observation, admissible_actions=actions)
    steps = int(info.get("steps", 0) or 0)
    return ALFWORLD_TEMPLATE.format(
        task_description=info.get("task", ""),
        step_count=steps,
        history_length=count_history_turns(history_text),
        action_history=history_text.strip(),
        current_step=steps + 1,
        current_observation=observation,
        admissible_actions=actions,
    )


def strip_intro(observation: str) -> str:
    """The first observation without the welcome banner and the task line."""
    text = observation.replace(BANNER, "")
    return _TASK_LINE.sub("", text).strip()


def render_compact_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``compact`` user message: task, history, observation, actions, answer format."""
    actions = " | ".join(a for a in (info.get("admissible_actions") or []) if a != "help")
    parts = [f"ALFWorld. Task: {info.get('task', '')}."]
    if info.get("notes"):  # where the agent stands (env.kwargs.notes; arl.envs.alfworld.notes)
        parts.append(info["notes"])
    if history_text and history_text.strip():
        parts.append(history_text.strip())
    parts.append(f"Observation: {strip_intro(observation)}")
    parts.append(f"Actions: {actions}")
    parts.append("Answer <think>...</think><action>one of the actions</action>.")
    return "\n".join(parts)
