"""The collapse detector's rules on hand-made metric streams."""

from __future__ import annotations

import pytest


def test_collapse_detector_rules():
    from arl.callbacks.collapse import CollapseDetector

    det = CollapseDetector(grad_norm_factor=5.0, min_history=3, kl_threshold=0.5, valid_drop=0.5, valid_min_peak=0.2)
    for g in (1.0, 1.2, 0.9):
        assert det.check({"actor/grad_norm": g}) == []
        det.observe({"actor/grad_norm": g, "rollout/valid_action_ratio": 0.6})
    assert [k for k, _ in det.check({"actor/grad_norm": 6.0})] == ["grad_norm"]
    assert det.check({"actor/grad_norm": 4.0}) == []
    assert [k for k, _ in det.check({"actor/kl_loss": 0.7})] == ["kl"]
    assert [k for k, _ in det.check({"rollout/valid_action_ratio": 0.25})] == ["valid_action"]
    assert [k for k, _ in det.check({"actor/grad_norm": float("nan")})] == ["grad_norm"]
    off = CollapseDetector(grad_norm_factor=None, kl_threshold=None, valid_drop=None)
    off.observe({"actor/grad_norm": 1.0, "rollout/valid_action_ratio": 0.9})
    assert off.check({"actor/grad_norm": 1e9, "actor/kl_loss": 1e9, "rollout/valid_action_ratio": 0.0}) == []
    # a drop from a low peak is noise, not a collapse
    low = CollapseDetector(valid_drop=0.5, valid_min_peak=0.2)
    low.observe({"rollout/valid_action_ratio": 0.1})
    assert low.check({"rollout/valid_action_ratio": 0.0}) == []
    with pytest.raises(ValueError, match="log, stop, rollback"):
        CollapseDetector(action="panic")
