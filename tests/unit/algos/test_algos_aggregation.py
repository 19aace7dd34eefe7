"""arl.algos.aggregation: hand-computed values and gradients, micro-batch split invariance."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.algos.aggregation import AGG_MODES, agg_loss, normalisers

# L = [[1, 2, 3], [4, 5, 6]], m = [[1, 1, 0], [1, 0, 0]]  ->  |y_0| = 2, |y_1| = 1, 3 tokens
L = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
M = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]

HAND = {
    # (1 + 2 + 4) / 3; each masked token weighs 1/3
    "token-mean": (7 / 3, [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0]]),
    # seq0 = (1 + 2) / 2 = 1.5, seq1 = 4 / 1 = 4, mean = 2.75; token weight 1 / (2 |y_i|)
    "seq-mean-token-mean": (2.75, [[1 / 4, 1 / 4, 0], [1 / 2, 0, 0]]),
    # seq0 = 3, seq1 = 4, mean = 3.5; token weight 1 / 2
    "seq-mean-token-sum": (3.5, [[1 / 2, 1 / 2, 0], [1 / 2, 0, 0]]),
    # (3 / 3 + 4 / 3) / 2 = 7 / 6 with H = T = 3; token weight 1 / (2 * 3)
    "seq-mean-token-sum-norm": (7 / 6, [[1 / 6, 1 / 6, 0], [1 / 6, 0, 0]]),
}


@pytest.mark.parametrize("mode", AGG_MODES)
def test_hand_values_and_gradients(mode: str) -> None:
    loss_mat = torch.tensor(L, dtype=torch.float64, requires_grad=True)
    value = agg_loss(loss_mat, torch.tensor(M), mode, horizon=None)
    value.backward()
    expected_value, expected_grad = HAND[mode]
    assert value.item() == pytest.approx(expected_value)
    torch.testing.assert_close(loss_mat.grad, torch.tensor(expected_grad, dtype=torch.float64))


def test_empty_sequences_do_not_count() -> None:
    # a third, fully masked row: token-mean still 7/3, seq-mean-token-mean still (1.5 + 4) / 2
    loss_mat = torch.tensor([*L, [9.0, 9.0, 9.0]])
    mask = torch.tensor([*M, [0.0, 0.0, 0.0]])
    assert agg_loss(loss_mat, mask, "token-mean", horizon=None).item() == pytest.approx(7 / 3)
    assert agg_loss(loss_mat, mask, "seq-mean-token-mean", horizon=None).item() == pytest.approx(2.75)
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum", horizon=None).item() == pytest.approx(3.5)


def test_global_normalisers_and_horizon() -> None:
    loss_mat, mask = torch.tensor(L), torch.tensor(M)
    # token-mean: 7 / 6 with 6 global tokens
    assert agg_loss(loss_mat, mask, "token-mean", global_tokens=6, horizon=None).item() == pytest.approx(7 / 6)
    # seq-mean-token-mean: (1.5 + 4) / 4 with 4 global sequences
    assert agg_loss(loss_mat, mask, "seq-mean-token-mean", global_seqs=4, horizon=None).item() == pytest.approx(5.5 / 4)
    # seq-mean-token-sum: (3 + 4) / 4
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum", global_seqs=torch.tensor(4.0), horizon=None).item() == pytest.approx(7 / 4)
    # seq-mean-token-sum-norm with H = 10: (3 / 10 + 4 / 10) / 2 = 0.35
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", horizon=10).item() == pytest.approx(0.35)


def test_normalisers_counts() -> None:
    tokens, seqs = normalisers(torch.tensor([*M, [0.0, 0.0, 0.0]]))
    assert tokens.item() == 3 and seqs.item() == 2


def test_all_masked_is_zero_not_nan() -> None:
    for mode in AGG_MODES:
        value = agg_loss(torch.ones(2, 3), torch.zeros(2, 3), mode, horizon=None)
        assert value.item() == 0.0


def test_unknown_mode_lists_valid() -> None:
    with pytest.raises(ValueError, match="valid: token-mean, seq-mean-token-mean"):
        agg_loss(torch.ones(1, 1), torch.ones(1, 1), "token-sum", horizon=None)


@st.composite
def batches(draw):
    b = draw(st.integers(2, 8))
    t = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    # cut points splitting the rows into micro-batches
    cuts = sorted(draw(st.sets(st.integers(1, b - 1), max_size=b - 1)))
    return b, t, seed, cuts


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(AGG_MODES))
def test_split_invariance(batch, mode: str) -> None:
    """Summing micro-batch losses with global normalisers = the whole mini-batch loss (and grad)."""
    b, t, seed, cuts = batch
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) < 0.7).double()
    weight = torch.randn(b, t, generator=g, dtype=torch.float64)
    tokens, seqs = normalisers(mask)

    x_full = x.clone().requires_grad_(True)
    full = agg_loss(x_full * weight, mask, mode, global_tokens=tokens, global_seqs=seqs, horizon=None)
    full.backward()
    # the defaults count the same normalisers on the whole batch
    assert agg_loss(x * weight, mask, mode, horizon=None).item() == pytest.approx(full.item(), abs=1e-12)

    x_split = x.clone().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    bounds = [0, *cuts, b]
    for lo, hi in itertools.pairwise(bounds):
        total = total + agg_loss(
            x_split[lo:hi] * weight[lo:hi],
            mask[lo:hi],
            mode,
            global_tokens=tokens,
            global_seqs=seqs,
            horizon=t,
        )
    total.backward()
    assert total.item() == pytest.approx(full.item(), abs=1e-10)
    torch.testing.assert_close(x_split.grad, x_full.grad)


def test_non_finite_padding_does_not_leak() -> None:
    loss_mat = torch.tensor([[1.0, float("inf")], [2.0, float("nan")]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    for mode in AGG_MODES:
        value = agg_loss(loss_mat, mask, mode, horizon=None)
        assert torch.isfinite(value)
        (grad,) = torch.autograd.grad(value, loss_mat)
        assert torch.isfinite(grad).all() and (grad[:, 1] == 0).all()
