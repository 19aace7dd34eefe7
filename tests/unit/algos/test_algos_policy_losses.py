"""arl.algos.policy_losses: hand-computed losses and gradients, on-policy = REINFORCE property,
sequence masking, truncated IS weights."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.algos import aggregation, policy_losses
from arl.algos.policy_losses import rollout_is_weights, sequence_mask
from arl.algos.schema import LossConfig

F64 = torch.float64


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def run(name: str, log_prob, old_log_prob, advantages, mask=None, cfg=None):
    """Loss matrix, its gradient (of loss_mat.sum() w.r.t. log_prob) and metrics."""
    log_prob = t(log_prob).requires_grad_(True)
    old = t(old_log_prob)
    adv = t(advantages)
    mask = torch.ones_like(old) if mask is None else t(mask)
    loss_mat, metrics = policy_losses.get(name)(
        log_prob=log_prob,
        old_log_prob=old,
        advantages=adv,
        response_mask=mask,
        cfg=cfg or LossConfig(),
    )
    (loss_mat * mask).sum().backward()
    return loss_mat.detach(), log_prob.grad, metrics


def test_ppo_clip_hand() -> None:
    # old = 0, so log r = log_prob; eps_low = eps_high = 0.2, c = 3
    ratios = [1.5, 0.5, 1.5, 4.0, 0.5, 1.0]
    adv = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0]
    loss, grad, m = run("ppo_clip", [[math.log(r) for r in ratios]], [[0.0] * 6], [adv])
    # a: A=+1 r=1.5: max(-1.5, -1.2) = -1.2 (clipped, grad 0)
    # b: A=+1 r=0.5: max(-0.5, -0.8) = -0.5 (grad -A r = -0.5)
    # c: A=-1 r=1.5: max(1.5, 1.2) = 1.5, min(1.5, 3) = 1.5 (grad -A r = 1.5)
    # d: A=-1 r=4:   max(4, 1.2) = 4, dual clip min(4, 3) = 3 (grad 0)
    # e: A=-1 r=0.5: max(0.5, 0.8) = 0.8 (clipped, grad 0)
    # f: A=+1 r=1:   -1 (grad -1)
    torch.testing.assert_close(loss, t([[-1.2, -0.5, 1.5, 3.0, 0.8, -1.0]]))
    torch.testing.assert_close(grad, t([[0.0, -0.5, 1.5, 0.0, 0.0, -1.0]]))
    assert m["clipfrac"].item() == pytest.approx(2 / 6)  # a and e
    assert m["clipfrac_lower"].item() == pytest.approx(1 / 6)  # d
    # ppo_kl = mean(-log r) = -(2 ln 1.5 + 2 ln 0.5 + ln 4) / 6 = -ln(1.5) / 3
    assert m["ppo_kl"].item() == pytest.approx(-math.log(1.5) / 3)


def test_ppo_clip_asymmetric_bounds_hand() -> None:
    # eps_low = 0.1, eps_high = 0.3 (DAPO's clip-higher shape): the range is [0.9, 1.3]
    cfg = LossConfig(clip_ratio_low=0.1, clip_ratio_high=0.3)
    ratios = [1.25, 1.4, 0.85, 0.95]
    adv = [1.0, 1.0, -1.0, -1.0]
    loss, grad, _ = run("ppo_clip", [[math.log(r) for r in ratios]], [[0.0] * 4], [adv], cfg=cfg)
    # a: A=+1 r=1.25 inside the range: -1.25 (grad -1.25); with the bounds swapped ([0.7, 1.1]) it would clip to -1.1
    # b: A=+1 r=1.4 above 1.3: max(-1.4, -1.3) = -1.3 (clipped, grad 0)
    # c: A=-1 r=0.85 below 0.9: max(0.85, 0.9) = 0.9 (clipped, grad 0); swapped it would stay 0.85
    # d: A=-1 r=0.95 inside: 0.95 (grad -A r = 0.95)
    torch.testing.assert_close(loss, t([[-1.25, -1.3, 0.9, 0.95]]))
    torch.testing.assert_close(grad, t([[-1.25, 0.0, 0.0, 0.95]]))


def test_ppo_clip_log_ratio_clamp_keeps_values_finite() -> None:
    # log r = 30 is clamped to 20: A=-1 with a huge dual-clip constant gives exp(20), grad 0
    loss, grad, _ = run("ppo_clip", [[30.0]], [[0.0]], [[-1.0]], cfg=LossConfig(clip_ratio_c=1e12))
    assert loss.item() == pytest.approx(math.exp(20.0))
    assert grad.item() == 0.0


def test_gspo_hand() -> None:
    # eps 0.2 / 0.2.  Rows (log r per token, mask, A):
    # seq0: [0.2, 0.0], [1, 1], A=+1: log s = 0.1, s = e^0.1 inside the clip range:
    #       L = -s on both tokens, grad = -A s = -e^0.1 on both.
    # seq1: [0.4, 5.0], [1, 0], A=+1: log s = 0.4 (masked token ignored), s = e^0.4 = 1.49 > 1.2:
    #       L = max(-1.49, -1.2) = -1.2 (clipped, grad 0).
    # seq2: [-0.3, -0.5], [1, 1], A=-1: log s = -0.4, s = 0.67 < 0.8: L = max(0.67, 0.8) = 0.8
    #       (clipped, grad 0).
    log_r = [[0.2, 0.0], [0.4, 5.0], [-0.3, -0.5]]
    log_prob = [[-1.0, -2.0], [-1.0, -1.0], [-0.5, -0.7]]
    old = [[lp - lr for lp, lr in zip(rp, rr, strict=True)] for rp, rr in zip(log_prob, log_r, strict=True)]
    adv = [[1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]]
    mask = [[1, 1], [1, 0], [1, 1]]
    loss, grad, m = run("gspo", log_prob, old, adv, mask)
    s0 = math.exp(0.1)
    torch.testing.assert_close(loss * t(mask), t([[-s0, -s0], [-1.2, 0.0], [0.8, 0.8]]))
    torch.testing.assert_close(grad, t([[-s0, -s0], [0.0, 0.0], [0.0, 0.0]]))
    assert m["clipfrac"].item() == pytest.approx(3 / 5)  # seq1 (1 token) + seq2 (2 tokens)
    assert m["clipfrac_lower"].item() == 0.0


def test_gspo_log_ratio_clamped_at_10() -> None:
    # log s = 12 is clamped to 10: L = -A e^10 with A=-1 and no effective clip; grad 0
    cfg = LossConfig(clip_ratio_high=1e9)
    loss, grad, _ = run("gspo", [[12.0]], [[0.0]], [[-1.0]], cfg=cfg)
    assert loss.item() == pytest.approx(math.exp(10.0))
    assert grad.item() == 0.0


def test_cispo_hand() -> None:
    # eps_low = 1.0 (no lower bound), eps_high = 0.2; L = -sg(w) A log pi, grad = -w A
    cfg = LossConfig(clip_ratio_low=1.0, clip_ratio_high=0.2)
    log_prob = [-1.0, -2.0, -0.5]
    ratios = [1.5, 0.5, 1.0]
    old = [lp - math.log(r) for lp, r in zip(log_prob, ratios, strict=True)]
    adv = [1.0, -1.0, 2.0]
    loss, grad, m = run("cispo", [log_prob], [old], [adv], cfg=cfg)
    # w = [1.2 (clipped), 0.5, 1.0]
    # L = [-1.2 * 1 * -1, -0.5 * -1 * -2, -1 * 2 * -0.5] = [1.2, -1.0, 1.0]
    torch.testing.assert_close(loss, t([[1.2, -1.0, 1.0]]))
    # grad = -w A = [-1.2, 0.5, -2.0]
    torch.testing.assert_close(grad, t([[-1.2, 0.5, -2.0]]))
    assert m["clipfrac"].item() == pytest.approx(1 / 3)


def test_sapo_hand() -> None:
    # tau_pos = 1, tau_neg = 1.05; f(r) = (4/tau) sigmoid(tau (r - 1)); L = -f(r) A
    # grad w.r.t. log pi: -A f'(r) r with f'(r) = 4 sigmoid (1 - sigmoid)
    def sig(x):
        return 1.0 / (1.0 + math.exp(-x))

    ratios = [1.0, 1.0, 2.0, 0.5]
    adv = [1.0, -1.0, 1.0, -2.0]
    loss, grad, m = run("sapo", [[math.log(r) for r in ratios]], [[0.0] * 4], [adv])
    expected_loss = [
        -4.0 * 0.5 * 1.0,  # A=+1, r=1: f = 4 * 0.5 = 2
        (4.0 / 1.05) * 0.5,  # A=-1, r=1: f = (4/1.05) * 0.5 = 1.904762, L = +f
        -4.0 * sig(1.0),  # A=+1, r=2: f = 4 * sigmoid(1) = 2.924234
        2.0 * (4.0 / 1.05) * sig(-0.525),  # A=-2, r=0.5: f = (4/1.05) sigmoid(1.05 * -0.5) = 1.415938
    ]
    expected_grad = [
        -1.0,  # f'(1) = 4 * 0.5 * 0.5 = 1, r = 1, -A = -1
        1.0,  # same, -A = +1
        -4.0 * sig(1.0) * (1 - sig(1.0)) * 2.0,  # -A f'(2) r = -0.786448 * 2 = -1.572895
        2.0 * 4.0 * sig(-0.525) * (1 - sig(-0.525)) * 0.5,  # 2 * 4 * 0.371684 * 0.628316 * 0.5 = 0.934140
    ]
    torch.testing.assert_close(loss, t([expected_loss]))
    torch.testing.assert_close(grad, t([expected_grad]))
    assert expected_grad[2] == pytest.approx(-1.572895, abs=1e-6)
    assert expected_grad[3] == pytest.approx(0.934140, abs=1e-6)
    assert m["clipfrac"].item() == 0.0


def test_sapo_gate_slope_is_one_on_policy() -> None:
    """f'(1) = 1 for any tau (verified with autograd on f itself)."""
    for tau in (0.5, 1.0, 1.05, 3.0):
        r = torch.tensor(1.0, dtype=F64, requires_grad=True)
        f = (4.0 / tau) * torch.sigmoid(tau * (r - 1.0))
        f.backward()
        assert r.grad.item() == pytest.approx(1.0)


