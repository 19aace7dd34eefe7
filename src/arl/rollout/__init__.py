"""Rollout engines: a policy that turns prompt token ids into sampled response ids and log-probs."""

from arl.rollout.engine import Generation, RolloutEngine, SamplingParams

__all__ = ["Generation", "RolloutEngine", "SamplingParams"]
