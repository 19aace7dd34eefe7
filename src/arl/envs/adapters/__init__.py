"""Environments from the ecosystem behind the project's env contract (:class:`arl.envs.base.TextEnv`).

- ``env=gym``: a gymnasium environment with text observations, by id (``env.kwargs.id``);
- ``env=textarena``: a single-player TextArena game, by id.

Each maps reset / step / reward / done and the task's text onto the agent loop, with what the
project's own envs have: an action the env rejects is a no-op scored as invalid (never an ended
run), the task type (the env id, or the env's own ``info["task_type"]``), seeds that pair validation
episodes game by game (``reset(seed)`` is deterministic), GiGPO anchors (the observation), and the
viewer's turn text. The packages are the ``ecosystem`` extra (``pip install -e '.[ecosystem]'``, which
``make install`` brings); a missing one stops the run at start-up naming it
(:func:`arl.envs.registry.missing_package`).
"""

from __future__ import annotations

from collections.abc import Callable


def generic_prompt(task: str, answer_hint: str) -> Callable[[str, str, dict], str]:
    """A turn's user message for an adapted env: its task text (the env's ``info["task"]``, else
    ``task``), the answer format, the history, the current observation."""

    def render(observation: str, history_text: str, info: dict) -> str:
        text = str(info.get("task") or task or "")
        parts = [text.strip()] if text.strip() else []
        parts.append(f"Answer as <think>...</think><action>{answer_hint}</action>.")
        if history_text and history_text.strip():
            parts.append(history_text.strip())
        parts.append(f"Current observation:\n{observation}")
        return "\n".join(parts)

    return render
