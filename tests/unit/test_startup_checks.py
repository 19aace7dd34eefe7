"""Start-up checks of a vLLM run (``arl.run.checks.check_machine``): the package is imported, not only
found, and its version is checked, before anything is built."""

from __future__ import annotations

import sys
import types

import pytest

from arl.run.checks import _check_vllm, _version_tuple
from arl.utils.config import ConfigError
from arl_testing import compose, vllm_config

VLLM_BLOCK = vllm_config(enable_sleep_mode=True)  # rollout.vllm


def _fake_vllm(monkeypatch, version: str | None):
    """Put a module named vllm of ``version`` in sys.modules (None: one whose import fails, as a
    vllm built for another torch does)."""
    if version is None:
        monkeypatch.setitem(sys.modules, "vllm", None)
    else:
        monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__=version))


def test_version_tuple():
    assert _version_tuple("0.32.0") == (0, 32) and _version_tuple("0.11.2rc1+cu128") == (0, 11)
    assert _version_tuple("1.0") == (1, 0) and _version_tuple("dev") == (0, 0)


def test_a_vllm_that_fails_to_import_stops_the_run(monkeypatch):
    _fake_vllm(monkeypatch, None)
    with pytest.raises(ConfigError, match="import vllm` fails"):
        _check_vllm(VLLM_BLOCK)


def test_vllm_versions(monkeypatch):
    _fake_vllm(monkeypatch, "0.10.1")
    with pytest.raises(ConfigError, match="needs vllm >= 0.11"):
        _check_vllm(VLLM_BLOCK)
    _fake_vllm(monkeypatch, "0.20.0")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with pytest.raises(ConfigError, match="expandable_segments"):
        _check_vllm(VLLM_BLOCK)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    with pytest.warns(UserWarning, match="older than the version the engine was tested with"):
        _check_vllm(VLLM_BLOCK)
    _fake_vllm(monkeypatch, "0.32.0")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    _check_vllm(VLLM_BLOCK)  # 0.32's sleep-mode pool turns expandable segments off around itself


def test_a_whole_episode_horizon_needs_a_turn_limit_or_a_horizon():
    """seq-mean-token-sum-norm's H over a trajectory sample is max_new_tokens x env.max_turns; env=program has no
    turn limit, so the run must say H."""
    from arl.run.checks import validate_config
    from arl.utils.config import ConfigError

    base = ["env=program", "env.kwargs.command=[python,agent.py]", "bc.enabled=false", "rollout.sample_mode=trajectory",
            "algo.loss.agg=seq-mean-token-sum-norm"]
    with pytest.raises(ConfigError, match="needs algo.loss.horizon: env=program has no env.max_turns"):
        validate_config(compose(base))
    assert validate_config(compose([*base, "algo.loss.horizon=512"])).algo.loss.horizon == 512
