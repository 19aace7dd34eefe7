"""gspo's sequence ratio that sees outlier tokens (``algo.loss.seq_ratio``, ``outlier_beta``) and its token
bound (``algo.loss.token_bound``): hand-computed values and gradients, beta = 0 is the geometric mean to the
bit, on-policy both are REINFORCE, the weights are normalised and detached, and the start-up refusals."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.algos import aggregation, policy_losses
from arl.algos.policy_losses import outlier_weighted_log_ratio, sequence_log_ratio
from arl.algos.schema import LossConfig, validate_algo_config

F64 = torch.float64
SAMPO_CLIP = {"clip_ratio_low": 3e-3, "clip_ratio_high": 4e-3}
OUTLIER = LossConfig(name="gspo", seq_ratio="outlier_weighted", outlier_beta=10.0, **SAMPO_CLIP)
GEOMETRIC = LossConfig(name="gspo", **SAMPO_CLIP)


def gspo(log_prob: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, cfg: LossConfig):
    """gspo's loss matrix, the gradient of sum(loss_mat m) w.r.t. log pi, and its metrics."""
    lp = log_prob.clone().requires_grad_(True)
    loss_mat, metrics = policy_losses.gspo(log_prob=lp, old_log_prob=old, advantages=adv, response_mask=mask, cfg=cfg)
    (loss_mat * mask).sum().backward()
    return loss_mat.detach(), lp.grad, metrics


def one_outlier(sign: float):
    """A response of 200 tokens with log r = 0 except token 17, log r = 0.5 sign; A = sign."""
    log_prob = torch.full((1, 200), -1.0, dtype=F64)
    old = log_prob.clone()
    old[0, 17] -= 0.5 * sign
    return log_prob, old, torch.full((1, 200), sign, dtype=F64), torch.ones(1, 200, dtype=F64)


def test_one_outlier_escapes_the_geometric_clip_and_not_the_outlier_weighted_one() -> None:
    log_prob, old, adv, mask = one_outlier(+1.0)
    # geometric: log s = 0.5 / 200 = 0.0025, s = e^0.0025 = 1.0025031 < 1 + 4e-3: inside the clip, so every
    # token keeps its gradient -A s = -1.0025031
    loss, grad, m = gspo(log_prob, old, adv, mask, GEOMETRIC)
    s = math.exp(0.0025)
    torch.testing.assert_close(grad, torch.full((1, 200), -s, dtype=F64))
    assert m["clipfrac"].item() == 0.0
    # outlier-weighted, beta = 10: exp(beta |log r|) is e^5 = 148.4131591 for the outlier and e^0 = 1 for the
    # 199 others; sum 347.4131591; w_out = 148.4131591 / 347.4131591 = 0.4271950, w_other = 0.0028784.
    # log s = 0.4271950 x 0.5 = 0.2135975, s = e^0.2135975 = 1.2381 > 1.004: A > 0 and above the clip, so
    # L = -A (1 + 4e-3) = -1.004 on every token and no gradient
    w_out = math.exp(5.0) / (math.exp(5.0) + 199.0)
    assert w_out == pytest.approx(0.4271950, abs=1e-7)
    assert outlier_weighted_log_ratio(log_prob, old, mask, 10.0).item() == pytest.approx(0.5 * w_out, rel=1e-12)
    loss, grad, m = gspo(log_prob, old, adv, mask, OUTLIER)
    torch.testing.assert_close(loss, torch.full((1, 200), -1.004, dtype=F64))
    assert bool((grad == 0).all())
    assert m["clipfrac"].item() == 1.0
    assert m["seq_ratio_max_token_dev"].item() == pytest.approx(0.5)


