"""Lightning callbacks: per-iteration progress lines, weight sync to the rollout engine."""

from arl.callbacks.progress import IterationLog
from arl.callbacks.weight_sync import WeightSync

__all__ = ["IterationLog", "WeightSync"]
