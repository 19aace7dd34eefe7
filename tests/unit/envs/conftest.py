"""Shared helpers of the environment tests: where the shared data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def shared_data_dir() -> Path:
    """``$ARL_SHARED_DATA`` (the shared ``data`` folder, or the shared folder above it), else
    ``../shared/data`` next to the repository root."""
    env = os.environ.get("ARL_SHARED_DATA")
    if env:
        root = Path(env)
        return (
            root / "data" if (root / "data").is_dir() and not (root / "sokoban").is_dir() else root
        )
    return Path(__file__).parents[3].parent / "shared" / "data"


@pytest.fixture(scope="session")
def boxoban_dir() -> Path:
    path = shared_data_dir() / "sokoban" / "boxoban"
    if not path.is_dir():
        pytest.skip(f"Boxoban data not found at {path}")
    return path
