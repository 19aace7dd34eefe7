"""Lightning callbacks: progress lines, weight sync, per-iteration checkpoints, collapse detector,
validation episodes."""

from arl.callbacks.checkpoint import IterationCheckpoint
from arl.callbacks.collapse import CollapseDetector
from arl.callbacks.progress import IterationLog
from arl.callbacks.threads import ThreadRebalance
from arl.callbacks.val_episodes import ValidationEpisodes
from arl.callbacks.weight_sync import EngineStart, WeightPush, WeightSync

__all__ = ["CollapseDetector", "EngineStart", "IterationCheckpoint", "IterationLog", "ThreadRebalance", "ValidationEpisodes", "WeightPush", "WeightSync"]