def test_one_outlier_below_with_a_negative_advantage() -> None:
    # log r = -0.5 at one token, A = -1: geometric s = e^-0.0025 = 0.9975 > 1 - 3e-3 = 0.997 (inside, gradient
    # -A s = +0.9975 per token); outlier-weighted log s = -0.2136, s = 0.8077 < 0.997: clipped, no gradient
    log_prob, old, adv, mask = one_outlier(-1.0)
    _, grad, _ = gspo(log_prob, old, adv, mask, GEOMETRIC)
    torch.testing.assert_close(grad, torch.full((1, 200), math.exp(-0.0025), dtype=F64))
    loss, grad, m = gspo(log_prob, old, adv, mask, OUTLIER)
    torch.testing.assert_close(loss, torch.full((1, 200), 1.0 - 3e-3, dtype=F64))  # -A (1 - eps_low)
    assert bool((grad == 0).all()) and m["clipfrac"].item() == 1.0
    assert m["seq_ratio_max_token_dev"].item() == pytest.approx(0.5)  # |log r| of the token below


def test_outlier_weights_hand_and_their_gradient_form() -> None:
    # row 0: log r = [0.1, -0.3, 0.0], beta = 5: exp(5 |log r|) = [e^0.5, e^1.5, 1] = [1.6487213, 4.4816891, 1]
    # sum 7.1304104; log s = (0.1 x 1.6487213 - 0.3 x 4.4816891) / 7.1304104 = -1.1796346 / 7.1304104 = -0.1654371
    # row 1: log r = [0.2, 0.2, (masked 9.0)]: every weight alike, log s = 0.2 whatever beta
    # with a clip that never acts, the gradient stays GSPO's: -A s_i on each token of row i (A = 1)
    log_r = torch.tensor([[0.1, -0.3, 0.0], [0.2, 0.2, 9.0]], dtype=F64)
    old = torch.full((2, 3), -2.0, dtype=F64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=F64)
    got = outlier_weighted_log_ratio(old + log_r, old, mask, 5.0)
    e = [math.exp(0.5), math.exp(1.5), 1.0]
    want0 = (0.1 * e[0] - 0.3 * e[1]) / sum(e)
    assert want0 == pytest.approx(-0.1654371, abs=1e-7)
    torch.testing.assert_close(got, torch.tensor([want0, 0.2], dtype=F64), rtol=1e-12, atol=1e-12)
    wide = dataclasses.replace(OUTLIER, outlier_beta=5.0, clip_ratio_low=1.0, clip_ratio_high=1e9)
    _, grad, _ = gspo(old + log_r, old, torch.ones(2, 3, dtype=F64), mask, wide)
    s = torch.exp(got).unsqueeze(-1)
    torch.testing.assert_close(grad, -s * mask, rtol=1e-12, atol=1e-12)


def test_large_beta_tends_to_the_furthest_token() -> None:
    log_r = torch.tensor([[0.05, -0.4, 0.1, 0.0, 0.2]], dtype=F64)
    old = torch.zeros_like(log_r)
    mask = torch.ones_like(log_r)
    assert outlier_weighted_log_ratio(log_r, old, mask, 200.0).item() == pytest.approx(-0.4, abs=1e-6)
    assert outlier_weighted_log_ratio(log_r, old, mask, 0.0).item() == pytest.approx(-0.01)  # the plain mean


def test_empty_rows_and_garbage_padding() -> None:
    """An empty row has log s = 0; non-finite values on padding reach neither the ratio nor the gradient."""
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=F64)
    old = torch.tensor([[-1.0, -2.0, float("nan")], [float("nan")] * 3], dtype=F64)
    log_prob = torch.tensor([[-1.1, -1.9, float("-inf")], [float("-inf")] * 3], dtype=F64)
    clean_old, clean_lp = old.nan_to_num(0.0), log_prob.nan_to_num(neginf=0.0)
    ratio = outlier_weighted_log_ratio(log_prob, old, mask, 10.0)
    assert ratio[1].item() == 0.0
    assert ratio[0].item() == outlier_weighted_log_ratio(clean_lp, clean_old, mask, 10.0)[0].item()
    cfg = dataclasses.replace(OUTLIER, token_bound=0.05)
    results = []
    for lp, old_lp in ((log_prob, old), (clean_lp, clean_old)):
        lp = lp.clone().requires_grad_(True)
        loss_mat, metrics = policy_losses.gspo(log_prob=lp, old_log_prob=old_lp, advantages=torch.ones(2, 3, dtype=F64),
                                               response_mask=mask, cfg=cfg)
        value = aggregation.agg_loss(loss_mat, mask, "token-mean", horizon=None)
        value.backward()
        results.append((value.item(), lp.grad[mask > 0], {k: v.item() for k, v in metrics.items()}))
    (dirty_value, dirty_grad, dirty_m), (clean_value, clean_grad, clean_m) = results
    assert dirty_value == pytest.approx(clean_value) and dirty_m == pytest.approx(clean_m)
    torch.testing.assert_close(dirty_grad, clean_grad)


