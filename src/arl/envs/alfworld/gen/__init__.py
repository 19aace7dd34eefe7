"""Offline ALFWorld game generator: ALFRED households, the six task types, ALFWorld game files."""

from arl.envs.alfworld.gen.games import GeneratorConfig, ensure_game, generate_games, generated_root, play_expert
from arl.envs.alfworld.gen.household import GENERATOR_VERSION, SPLITS, GameSpec, floor_plan, sample_game
from arl.envs.alfworld.gen.tables import TASK_TYPES

__all__ = [
    "GENERATOR_VERSION",
    "SPLITS",
    "TASK_TYPES",
    "GameSpec",
    "GeneratorConfig",
    "ensure_game",
    "floor_plan",
    "generate_games",
    "generated_root",
    "play_expert",
    "sample_game",
]
