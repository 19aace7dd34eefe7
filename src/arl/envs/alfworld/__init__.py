"""ALFWorld on the real ``alfworld`` engine, with an offline game generator.

Importing this package does not import ``alfworld``; building an :class:`AlfWorldEnv` does (and
names ``pip install 'arl[alfworld]'`` when it is missing). See docs/environments/alfworld.md.
"""

from arl.envs.alfworld.data import discover_games, resolve_source
from arl.envs.alfworld.env import AlfWorldEnv
from arl.envs.alfworld.expert import ExpertTracker, expert_response
from arl.envs.alfworld.gen.tables import TASK_TYPES
from arl.envs.alfworld.prompt import render_compact_prompt, render_prompt

__all__ = [
    "TASK_TYPES",
    "AlfWorldEnv",
    "ExpertTracker",
    "discover_games",
    "expert_response",
    "render_compact_prompt",
    "render_prompt",
    "resolve_source",
]
