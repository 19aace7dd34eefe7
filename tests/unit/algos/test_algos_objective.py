"""arl.algos.objective.actor_loss: hand-computed composition and micro-batch split invariance."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.algos import aggregation
from arl.algos.objective import TokenBatch, actor_loss
from arl.algos.schema import AlgoConfig, replace

F64 = torch.float64


def algo(**changes) -> AlgoConfig:
    """The schema's defaults without KL and entropy (each test turns on what it checks), with
    dotted ``changes`` (``**{"kl.coef": 0.5}``)."""
    return replace(AlgoConfig(), **{"kl.coef": 0.0, "entropy_coef": 0.0, **changes})


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_actor_loss_hand() -> None:
    """reinforce + seq mask (delta 0.1) + truncated IS (cap 2) + KL k1 (0.5) + entropy (0.1)."""
    cfg = algo(**{
        "loss.name": "reinforce", "loss.agg": "token-mean", "seq_mask.enabled": True, "seq_mask.delta": 0.1,
        "rollout_correction.enabled": True, "rollout_correction.cap": 2.0, "kl.coef": 0.5, "kl.estimator": "k1",
        "entropy_coef": 0.1,
    })  # fmt: skip
    log_prob = t([[-1.0, -1.0], [-2.0, -2.0]]).requires_grad_(True)
    old = t([[-1.0, -1.0], [-1.5, -1.5]])  # seq1 drifted by 0.5 > 0.1 and has A < 0: masked
    adv = t([[1.0, 1.0], [-1.0, -1.0]])
    rollout = t([[-1.0 - math.log(3.0), -1.0], [-1.5, -1.5]])  # IS weights [[min(3, 2), 1], [1, 1]]
    ref = t([[-2.0, -1.0], [-2.0, -3.0]])  # k1 = log pi - log pi_ref = [[1, 0], [0, 1]]
    entropy = t([[0.5, 0.5], [1.0, 1.0]])
    batch = TokenBatch(log_prob, old, adv, torch.ones(2, 2), ref_log_prob=ref, rollout_log_prob=rollout, entropy=entropy)
    loss, m = actor_loss(batch, cfg)
    # pg: -A log pi * w = seq0 [1 * 2, 1 * 1] = [2, 1], seq1 dropped; / 4 tokens = 0.75
    # kl: (1 + 0 + 0 + 1) / 4 = 0.5, times 0.5 = 0.25
    # entropy: (0.5 + 0.5 + 1 + 1) / 4 = 0.75, times -0.1 = -0.075
    assert loss.item() == pytest.approx(0.75 + 0.25 - 0.075)
    assert m["pg_loss"].item() == pytest.approx(0.75)
    assert m["kl_loss"].item() == pytest.approx(0.5)
    assert m["entropy"].item() == pytest.approx(0.75)
    assert m["masked_seqs"].item() == 1.0
    assert m["ppo_kl"].item() == pytest.approx(0.25)  # mean(old - new) = (0 + 0 + 0.5 + 0.5) / 4
    loss.backward()
    # d/d log pi: pg -A w / 4 = [[-0.5, -0.25], [0, 0]]; kl 0.5 * 1 / 4 = 0.125 everywhere
    torch.testing.assert_close(log_prob.grad, t([[-0.375, -0.125], [0.125, 0.125]]))
    assert set(m) >= {"pg_loss", "kl_loss", "entropy", "clipfrac", "clipfrac_lower", "ppo_kl", "masked_seqs"}
    assert not any(v.requires_grad for v in m.values())


def test_actor_loss_kl_out_of_loss_and_defaults() -> None:
    lp = t([[-1.0, -2.0]]).requires_grad_(True)
    cfg = algo(**{"kl.coef": 0.5, "kl.in_loss": False})
    loss, m = actor_loss(TokenBatch(lp, lp.detach(), t([[1.0, 1.0]]), torch.ones(1, 2), ref_log_prob=lp.detach() - 1), cfg)
    # ppo_clip on-policy: L = -A r = -1 per token, token-mean = -1; no KL, no entropy
    assert loss.item() == pytest.approx(-1.0)
    assert m["kl_loss"].item() == 0.0 and m["entropy"].item() == 0.0 and m["masked_seqs"].item() == 0.0


def test_actor_loss_missing_inputs() -> None:
    lp, mask, adv = t([[-1.0]]), torch.ones(1, 1), t([[1.0]])
    with pytest.raises(ValueError, match="ref_log_prob"):
        actor_loss(TokenBatch(lp, lp, adv, mask), algo(**{"kl.coef": 0.1}))
    with pytest.raises(ValueError, match="rollout_log_prob"):
        actor_loss(TokenBatch(lp, lp, adv, mask), algo(**{"rollout_correction.enabled": True}))
    with pytest.raises(ValueError, match="entropy"):
        actor_loss(TokenBatch(lp, lp, adv, mask), algo(entropy_coef=0.1))
    with pytest.raises(KeyError, match="valid: cispo, gspo, ppo_clip, reinforce, sapo"):
        actor_loss(TokenBatch(lp, lp, adv, mask), algo(**{"loss.name": "nope"}))


@settings(max_examples=50, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 8),
    st.integers(1, 6),
    st.sampled_from(aggregation.AGG_MODES),
    st.sampled_from(["ppo_clip", "gspo", "cispo", "sapo", "reinforce"]),
    st.data(),
)
def test_actor_loss_split_invariance(seed, b, length, mode, name, data) -> None:
    """Micro-batch losses with global normalisers add up to the mini-batch loss, with sequence
    masking, truncated IS, KL and entropy all enabled."""
    cuts = sorted(data.draw(st.sets(st.integers(1, b - 1), max_size=b - 1)))
    g = torch.Generator().manual_seed(seed)
    old = -2.0 * torch.rand(b, length, generator=g, dtype=F64)
    lp = old + 0.3 * torch.randn(b, length, generator=g, dtype=F64)
    inputs = {
        "old_log_prob": old,
        "advantages": torch.randn(b, 1, generator=g, dtype=F64).expand(b, length),
        "response_mask": (torch.rand(b, length, generator=g) < 0.8).double(),
        "ref_log_prob": old + 0.1 * torch.randn(b, length, generator=g, dtype=F64),
        "rollout_log_prob": old + 0.1 * torch.randn(b, length, generator=g, dtype=F64),
        "entropy": torch.rand(b, length, generator=g, dtype=F64),
    }
    cfg = algo(**{
        "loss.name": name, "loss.agg": mode, "loss.clip_ratio_low": 0.1, "loss.clip_ratio_high": 0.1,
        "seq_mask.enabled": True, "seq_mask.delta": 0.05, "rollout_correction.enabled": True,
        "rollout_correction.cap": 1.5, "kl.coef": 0.1, "entropy_coef": 0.01,
    })  # fmt: skip
    tokens, seqs = aggregation.normalisers(inputs["response_mask"])

    lp_full = lp.clone().requires_grad_(True)
    full, _ = actor_loss(TokenBatch(lp_full, **inputs), cfg)
    full.backward()

    lp_split = lp.clone().requires_grad_(True)
    total = torch.zeros((), dtype=F64)
    bounds = [0, *cuts, b]
    for lo, hi in itertools.pairwise(bounds):
        part, _ = actor_loss(TokenBatch(lp_split, **inputs).rows(lo, hi), cfg, tokens, seqs)
        total = total + part
    total.backward()
    assert total.item() == pytest.approx(full.item(), abs=1e-10)
    torch.testing.assert_close(lp_split.grad, lp_full.grad)
