"""arl.algos.kl: hand-computed estimators and gradients, clamps, KL in the reward."""

from __future__ import annotations

import math

import pytest
import torch

from arl.algos import kl

F64 = torch.float64
E = math.e

# log pi = [0, -1], log pi_ref = [-1, 0]  ->  x = log pi_ref - log pi = [-1, 1]
LOG_PROB = [[0.0, -1.0]]
REF = [[-1.0, 0.0]]
HAND = {
    # k1 = -x = [1, -1]; d/d log pi = 1
    "k1": ([[1.0, -1.0]], [[1.0, 1.0]]),
    # abs = |x| = [1, 1]; d/d log pi = sign(log pi - log pi_ref) = [1, -1]
    "abs": ([[1.0, 1.0]], [[1.0, -1.0]]),
    # k2 = x^2 / 2 = [0.5, 0.5]; d/d log pi = log pi - log pi_ref = [1, -1]
    "k2": ([[0.5, 0.5]], [[1.0, -1.0]]),
    # k3 = e^x - x - 1 = [e^-1 + 1 - 1, e - 1 - 1] = [0.367879, 0.718282];
    # d/d log pi = 1 - e^x = [0.632121, -1.718282]
    "k3": ([[1 / E, E - 2]], [[1 - 1 / E, 1 - E]]),
}
HAND["low_var_kl"] = HAND["k3"]


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_values_and_gradients(name: str) -> None:
    log_prob = torch.tensor(LOG_PROB, dtype=F64, requires_grad=True)
    value = kl.kl_penalty(log_prob, torch.tensor(REF, dtype=F64), name)
    value.sum().backward()
    expected_value, expected_grad = HAND[name]
    torch.testing.assert_close(value.detach(), torch.tensor(expected_value, dtype=F64))
    torch.testing.assert_close(log_prob.grad, torch.tensor(expected_grad, dtype=F64))


def test_registry_names() -> None:
    assert kl.ESTIMATORS.names() == ("abs", "k1", "k2", "k3", "low_var_kl")
    assert kl.get("low_var_kl") is kl.get("k3")


def test_k3_clamps() -> None:
    # x = 15: e^15 - 16 >> 10 -> 10 with zero gradient; x = 25 is clamped to 20 first: still 10
    log_prob = torch.tensor([[0.0, 0.0]], dtype=F64, requires_grad=True)
    value = kl.k3(log_prob, torch.tensor([[15.0, 25.0]], dtype=F64))
    value.sum().backward()
    torch.testing.assert_close(value.detach(), torch.tensor([[10.0, 10.0]], dtype=F64))
    assert torch.isfinite(log_prob.grad).all() and (log_prob.grad == 0).all()


def test_kl_in_reward_hand() -> None:
    # k1 per token: row 0 = [1, -1], row 1 = [1, -1]; masks [1, 1] and [1, 0]
    # coef 0.5: row 0 = 0.5 * (1 - 1) = 0, row 1 = 0.5 * 1 = 0.5
    log_prob = torch.tensor([[0.0, -1.0], [0.0, -1.0]], dtype=F64, requires_grad=True)
    ref = torch.tensor([[-1.0, 0.0], [-1.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0]])
    penalty = kl.kl_in_reward(log_prob, ref, mask, coef=0.5, estimator="k1")
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.5], dtype=F64))
    assert penalty.shape == (2,) and not penalty.requires_grad


def test_unknown_estimator_lists_valid() -> None:
    with pytest.raises(KeyError, match="valid: abs, k1, k2, k3, low_var_kl"):
        kl.kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")