def test_reinforce_hand() -> None:
    # L = -A log pi = [-2 * -1, 1 * -2] = [2, -2]; grad = -A = [-2, 1]
    loss, grad, m = run("reinforce", [[-1.0, -2.0]], [[-1.0, -2.5]], [[2.0, -1.0]])
    torch.testing.assert_close(loss, t([[2.0, -2.0]]))
    torch.testing.assert_close(grad, t([[-2.0, 1.0]]))
    # ppo_kl = mean(old - new) = (0 + -0.5) / 2
    assert m["ppo_kl"].item() == pytest.approx(-0.25)
    assert m["clipfrac"].item() == 0.0 and m["clipfrac_lower"].item() == 0.0


@pytest.mark.parametrize("name", policy_losses.REGISTRY.names())
def test_metrics_present(name: str) -> None:
    _, _, m = run(name, [[-1.0, -2.0]], [[-1.1, -1.9]], [[1.0, 1.0]])
    for key in ("clipfrac", "clipfrac_lower", "ppo_kl"):
        assert key in m and m[key].dim() == 0 and not m[key].requires_grad


def test_sequence_mask_hand() -> None:
    # delta = 0.1; drift = (1/|y|) sum_t m_t (old - new)
    # seq0: A=-1, drift (0.3 + 0.1) / 2 = 0.2 > 0.1 -> dropped
    # seq1: A=+1, drift 0.5 -> kept (positive advantage)
    # seq2: A=-1, drift (0.1 + 0.0) / 2 = 0.05 -> kept
    # seq3: A=-1, mask [1, 0], drift 0.2 (the masked -100 is ignored) -> dropped
    log_prob = t([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]])
    drift = t([[0.3, 0.1], [0.5, 0.5], [0.1, 0.0], [0.2, -100.0]])
    adv = t([[-1.0, -1.0], [1.0, 1.0], [-1.0, -1.0], [-1.0, -1.0]])
    mask = t([[1, 1], [1, 1], [1, 1], [1, 0]])
    out = sequence_mask(log_prob, log_prob + drift, adv, mask, 0.1)
    torch.testing.assert_close(out, t([[0, 0], [1, 1], [1, 1], [0, 0]]))
    assert not out.requires_grad


