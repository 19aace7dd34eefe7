"""Shared fixtures: the embedded tiny model, built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arl_testing import ROOT

os.environ.setdefault("ARL_CACHE", str(ROOT / ".cache" / "arl"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One intra-op thread per process: the models under test are tiny, several tests start extra
# processes (env workers, DDP ranks, CLI runs), and oversubscribed OpenMP threads on a 2-core
# machine made whole tests 3-40x slower. Subprocesses inherit the variable.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def pytest_configure(config):
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    from arl.run.builders import tiny_model

    return tiny_model()


@pytest.fixture(scope="session")
def tiny(tiny_path):
    """(model, tokenizer) of the embedded default; tests must not modify the model in place."""
    from arl.models.loading import load_policy

    model, tok = load_policy(tiny_path)
    model.eval()
    return model, tok
