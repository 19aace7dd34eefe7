"""arl.algos.diagnostics: hand-computed IS statistics and log-prob gap."""

from __future__ import annotations

import math

import pytest
import torch

from arl.algos import diagnostics

F64 = torch.float64


def k3(ratio: float) -> float:
    """k3 of KL(pi_old || pi) for one token with ratio r = pi / pi_old: r - ln r - 1."""
    return ratio - math.log(ratio) - 1.0


def test_is_stats_hand() -> None:
    # clip range [0.8, 1.2]
    # seq0: A=+1, ratios [1.5, 0.5] -> one above (pos), one below (pos); s0 = sqrt(0.75) = 0.866025
    # seq1: A=-1, ratios [1.1, 0.5] -> one below (neg); s1 = sqrt(0.55) = 0.741620
    ratios = [[1.5, 0.5], [1.1, 0.5]]
    old = torch.zeros(2, 2, dtype=F64)
    log_prob = torch.tensor([[math.log(r) for r in row] for row in ratios], dtype=F64)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=F64)
    out = diagnostics.is_stats(log_prob, old, adv, torch.ones(2, 2), clip_low=0.2, clip_high=0.2)
    assert out["tokens_above_pos"].item() == pytest.approx(1 / 4)
    assert out["tokens_below_pos"].item() == pytest.approx(1 / 4)
    assert out["tokens_above_neg"].item() == pytest.approx(0.0)
    assert out["tokens_below_neg"].item() == pytest.approx(1 / 4)
    # quantiles of [0.741620, 0.866025] by linear interpolation: lo + q (hi - lo)
    lo, hi = math.sqrt(0.55), math.sqrt(0.75)
    assert out["seq_ratio_p05"].item() == pytest.approx(lo + 0.05 * (hi - lo), rel=1e-6)
    assert out["seq_ratio_p50"].item() == pytest.approx(lo + 0.50 * (hi - lo), rel=1e-6)
    assert out["seq_ratio_p95"].item() == pytest.approx(lo + 0.95 * (hi - lo), rel=1e-6)
    # k3 per token: seq0 = 0.094535 + 0.193147 = 0.287682, seq1 = 0.004690 + 0.193147 = 0.197837;
    # seq1 has A < 0 and s1 < 1: share = 0.197837 / 0.485519 = 0.407475
    seq0, seq1 = k3(1.5) + k3(0.5), k3(1.1) + k3(0.5)
    assert out["neg_lowratio_kl_frac"].item() == pytest.approx(seq1 / (seq0 + seq1))
    assert seq1 / (seq0 + seq1) == pytest.approx(0.407475, abs=1e-6)
    assert set(out) == {
        "tokens_above_pos",
        "tokens_below_pos",
        "tokens_above_neg",
        "tokens_below_neg",
        "seq_ratio_p05",
        "seq_ratio_p50",
        "seq_ratio_p95",
        "neg_lowratio_kl_frac",
    }


def test_is_stats_on_policy_and_empty() -> None:
    lp = -torch.rand(3, 4, dtype=F64)
    mask = torch.ones(3, 4)
    mask[2] = 0  # an empty row is ignored
    out = diagnostics.is_stats(lp, lp, torch.randn(3, 1, dtype=F64).expand(3, 4), mask, 0.2, 0.2)
    assert out["tokens_above_pos"].item() == 0.0 and out["seq_ratio_p50"].item() == 1.0
    assert out["neg_lowratio_kl_frac"].item() == 0.0  # no KL at all -> 0, not NaN
    empty = diagnostics.is_stats(lp, lp, lp, torch.zeros(3, 4), 0.2, 0.2)
    assert all(torch.isfinite(v) for v in empty.values())


def test_logprob_gap_hand() -> None:
    # a = [0, -1] (trainer), b = [-1, -1] (sampler); |a - b| = [1, 0] -> 0.5
    # k3 with x = a - b = [1, 0]: [e - 2, 0] -> mean (e - 2) / 2 = 0.359141
    out = diagnostics.logprob_gap(
        torch.tensor([[0.0, -1.0]], dtype=F64), torch.tensor([[-1.0, -1.0]], dtype=F64), torch.ones(1, 2)
    )
    assert out["mean_abs_diff"].item() == pytest.approx(0.5)
    assert out["max_abs_diff"].item() == pytest.approx(1.0)
    assert out["k3"].item() == pytest.approx((math.e - 2) / 2)
    # a masked token's gap does not count in the max
    masked = diagnostics.logprob_gap(
        torch.tensor([[0.0, -1.0, 5.0]], dtype=F64), torch.tensor([[-0.5, -1.0, 0.0]], dtype=F64),
        torch.tensor([[1.0, 1.0, 0.0]]),
    )
    assert masked["max_abs_diff"].item() == pytest.approx(0.5)
