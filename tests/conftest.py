"""Shared fixtures: the embedded tiny model, built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arl_testing import ROOT

os.environ.setdefault("ARL_CACHE", str(ROOT / ".cache" / "arl"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    from arl.models.tiny import ensure_tiny

    return ensure_tiny()


@pytest.fixture(scope="session")
def tiny(tiny_path):
    """(model, tokenizer) of the embedded default; tests must not modify the model in place."""
    from arl.models.loading import load_policy

    model, tok = load_policy(tiny_path)
    model.eval()
    return model, tok
