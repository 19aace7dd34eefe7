"""The Sokoban expert for behaviour cloning: solver plans and their deterministic thoughts."""

from __future__ import annotations

from typing import Any

from arl.envs.sokoban.level import Level
from arl.envs.sokoban.solver import DEFAULT_MAX_STATES, solve


def expert_actions(env_or_level: Any, max_states: int = DEFAULT_MAX_STATES) -> list[str]:
    """The moves that solve the current state of a ``SokobanEnv`` (after ``reset``) or a ``Level``.

    Raises ``RuntimeError`` when the solver finds no plan within ``max_states``.
    """
    level = env_or_level if isinstance(env_or_level, Level) else env_or_level.level
    if level is None:
        raise RuntimeError("reset the environment before asking for expert actions")
    plan = solve(level, max_states=max_states)
    if plan is None:
        raise RuntimeError(f"no solution found within {max_states} states:\n{level.to_text()}")
    return plan


def expert_think(plan: list[str], horizon: int = 3) -> str:
    """The thought written before each expert action: the next ``horizon`` planned moves."""
    if not plan:
        return "plan: done"
    return "plan: " + " ".join(plan[:horizon])


def expert_response(env: Any) -> str:
    """The expert's answer to the env's current state, in the policy's output format.

    With ``multi_action`` the action holds up to ``max_actions_per_turn`` planned moves.
    """
    plan = expert_actions(env)
    if not plan:
        return "<think>plan: done</think><action>up</action>"
    n = getattr(env, "max_actions_per_turn", 1) if getattr(env, "multi_action", False) else 1
    return f"<think>{expert_think(plan)}</think><action>{' || '.join(plan[:n])}</action>"