def test_token_bound_hand() -> None:
    # eps_tok = 0.2 and a clip of the sequence ratio that never acts. Rows (log r per token, A):
    # a: [ln 1.3, 0, 0, 0], A=+1: max r = 1.3 > 1.2 -> clipped whole, no gradient
    # b: [ln 0.7, 0, 0, 0], A=-1: min r = 0.7 < 0.8 -> clipped whole
    # c: [ln 0.7, 0, 0, 0], A=+1: below, the side A > 0 does not push -> gradient -A s, s = 0.7^(1/4)
    # d: [ln 1.3, 0, 0, 0], A=-1: above, the side A < 0 does not push -> gradient -A s, s = 1.3^(1/4)
    # e: [ln 1.19, 0, 0, 0], A=+1: inside the bound -> gradient -A s, s = 1.19^(1/4)
    first = [math.log(1.3), math.log(0.7), math.log(0.7), math.log(1.3), math.log(1.19)]
    log_r = torch.zeros(5, 4, dtype=F64)
    log_r[:, 0] = torch.tensor(first, dtype=F64)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=F64).unsqueeze(-1).expand(5, 4)
    mask = torch.ones(5, 4, dtype=F64)
    cfg = LossConfig(name="gspo", clip_ratio_low=1.0, clip_ratio_high=1e9, token_bound=0.2)
    old = torch.full((5, 4), -1.5, dtype=F64)
    loss, grad, m = gspo(old + log_r, old, adv, mask, cfg)
    s = torch.tensor([math.exp(v / 4) for v in first], dtype=F64).unsqueeze(-1)
    want = torch.cat([torch.zeros(2, 1, dtype=F64), -adv[2:, :1] * s[2:]]).expand(5, 4)
    torch.testing.assert_close(grad, want)
    torch.testing.assert_close(loss, -adv * s)  # a clipped row keeps its value
    assert m["token_bound_frac"].item() == pytest.approx(2 / 5) and m["clipfrac"].item() == pytest.approx(2 / 5)
    # eps_tok = 0.15: row e too (1.19 > 1.15), 3 of 5; eps_tok = 1.5: none (1.3 < 2.5, and no ratio is below
    # 1 - 1.5 < 0)
    _, _, m = gspo(old + log_r, old, adv, mask, dataclasses.replace(cfg, token_bound=0.15))
    assert m["token_bound_frac"].item() == pytest.approx(3 / 5)
    _, _, m = gspo(old + log_r, old, adv, mask, dataclasses.replace(cfg, token_bound=1.5))
    assert m["token_bound_frac"].item() == 0.0


# ------------------------------------------------------------------------------------------ properties
@st.composite
def rows(draw):
    b, length = draw(st.integers(1, 5)), draw(st.integers(1, 9))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    log_prob = -3.0 * torch.rand(b, length, generator=g, dtype=F64)
    old = log_prob + draw(st.floats(0.0, 2.0)) * torch.randn(b, length, generator=g, dtype=F64)
    mask = (torch.rand(b, length, generator=g) < 0.8).double()
    adv = torch.randn(b, length, generator=g, dtype=F64)
    return log_prob, old, adv, mask