def test_truncated_is_weights_hand() -> None:
    # old - rollout = [ln 1.5, ln 3, ln 0.5, 50 (masked)], cap 2 -> [1.5, 2, 0.5, 0]
    old = t([[0.0, 0.0, 0.0, 0.0]]).requires_grad_(True)
    rollout = t([[-math.log(1.5), -math.log(3.0), -math.log(0.5), -50.0]])
    w = rollout_is_weights(old, rollout, t([[1, 1, 1, 0]]), 2.0, "token", "truncate")
    torch.testing.assert_close(w, t([[1.5, 2.0, 0.5, 0.0]]))
    assert not w.requires_grad


def test_rollout_is_weights_levels_and_modes_hand() -> None:
    """Row 0: rho = [1.5, 3, 0.5] and a masked 50; row 1: rho = [1.2, 1.2], then padding."""
    old = t([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    rollout = t([[-math.log(1.5), -math.log(3.0), -math.log(0.5), -50.0],
                 [-math.log(1.2), -math.log(1.2), 0.0, 0.0]])
    mask = t([[1, 1, 1, 0], [1, 1, 0, 0]])
    # token, mask at cap 2: 3 is past the cap -> 0 (AReaL's behaviour-weight cap), the rest kept as they are
    torch.testing.assert_close(rollout_is_weights(old, rollout, mask, 2.0, "token", "mask"),
                               t([[1.5, 0.0, 0.5, 0.0], [1.2, 1.2, 0.0, 0.0]]))
    # sequence: the row's product, 1.5 x 3 x 0.5 = 2.25 (truncated to 2 / masked to 0); 1.2 x 1.2 = 1.44
    torch.testing.assert_close(rollout_is_weights(old, rollout, mask, 2.0, "sequence", "truncate"),
                               t([[2.0, 2.0, 2.0, 0.0], [1.44, 1.44, 0.0, 0.0]]))
    torch.testing.assert_close(rollout_is_weights(old, rollout, mask, 2.0, "sequence", "mask"),
                               t([[0.0, 0.0, 0.0, 0.0], [1.44, 1.44, 0.0, 0.0]]))
    # geometric: 2.25 ** (1/3) = 1.310371 and 1.44 ** (1/2) = 1.2, under the cap either way
    g = 2.25 ** (1 / 3)
    for mode in ("truncate", "mask"):
        torch.testing.assert_close(rollout_is_weights(old, rollout, mask, 2.0, "geometric", mode),
                                   t([[g, g, g, 0.0], [1.2, 1.2, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="valid: token, sequence, geometric"):
        rollout_is_weights(old, rollout, mask, 2.0, "row", "truncate")
    with pytest.raises(ValueError, match="valid: truncate, mask"):
        rollout_is_weights(old, rollout, mask, 2.0, "token", "clip")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 5), st.integers(1, 7), st.floats(1.0, 4.0),
       st.sampled_from(["token", "sequence", "geometric"]), st.sampled_from(["truncate", "mask"]))
def test_rollout_is_weights_properties(seed, b, length, cap, level, mode) -> None:
    """On random rows: 0 outside the mask; never above the cap; 1 where the two policies agree; a row's
    weight is one number at the sequence levels; truncate and mask agree wherever the weight is under the cap."""
    g = torch.Generator().manual_seed(seed)
    old = -2.0 * torch.rand(b, length, generator=g, dtype=F64)
    rollout = old + 0.5 * torch.randn(b, length, generator=g, dtype=F64)
    mask = (torch.rand(b, length, generator=g) < 0.8).double()
    w = rollout_is_weights(old, rollout, mask, cap, level, mode)
    assert bool((w[mask == 0] == 0).all()) and bool((w <= cap + 1e-12).all()) and bool((w >= 0).all())
    same = rollout_is_weights(old, old, mask, cap, level, mode)
    torch.testing.assert_close(same, mask)
    if level != "token":
        for row in range(b):
            values = w[row][mask[row] > 0]
            assert values.numel() == 0 or bool((values == values[0]).all())
    other = rollout_is_weights(old, rollout, mask, cap, level, "mask" if mode == "truncate" else "truncate")
    under = (w < cap) & (other < cap) & (w > 0) & (other > 0)
    torch.testing.assert_close(w[under], other[under])


@st.composite
def policy_batch(draw):
    b = draw(st.integers(1, 6))
    length = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    per_token = draw(st.booleans())
    g = torch.Generator().manual_seed(seed)
    log_prob = -3.0 * torch.rand(b, length, generator=g, dtype=F64)
    mask = (torch.rand(b, length, generator=g) < 0.8).double()
    if per_token:
        adv = torch.randn(b, length, generator=g, dtype=F64)
    else:
        adv = torch.randn(b, 1, generator=g, dtype=F64).expand(b, length)
    return log_prob, mask, adv


@settings(max_examples=60, deadline=None)
@given(
    policy_batch(),
    st.sampled_from(["ppo_clip", "gspo", "cispo", "sapo"]),
    st.sampled_from(aggregation.AGG_MODES),
    st.floats(1e-3, 0.5),
    st.floats(1e-3, 0.5),
    st.floats(0.2, 3.0),
    st.floats(0.2, 3.0),
)
def test_on_policy_gradient_equals_reinforce(batch, name, mode, eps_low, eps_high, tau_pos, tau_neg) -> None:
    log_prob, mask, adv = batch
    cfg = LossConfig(clip_ratio_low=eps_low, clip_ratio_high=eps_high, tau_pos=tau_pos, tau_neg=tau_neg)

    def grad_of(loss_name: str) -> torch.Tensor:
        lp = log_prob.clone().requires_grad_(True)
        loss_mat, _ = policy_losses.get(loss_name)(
            log_prob=lp, old_log_prob=log_prob, advantages=adv, response_mask=mask, cfg=cfg
        )
        aggregation.agg_loss(loss_mat, mask, mode, horizon=None).backward()
        return lp.grad

    torch.testing.assert_close(grad_of(name), grad_of("reinforce"))


@settings(max_examples=60, deadline=None)
@given(policy_batch(), st.floats(0.0, 0.5))
def test_sequence_mask_never_drops_positive_advantage(batch, delta) -> None:
    log_prob, mask, adv = batch
    g = torch.Generator().manual_seed(int(delta * 1e6))
    old = log_prob + 0.5 * torch.randn(log_prob.shape, generator=g, dtype=F64)
    out = sequence_mask(log_prob, old, adv, mask, delta)
    lengths = mask.sum(-1).clamp_min(1)
    mean_adv = (adv * mask).sum(-1) / lengths
    drift = ((old - log_prob) * mask).sum(-1) / lengths
    dropped = (out.sum(-1) == 0) & (mask.sum(-1) > 0)
    assert torch.equal(out[mean_adv >= 0], mask[mean_adv >= 0])
    assert bool((mean_adv[dropped] < 0).all()) and bool((drift[dropped] > delta).all())
    # rows are either kept whole or dropped whole
    assert bool(((out == mask) | (out == 0)).all())


@pytest.mark.parametrize("name", policy_losses.REGISTRY.names())
def test_non_finite_padding_does_not_leak(name: str) -> None:
    """Garbage log-probs on padded positions change neither the loss nor the gradient."""
    mask = t([[1, 1, 0]])
    old = t([[-1.0, -2.0, float("nan")]])
    clean = t([[-1.1, -1.9, 0.0]]).requires_grad_(True)
    dirty = t([[-1.1, -1.9, float("-inf")]]).requires_grad_(True)
    values = []
    for lp, old_lp in ((clean, old.nan_to_num(0.0)), (dirty, old)):
        loss_mat, metrics = policy_losses.get(name)(
            log_prob=lp,
            old_log_prob=old_lp,
            advantages=t([[1.0, 1.0, 1.0]]),
            response_mask=mask,
            cfg=LossConfig(),
        )
        value = aggregation.agg_loss(loss_mat, mask, "seq-mean-token-mean", horizon=None)
        value.backward()
        values.append((value.item(), metrics["ppo_kl"].item()))
    assert values[0] == pytest.approx(values[1])
    torch.testing.assert_close(dirty.grad[:, :2], clean.grad[:, :2])
    assert torch.isfinite(dirty.grad).all()
