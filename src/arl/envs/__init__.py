"""Text environments: the :class:`TextEnv` contract and ``make_env``."""

from arl.envs.base import EnvSpec, StepResult, TextEnv
from arl.envs.registry import env_names, make_env

__all__ = ["EnvSpec", "StepResult", "TextEnv", "env_names", "make_env"]