@settings(max_examples=60, deadline=None)
@given(rows(), st.floats(1e-4, 0.5), st.floats(1e-4, 0.5))
def test_beta_zero_is_the_geometric_mean_to_the_bit(batch, eps_low, eps_high) -> None:
    log_prob, old, adv, mask = batch
    assert torch.equal(outlier_weighted_log_ratio(log_prob, old, mask, 0.0), sequence_log_ratio(log_prob, old, mask))
    geometric = dataclasses.replace(GEOMETRIC, clip_ratio_low=eps_low, clip_ratio_high=eps_high)
    beta0 = dataclasses.replace(geometric, seq_ratio="outlier_weighted", outlier_beta=0.0)
    (l1, g1, _), (l2, g2, _) = gspo(log_prob, old, adv, mask, geometric), gspo(log_prob, old, adv, mask, beta0)
    assert torch.equal(l1, l2) and torch.equal(g1, g2)


@settings(max_examples=60, deadline=None)
@given(rows(), st.floats(0.0, 50.0), st.floats(-1.0, 1.0))
def test_weights_are_normalised_and_between_the_extremes(batch, beta, shift) -> None:
    """A weighted mean: a constant log-ratio c gives c for any beta; otherwise the value lies between
    the row's smallest and largest token log-ratio."""
    log_prob, old, _, mask = batch
    const = outlier_weighted_log_ratio(old + shift, old, mask, beta)
    non_empty = mask.sum(-1) > 0
    torch.testing.assert_close(const[non_empty], torch.full_like(const[non_empty], shift))
    got = outlier_weighted_log_ratio(log_prob, old, mask, beta)
    d = log_prob - old
    high = torch.where(mask > 0, d, -torch.inf).amax(-1)
    low = torch.where(mask > 0, d, torch.inf).amin(-1)
    assert bool((got[non_empty] <= high[non_empty] + 1e-9).all() and (got[non_empty] >= low[non_empty] - 1e-9).all())


@settings(max_examples=60, deadline=None)
@given(rows(), st.sampled_from(aggregation.AGG_MODES), st.floats(0.0, 30.0), st.one_of(st.none(), st.floats(1e-3, 2.0)))
def test_on_policy_gradient_equals_reinforce(batch, mode, beta, token_bound) -> None:
    log_prob, _, adv, mask = batch
    cfg = dataclasses.replace(OUTLIER, outlier_beta=beta, token_bound=token_bound)

    def grad_of(name: str, loss_cfg: LossConfig) -> torch.Tensor:
        lp = log_prob.clone().requires_grad_(True)
        loss_mat, _ = policy_losses.get(name)(log_prob=lp, old_log_prob=log_prob, advantages=adv, response_mask=mask,
                                             cfg=loss_cfg)
        aggregation.agg_loss(loss_mat, mask, mode, horizon=None).backward()
        return lp.grad

    reinforce = grad_of("reinforce", cfg)
    torch.testing.assert_close(grad_of("gspo", cfg), reinforce)
    torch.testing.assert_close(grad_of("gspo", dataclasses.replace(cfg, seq_ratio="geometric")), reinforce)


# ------------------------------------------------------------------------------------ start-up refusals
def _algo(**loss) -> dict:
    algo = yaml.safe_load((Path(__file__).resolve().parents[3] / "configs" / "algo" / "base.yaml").read_text())
    algo["loss"].update(loss)
    return algo


@pytest.mark.parametrize("key,value", [("seq_ratio", "outlier_weighted"), ("token_bound", 0.1)])
@pytest.mark.parametrize("loss", ["ppo_clip", "cispo", "sapo"])
def test_the_sequence_ratio_keys_need_gspo(loss: str, key: str, value) -> None:
    with pytest.raises(ValueError, match=rf"algo.loss.{key}={value} is a setting of the gspo loss; algo.loss.name={loss} "
                                         r"has no sequence ratio"):
        validate_algo_config(_algo(name=loss, **{key: value}))
    validate_algo_config(_algo(name="gspo", **{key: value}))


def test_invalid_values_are_named() -> None:
    for key, value, says in [("seq_ratio", "max", "is not valid; valid: geometric, outlier_weighted"),
                             ("outlier_beta", -1.0, "is out of range: must be >= 0.0"),
                             ("token_bound", 0.0, "is out of range: must be > 0.0")]:
        with pytest.raises(ValueError, match=rf"algo.loss.{key}={value!r} {says}"):
            validate_algo_config(_algo(name="gspo", **{key: value}))
