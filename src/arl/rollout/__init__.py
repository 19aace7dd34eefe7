"""Rollout engines: a policy that turns prompt token ids into sampled response ids and log-probs."""

from arl.rollout.engine import Generation, LazyEngine, RolloutEngine, SamplingParams, request_seed

__all__ = ["Generation", "LazyEngine", "RolloutEngine", "SamplingParams", "request_seed"]
