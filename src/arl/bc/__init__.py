"""Behaviour cloning, the paper's first stage: the dataset file and how its episodes are collected."""

from arl.bc.collect import (
    BootstrapResult,
    DaggerResult,
    bc_seeds,
    bootstrap,
    collect_expert,
    dagger,
    keep_episode,
    relabel,
)
from arl.bc.dataset import BCEpisode, episodes_of, load_episodes, read_header, save_episodes, tokenizer_fingerprint

__all__ = [
    "BCEpisode",
    "BootstrapResult",
    "DaggerResult",
    "bc_seeds",
    "bootstrap",
    "collect_expert",
    "dagger",
    "episodes_of",
    "keep_episode",
    "load_episodes",
    "read_header",
    "relabel",
    "save_episodes",
    "tokenizer_fingerprint",
]
