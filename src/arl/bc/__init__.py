"""Behaviour cloning, the paper's first stage: the dataset file and how its episodes are collected."""

from arl.bc.collect import BootstrapResult, bc_seeds, bootstrap, collect_expert, keep_episode
from arl.bc.dataset import BCEpisode, episodes_of, load_episodes, read_header, save_episodes, tokenizer_fingerprint

__all__ = [
    "BCEpisode",
    "BootstrapResult",
    "bc_seeds",
    "bootstrap",
    "collect_expert",
    "episodes_of",
    "keep_episode",
    "load_episodes",
    "read_header",
    "save_episodes",
    "tokenizer_fingerprint",
]
