"""Sokoban: reverse-play level generator, Boxoban loader, solver (expert), text env and prompt."""

from arl.envs.sokoban.boxoban import load_boxoban
from arl.envs.sokoban.env import SokobanEnv
from arl.envs.sokoban.expert import expert_actions, expert_think
from arl.envs.sokoban.generator import generate_level
from arl.envs.sokoban.level import ACTIONS, Level, render_grid
from arl.envs.sokoban.prompt import SYSTEM_RULES, render_prompt
from arl.envs.sokoban.solver import solve

__all__ = [
    "ACTIONS",
    "SYSTEM_RULES",
    "Level",
    "SokobanEnv",
    "expert_actions",
    "expert_think",
    "generate_level",
    "load_boxoban",
    "render_grid",
    "render_prompt",
    "solve",
]
