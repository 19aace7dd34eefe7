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


LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK")
# vLLM's CPU platform sets LOCAL_WORLD_SIZE to the tensor-parallel size whenever an engine is built
# (vllm/platforms/cpu.py, check_and_update_config), so a test that builds one legitimately changes
# it. Alone it makes no process a rank (Lightning's torchelastic detection needs RANK and LOCAL_RANK
# too), so it is put back after each test rather than failed on.
RESTORED_VARIABLES = ("LOCAL_WORLD_SIZE",)


@pytest.fixture(autouse=True)
def _launch_variables_stay_put():
    """A test that leaves a launcher's variable set (``LOCAL_RANK=1``...) fails, and the variable is
    restored: the DDP tests' subprocesses inherit the environment, and a leaked rank makes
    Lightning wait forever for ranks it believes someone else launched."""
    watched = LAUNCH_VARIABLES + RESTORED_VARIABLES
    before = {k: os.environ.get(k) for k in watched}
    yield
    after = {k: os.environ.get(k) for k in watched}
    for key, value in before.items():
        if after[key] != value:
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if any(after[k] != before[k] for k in LAUNCH_VARIABLES):
        pytest.fail(f"the test left launcher variables changed: {before} -> {after}")
