"""arl.algos.advantages: hand-computed estimators, turn-level registry, properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.algos import advantages
from arl.algos.advantages import DATA_KEYS, step_returns
from arl.algos.schema import AdvantageConfig, replace

EPS = 1e-6
F64 = torch.float64


def estimate(name: str, data: dict, **changes) -> torch.Tensor:
    """Estimator ``name``'s advantages on ``data`` with the schema's settings (``changes`` applied)."""
    return estimate_with_metrics(name, data, **changes)[0]


def estimate_with_metrics(name: str, data: dict, **changes) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    cfg = replace(AdvantageConfig(), name=name, **changes)
    return advantages.get(name)(advantages.TurnTable(**data), cfg)


def one_turn_episodes(scores: torch.Tensor, group_ids: torch.Tensor) -> dict:
    """Every score its own single-turn, valid episode: the estimators on plain scores."""
    n = scores.numel()
    return {
        "step_rewards": scores, "episode_ids": torch.arange(n), "turn_idx": torch.zeros(n, dtype=torch.long),
        "group_ids": group_ids, "anchor_keys": torch.arange(n), "valid": torch.ones(n, dtype=torch.bool),
    }  # fmt: skip


def grpo(scores, group_ids, **changes):
    return estimate("grpo", one_turn_episodes(scores, group_ids), **changes)


def rloo(scores, group_ids, **changes):
    return estimate("rloo", one_turn_episodes(scores, group_ids), **changes)


def gigpo(**kw):
    data = {key: kw.pop(key) for key in DATA_KEYS}
    return estimate("gigpo", data, **kw)


def gigpo_parts(**kw):
    data = {key: kw.pop(key) for key in DATA_KEYS}
    return advantages.gigpo_parts(advantages.TurnTable(**data), replace(AdvantageConfig(), **kw))


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-9) -> None:
    torch.testing.assert_close(actual.to(F64), t(expected), atol=atol, rtol=0)


# ------------------------------------------------------------------------------- grpo / rloo
def test_grpo_hand() -> None:
    # group 7: [1, 2, 3] mean 2, unbiased std 1 -> [-1, 0, 1] / (1 + eps)
    # group 9: [10] alone -> mean 0, std 1 -> 10 / (1 + eps)
    scores, groups = t([1.0, 2.0, 3.0, 10.0]), torch.tensor([7, 7, 7, 9])
    close(grpo(scores, groups), [-1 / (1 + EPS), 0.0, 1 / (1 + EPS), 10 / (1 + EPS)])
    close(grpo(scores, groups, norm_by_std=False), [-1.0, 0.0, 1.0, 10.0])


def test_grpo_keeps_dtype_and_handles_empty() -> None:
    assert grpo(torch.tensor([1.0, 2.0]), torch.tensor([0, 0])).dtype == torch.float32
    assert grpo(torch.tensor([1, 2]), torch.tensor([0, 0])).dtype == torch.float32
    assert grpo(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_rloo_hand() -> None:
    # group 7: A0 = 1 - (2 + 3) / 2 = -1.5, A1 = 2 - (1 + 3) / 2 = 0, A2 = 3 - (1 + 2) / 2 = 1.5
    # group 9 has one member -> 0
    close(rloo(t([1.0, 2.0, 3.0, 10.0]), torch.tensor([7, 7, 7, 9])), [-1.5, 0.0, 1.5, 0.0])


# ------------------------------------------------------------------------------ step returns
def test_step_returns_hand_any_order() -> None:
    # episode 5: rewards [1, 0, 2] over turns 0..2, gamma 0.5: R2 = 2, R1 = 0 + 0.5 * 2 = 1,
    #            R0 = 1 + 0.5 * 1 = 1.5
    # episode 3: rewards [0, 4]: R1 = 4, R0 = 0 + 0.5 * 4 = 2
    # given in scrambled order:
    episode = torch.tensor([5, 3, 5, 3, 5])
    turn = torch.tensor([2, 1, 0, 0, 1])
    reward = t([2.0, 4.0, 1.0, 0.0, 0.0])
    close(step_returns(reward, episode, turn, 0.5), [2.0, 4.0, 1.5, 2.0, 1.0])


def test_step_returns_gaps_and_duplicates() -> None:
    # only the order of turn_idx matters: turns [0, 3, 7] behave like [0, 1, 2]
    # rewards [1, 1, 1], gamma 0.5: R = [1.75, 1.5, 1]
    close(step_returns(t([1.0, 1.0, 1.0]), torch.tensor([0, 0, 0]), torch.tensor([7, 0, 3]), 0.5), [1.0, 1.75, 1.5])
    with pytest.raises(ValueError, match="duplicate"):
        step_returns(t([1.0, 1.0]), torch.tensor([0, 0]), torch.tensor([1, 1]), 0.5)


# ------------------------------------------------------------------------------------- gigpo
# Group 0: episode 10 (A): turns 0, 1, rewards [0, 1], anchors [s0, s1], both valid
#          episode 11 (B): turns 0, 1, 2, rewards [0, 0, 0], anchors [s0, s2, s1], turn 1 invalid
# Group 1: episode 10 (a different episode with the same id): one turn, reward 2, anchor s0
S0, S1, S2 = 1234567890123, -987654321, 42
CASE = {
    "step_rewards": t([0.0, 1.0, 0.0, 0.0, 0.0, 2.0]),
    "episode_ids": torch.tensor([10, 10, 11, 11, 11, 10]),
    "turn_idx": torch.tensor([0, 1, 0, 1, 2, 0]),
    "group_ids": torch.tensor([0, 0, 0, 0, 0, 1]),
    "anchor_keys": torch.tensor([S0, S1, S0, S2, S1, S0]),
    "valid": torch.tensor([True, True, True, False, True, True]),
}
# returns: A = 1, B = 0, group-1 episode = 2
# turn scores (return + penalty -0.1 on the invalid turn): [1, 1, 0, -0.1, 0 | 2]
SCORES = [1.0, 1.0, 0.0, -0.1, 0.0]
MEAN0 = sum(SCORES) / 5  # 0.38
STD0 = math.sqrt(sum((s - MEAN0) ** 2 for s in SCORES) / 4)  # sqrt(1.288 / 4) = 0.567450


def test_gigpo_hand_mean_norm() -> None:
    # A_E = score - 0.38 = [0.62, 0.62, -0.38, -0.48, -0.38]; group 1 alone: mean 0 -> 2
    # step returns (gamma 0.5): A: [0 + 0.5 * 1, 1] = [0.5, 1]; B: [0, 0, 0], penalty on B1: -0.1
    # clusters in group 0: s0 = {A0: 0.5, B0: 0} mean 0.25 -> [+0.25, -0.25]
    #                      s1 = {A1: 1, B2: 0} mean 0.5 -> [+0.5, -0.5];  s2 = {B1} alone -> 0
    # group 1's s0 is another cluster (never across groups): alone -> 0
    # A = A_E + A_S = [0.87, 1.12, -0.63, -0.48, -0.88, 2]
    adv = gigpo(**CASE, gamma=0.5, step_weight=1.0, norm="mean_norm", invalid_penalty=-0.1)
    close(adv, [0.87, 1.12, -0.63, -0.48, -0.88, 2.0])
    assert adv.dtype == torch.float64
    # step_weight 0 leaves the episode part only
    close(gigpo(**CASE, gamma=0.5, step_weight=0.0), [0.62, 0.62, -0.38, -0.48, -0.38, 2.0])


def test_gigpo_hand_mean_std_norm() -> None:
    # A_E = (score - 0.38) / (0.567450 + eps); group 1: 2 / (1 + eps)
    # s0: [0.5, 0] -> std sqrt(2 * 0.25^2 / 1) = 0.353553 -> +-0.25 / (0.353553 + eps)
    # s1: [1, 0]   -> std sqrt(2 * 0.5^2 / 1) = 0.707107 -> +-0.5 / (0.707107 + eps)
    std_s0, std_s1 = math.sqrt(0.125), math.sqrt(0.5)
    episode = [(s - MEAN0) / (STD0 + EPS) for s in SCORES] + [2 / (1 + EPS)]
    step = [0.25 / (std_s0 + EPS), 0.5 / (std_s1 + EPS), -0.25 / (std_s0 + EPS), 0.0, -0.5 / (std_s1 + EPS), 0.0]
    adv = gigpo(**CASE, gamma=0.5, step_weight=0.5, norm="mean_std_norm")
    close(adv, [e + 0.5 * s for e, s in zip(episode, step, strict=True)])
    assert STD0 == pytest.approx(0.567450, abs=1e-6)


def test_gigpo_parts_hand() -> None:
    # the parts of test_gigpo_hand_mean_norm, separately
    episode, step = gigpo_parts(**CASE, gamma=0.5, norm="mean_norm")
    close(episode, [0.62, 0.62, -0.38, -0.48, -0.38, 2.0])
    close(step, [0.25, 0.5, -0.25, 0.0, -0.5, 0.0])
    assert episode.dtype == step.dtype == torch.float64
    adv = gigpo(**CASE, gamma=0.5, step_weight=0.3, norm="mean_std_norm")
    episode, step = gigpo_parts(**CASE, gamma=0.5, norm="mean_std_norm")
    close(adv, (episode + 0.3 * step).tolist())
    empty = {k: v[:0] for k, v in CASE.items()}
    assert [t.numel() for t in gigpo_parts(**empty)] == [0, 0]


def test_estimators_return_their_metrics_by_hand() -> None:
    # GiGPO's step_std: the step part of test_gigpo_hand_mean_norm, [0.25, 0.5, -0.25, 0, -0.5, 0] x step_weight
    # 0.5 = [0.125, 0.25, -0.125, 0, -0.25, 0]: mean 0, unbiased variance (2 x 0.125^2 + 2 x 0.25^2) / 5 = 0.03125
    data = {key: CASE[key] for key in DATA_KEYS}
    _, metrics = estimate_with_metrics("gigpo", data, gamma=0.5, step_weight=0.5, norm="mean_norm")
    assert set(metrics) == {"step_std"}
    assert float(metrics["step_std"]) == pytest.approx(math.sqrt(0.03125), abs=1e-12)
    # with no step part, or one turn, the step part has no spread
    assert float(estimate_with_metrics("gigpo", data, step_weight=0.0)[1]["step_std"]) == 0.0
    one = {key: value[5:] for key, value in data.items()}
    assert float(estimate_with_metrics("gigpo", one)[1]["step_std"]) == 0.0
    for name in ("grpo", "rloo"):
        assert estimate_with_metrics(name, data)[1] == {}


def test_gigpo_rejects_unknown_norm() -> None:
    with pytest.raises(ValueError, match="valid: mean_norm, mean_std_norm"):
        gigpo(**CASE, norm="std")


# ------------------------------------------------------------------------ turn-level registry
def test_turn_grpo_hand() -> None:
    # cross_steps: stats over the 5 turn scores of group 0 (mean 0.38, std 0.567450)
    expected = [(s - MEAN0) / (STD0 + EPS) for s in SCORES] + [2 / (1 + EPS)]
    close(estimate("grpo", CASE), expected)
    # one return per episode: group 0 returns [1, 0], mean 0.5, std sqrt(0.5) = 0.707107;
    # each turn's score is normalised with them: A-turns 0.5 / 0.707107 = 0.707106,
    # B-turns -0.5 / 0.707107, invalid B1 -0.6 / 0.707107 = -0.848528; group 1: one episode -> 2
    sd = math.sqrt(0.5) + EPS
    close(
        estimate("grpo", CASE, cross_steps=False),
        [0.5 / sd, 0.5 / sd, -0.5 / sd, -0.6 / sd, -0.5 / sd, 2 / (1 + EPS)],
    )
    close(
        estimate("grpo", CASE, norm_by_std=False, invalid_penalty=0.0), [0.6, 0.6, -0.4, -0.4, -0.4, 2.0]
    )  # scores [1, 1, 0, 0, 0], mean 0.4


def test_turn_rloo_hand() -> None:
    # one return per episode: A's baseline = B's return 0 -> [1, 1]; B's baseline = 1 ->
    # [-1, -1.1, -1]; group 1 has a single episode -> 0
    close(estimate("rloo", CASE, cross_steps=False), [1.0, 1.0, -1.0, -1.1, -1.0, 0.0])
    # cross steps: A's baseline = mean of B's turn scores (0 - 0.1 + 0) / 3 = -1/30;
    # B's baseline = mean of A's turn scores = 1
    close(estimate("rloo", CASE), [1 + 1 / 30, 1 + 1 / 30, -1.0, -1.1, -1.0, 0.0])


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo"])
def test_estimators_read_their_settings_from_the_schema(name: str) -> None:
    """Each estimator takes (turns, cfg): no setting of its own outside the schema, and the settings it names
    change its result (cross_steps for the two that average over turns, gamma for gigpo)."""
    table = advantages.TurnTable(**CASE)
    base = replace(AdvantageConfig(), name=name)
    with pytest.raises(TypeError):
        advantages.get(name)(table, base, bogus=1)  # an unknown setting
    with pytest.raises(TypeError):
        advantages.get(name)(table)  # no setting has a default outside the schema
    key, value = {"grpo": ("cross_steps", False), "rloo": ("cross_steps", False), "gigpo": ("gamma", 0.5)}[name]
    assert not torch.equal(advantages.get(name)(table, base)[0], advantages.get(name)(table, replace(base, **{key: value}))[0])


def test_a_turn_table_checks_its_shapes() -> None:
    with pytest.raises(ValueError, match="same length"):
        advantages.TurnTable(**dict(CASE, valid=CASE["valid"][:-1]))
    with pytest.raises(ValueError, match="must be 1-D"):
        advantages.TurnTable(**dict(CASE, step_rewards=CASE["step_rewards"][None]))
    assert advantages.TurnTable(**CASE).n == 6


# -------------------------------------------------------------------------------- properties
@st.composite
def turn_samples(draw, distinct_anchors: bool = False):
    """Random groups x episodes x turns, shuffled; anchors drawn from a tiny set (repeats)."""
    seed = draw(st.integers(0, 2**31 - 1))
    num_groups = draw(st.integers(1, 4))
    g = torch.Generator().manual_seed(seed)
    rows = []
    episode_id = 0
    for group in range(num_groups):
        for _ in range(draw(st.integers(1, 4))):
            for turn in range(draw(st.integers(1, 5))):
                rows.append((group * 100 + 3, episode_id, turn))
            episode_id += 1
    n = len(rows)
    order = torch.randperm(n, generator=g)
    group = torch.tensor([r[0] for r in rows])[order]
    episode = torch.tensor([r[1] for r in rows])[order]
    turn = torch.tensor([r[2] for r in rows])[order]
    anchors = torch.arange(n) * 7919 if distinct_anchors else torch.randint(0, 3, (n,), generator=g)
    return {
        "step_rewards": torch.randint(-2, 3, (n,), generator=g).to(F64) / 2,
        "episode_ids": episode,
        "turn_idx": turn,
        "group_ids": group,
        "anchor_keys": anchors,
        "valid": torch.rand(n, generator=g) > 0.2,
    }


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.lists(st.integers(2, 6), min_size=1, max_size=5), st.booleans())
def test_grpo_sums_to_zero_per_group(seed, sizes, by_std) -> None:
    g = torch.Generator().manual_seed(seed)
    groups = torch.repeat_interleave(torch.arange(len(sizes)) * 11, torch.tensor(sizes))
    groups = groups[torch.randperm(groups.numel(), generator=g)]
    adv = grpo(torch.randn(groups.numel(), generator=g, dtype=F64), groups, norm_by_std=by_std)
    sums = torch.zeros(len(sizes), dtype=F64).index_add_(0, torch.unique(groups, return_inverse=True)[1], adv)
    torch.testing.assert_close(sums, torch.zeros_like(sums), atol=1e-9, rtol=0)


@settings(max_examples=50, deadline=None)
@given(
    turn_samples(distinct_anchors=True),
    st.sampled_from(advantages.NORM_MODES),
    st.floats(0.0, 1.0),
    st.floats(0.0, 2.0),
)
def test_gigpo_distinct_anchors_is_episode_part(data, norm, gamma, weight) -> None:
    adv = gigpo(**data, gamma=gamma, step_weight=weight, norm=norm)
    episode_part = estimate("grpo", data, norm_by_std=norm == "mean_std_norm", cross_steps=True)
    torch.testing.assert_close(adv, episode_part)


@settings(max_examples=50, deadline=None)
@given(turn_samples(), st.integers(0, 2**31 - 1), st.sampled_from(["grpo", "rloo", "gigpo"]))
def test_estimators_are_order_invariant(data, seed, name) -> None:
    perm = torch.randperm(data["step_rewards"].numel(), generator=torch.Generator().manual_seed(seed))
    full = estimate(name, data)
    permuted = estimate(name, {k: v[perm] for k, v in data.items()})
    torch.testing.assert_close(permuted, full[perm])


def _reference_returns(data, gamma):
    """Slow per-episode loop, for comparison."""
    out = torch.zeros_like(data["step_rewards"])
    for ep in data["episode_ids"].unique():
        idx = (data["episode_ids"] == ep).nonzero().flatten()
        idx = idx[torch.argsort(data["turn_idx"][idx])]
        running = 0.0
        for i in reversed(idx.tolist()):
            running = data["step_rewards"][i].item() + gamma * running
            out[i] = running
    return out


@settings(max_examples=50, deadline=None)
@given(turn_samples(), st.floats(0.0, 1.0))
def test_step_returns_match_reference(data, gamma) -> None:
    got = step_returns(data["step_rewards"], data["episode_ids"], data["turn_idx"], gamma)
    torch.testing.assert_close(got, _reference_returns(data, gamma))


def _gigpo_batch(episodes: int, seed: int = 0) -> dict:
    """``episodes`` episodes of 10 turns in groups of 8, shuffled, with anchors shared within a group."""
    g = torch.Generator().manual_seed(seed)
    episode = torch.arange(episodes).repeat_interleave(10)
    turn = torch.arange(10).repeat(episodes)
    group = episode // 8
    n = episode.numel()
    order = torch.randperm(n, generator=g)
    return {
        "step_rewards": torch.randn(n, generator=g)[order],
        "episode_ids": episode[order],
        "turn_idx": turn[order],
        "group_ids": group[order],
        "anchor_keys": (group * 1000 + turn * 10 + torch.randint(0, 3, (n,), generator=g))[order],
        "valid": (torch.rand(n, generator=g) > 0.1)[order],
    }


def test_gigpo_is_vectorised() -> None:
    """The torch operators GiGPO runs do not grow with the batch (no Python loop over samples, episodes,
    groups or anchors): 160 and 20,000 turn samples run the same number of operators. Counted, not timed
    (``bench/algos.py --check`` times it against its 50 ms budget)."""
    from arl.plan.live_bytes import LiveTensorBytes

    ops = []
    for episodes in (16, 2000):
        batch = _gigpo_batch(episodes)
        with LiveTensorBytes() as counter:
            gigpo(**batch)
        ops.append(counter.ops)
    assert ops[0] == ops[1] > 20, ops


def test_shared_anchor_fraction_by_hand():
    from arl.algos.advantages import shared_anchor_fraction

    g = torch.tensor([0, 0, 0, 1, 1])
    # only group 0's two turns at anchor 5 share it; anchor 5 in group 1 is another cluster
    assert shared_anchor_fraction(g, torch.tensor([5, 5, 7, 5, 9])) == pytest.approx(0.4)
    assert shared_anchor_fraction(g, torch.tensor([1, 1, 1, 2, 2])) == 1.0
    assert shared_anchor_fraction(g, torch.tensor([1, 2, 3, 4, 5])) == 0.0
    assert shared_anchor_fraction(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)) == 0.0
    with pytest.raises(ValueError):
        shared_anchor_fraction(g, torch.tensor([1, 2]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=40))
def test_shared_anchor_fraction_is_where_gigpo_step_part_can_be_nonzero(pairs):
    """A turn alone at its anchor gets a zero step part from GiGPO (episode part off, step weight
    1), so the shared fraction bounds the fraction of nonzero step advantages."""
    from arl.algos.advantages import shared_anchor_fraction

    g = torch.tensor([p[0] for p in pairs])
    a = torch.tensor([p[1] for p in pairs])
    frac = shared_anchor_fraction(g, a)
    n = len(pairs)
    counts = {}
    for p in pairs:
        counts[p] = counts.get(p, 0) + 1
    assert frac == pytest.approx(sum(counts[p] > 1 for p in pairs) / n)
    # every turn its own episode with reward = its index: a lone turn's step part is 0
    turns = {"step_rewards": torch.arange(n, dtype=torch.float64), "episode_ids": torch.arange(n),
             "turn_idx": torch.zeros(n, dtype=torch.long), "group_ids": g, "anchor_keys": a,
             "valid": torch.ones(n, dtype=torch.bool), "gamma": 1.0}
    step = gigpo(**turns, step_weight=1.0) - gigpo(**turns, step_weight=0.0)
    assert float((step.abs() > 1e-9).double().mean()) <= frac + 1e-12


# -------------------------------------------------------------------------------- penalty-only groups
# group 0: two failed episodes, the first with an invalid turn (scores 0 - 0.1 and 0, 0): penalty-only;
# group 1: a won (1, 1) and a failed episode (0): returns differ
PENALTY_CASE = {
    "step_rewards": t([0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0]),
    "episode_ids": torch.tensor([0, 0, 1, 1, 2, 2, 3]),
    "turn_idx": torch.tensor([0, 1, 0, 1, 0, 1, 0]),
    "group_ids": torch.tensor([0, 0, 0, 0, 1, 1, 1]),
    "anchor_keys": torch.tensor([7, 8, 7, 8, 5, 6, 5]),
    "valid": torch.tensor([False, True, True, True, True, True, True]),
}


def test_grpo_penalty_only_groups_by_hand() -> None:
    """Group 0's scores (-0.1, 0, 0, 0): mean -0.025, unbiased std 0.05 -> normalise gives (-1.5, 0.5, 0.5, 0.5);
    center gives (-0.075, 0.025, 0.025, 0.025); zero gives 0. Group 1 (scores 1, 1, 0) is the same in every mode."""
    normal = estimate("grpo", PENALTY_CASE)
    centre = estimate("grpo", PENALTY_CASE, penalty_only_groups="center")
    zero = estimate("grpo", PENALTY_CASE, penalty_only_groups="zero")
    torch.testing.assert_close(normal[:4], t([-1.5, 0.5, 0.5, 0.5]) / (1 + 2e-5), atol=1e-6, rtol=0)
    torch.testing.assert_close(centre[:4], t([-0.075, 0.025, 0.025, 0.025]), atol=1e-12, rtol=0)
    torch.testing.assert_close(zero[:4], t([0.0, 0.0, 0.0, 0.0]), atol=0, rtol=0)
    for other in (centre, zero):
        torch.testing.assert_close(other[4:], normal[4:], atol=0, rtol=0)


def test_gigpo_penalty_only_groups_by_hand() -> None:
    """mean_std_norm: group 0's episode part as GRPO's above; its step part: anchors 7 (step returns -0.1, 0: mean
    -0.05, std 0.0707; turns 0 and 2) and 8 (0, 0): normalise (-0.707, 0, +0.707, 0), center (-0.05, 0, +0.05, 0),
    zero 0."""
    kw = {"norm": "mean_std_norm", "gamma": 1.0}
    e_n, s_n = gigpo_parts(**PENALTY_CASE, **kw)
    e_c, s_c = gigpo_parts(**PENALTY_CASE, **kw, penalty_only_groups="center")
    e_z, s_z = gigpo_parts(**PENALTY_CASE, **kw, penalty_only_groups="zero")
    torch.testing.assert_close(s_n[:4], t([-(0.5**0.5), 0.0, 0.5**0.5, 0.0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(s_c[:4], t([-0.05, 0.0, 0.05, 0.0]), atol=1e-12, rtol=0)
    torch.testing.assert_close(e_c[:4], t([-0.075, 0.025, 0.025, 0.025]), atol=1e-12, rtol=0)
    assert not e_z[:4].any() and not s_z[:4].any()
    for e, st_ in ((e_c, s_c), (e_z, s_z)):
        torch.testing.assert_close(e[4:], e_n[4:], atol=0, rtol=0)
        torch.testing.assert_close(st_[4:], s_n[4:], atol=0, rtol=0)


# one group holding a win: episode 0 won (anchors A, B; reward 1 on its last turn), episodes 1 and 2 failed
# (anchors A, C, C and A, C), episode 1's second turn invalid. Step group A mixes the win and the failures;
# step group C holds only failed turns, whose step returns (-0.1, 0, 0) differ by the penalty alone.
STEP_PENALTY_CASE = {
    "step_rewards": t([0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    "episode_ids": torch.tensor([0, 0, 1, 1, 1, 2, 2]),
    "turn_idx": torch.tensor([0, 1, 0, 1, 2, 0, 1]),
    "group_ids": torch.zeros(7, dtype=torch.long),
    "anchor_keys": torch.tensor([10, 11, 10, 12, 12, 10, 12]),
    "valid": torch.tensor([True, True, True, False, True, True, True]),
}


def test_gigpo_penalty_only_step_groups_by_hand() -> None:
    """gamma 1, mean_std_norm. Step returns: episode 0 (1, 1), episode 1 (0, -0.1, 0), episode 2 (0, 0).
    Step group A (1, 0, 0): mean 1/3, std 1/sqrt(3) -> (+1.1547, -0.5774, -0.5774) in every mode (its raw
    returns differ). B: one turn -> 0. C (-0.1, 0, 0): mean -1/30, std 0.1/sqrt(3) -> normalise
    (-1.1547, +0.5774, +0.5774), as large as the win's; center (-1/15, +1/30, +1/30); zero 0.
    The group holds a win, so its episode part is the same in every mode."""
    kw = {"norm": "mean_std_norm", "gamma": 1.0}
    e_n, s_n = gigpo_parts(**STEP_PENALTY_CASE, **kw)
    e_c, s_c = gigpo_parts(**STEP_PENALTY_CASE, **kw, penalty_only_groups="center")
    e_z, s_z = gigpo_parts(**STEP_PENALTY_CASE, **kw, penalty_only_groups="zero")
    a, c = 2 / 3 * 3**0.5, 1 / 3**0.5
    group_a, group_c = [0, 2, 5], [3, 4, 6]
    for step in (s_n, s_c, s_z):
        close(step[group_a], [a, -c, -c], atol=1e-5)
        close(step[[1]], [0.0])
    close(s_n[group_c], [-a, c, c], atol=1e-4)
    close(s_c[group_c], [-1 / 15, 1 / 30, 1 / 30], atol=1e-12)
    close(s_z[group_c], [0.0, 0.0, 0.0], atol=0)
    torch.testing.assert_close(e_c, e_n, atol=0, rtol=0)
    torch.testing.assert_close(e_z, e_n, atol=0, rtol=0)


def _reference_step_part(data: dict, gamma: float, mode: str) -> torch.Tensor:
    """GiGPO's step part (mean_std_norm) with ``penalty_only_groups=mode``, one step group at a time in Python
    loops: a turn is treated apart when its group's episode returns are all equal (two episodes or more) or its
    step group's raw step returns are (two turns or more)."""
    raw = _reference_returns(data, gamma)
    returns = raw + (~data["valid"]).to(F64) * -0.1
    groups, episodes, anchors = (data[k].tolist() for k in ("group_ids", "episode_ids", "anchor_keys"))
    out = torch.zeros_like(returns)
    for key in set(zip(groups, anchors)):
        idx = [i for i in range(len(groups)) if (groups[i], anchors[i]) == key]
        if len(idx) < 2:
            continue
        group_returns = {}
        for i, (gr, ep) in enumerate(zip(groups, episodes)):
            if gr == key[0]:
                group_returns[ep] = group_returns.get(ep, 0.0) + float(data["step_rewards"][i])
        only_group = len(group_returns) >= 2 and len(set(group_returns.values())) == 1
        only_step = len({float(raw[i]) for i in idx}) == 1
        values = returns[idx]
        centred = values - values.mean()
        if mode != "normalise" and (only_group or only_step):
            out[idx] = torch.zeros_like(centred) if mode == "zero" else centred
        else:
            out[idx] = centred / (values.std() + EPS)
    return out


@settings(max_examples=60, deadline=None)
@given(turn_samples(), st.sampled_from(advantages.PENALTY_ONLY_MODES), st.sampled_from([1.0, 0.9]))
def test_gigpo_step_part_treats_penalty_only_step_groups(data, mode, gamma) -> None:
    data = dict(data, step_rewards=(data["step_rewards"] > 0).to(F64))  # rewards 0 / 1: equal returns are common
    _, step = gigpo_parts(**data, norm="mean_std_norm", gamma=gamma, penalty_only_groups=mode)
    torch.testing.assert_close(step, _reference_step_part(data, gamma, mode), atol=1e-6, rtol=1e-6)


def test_an_unknown_penalty_only_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="valid: normalise, center, zero"):
        advantages.grpo(advantages.TurnTable(**PENALTY_CASE), replace(AdvantageConfig(), penalty_only_groups="ignore"))


def test_per_episode_statistics_never_divide_a_penalty_by_eps() -> None:
    """cross_steps=False: the statistics are the episodes' returns (0, 0: std 0) and the targets their turns'
    scores (-0.1 on the invalid turn). The penalty stays -0.1 / (1 + eps), where dividing by std + eps made it
    -0.1 / 1e-6 = -100000; with cross_steps=True the same group keeps its official value."""
    data = {"step_rewards": t([0.0, 0.0, 0.0, 0.0]), "episode_ids": torch.tensor([0, 0, 1, 1]),
            "turn_idx": torch.tensor([0, 1, 0, 1]), "group_ids": torch.tensor([0, 0, 0, 0]),
            "anchor_keys": torch.arange(4), "valid": torch.tensor([False, True, True, True])}
    per_episode = estimate("grpo", data, cross_steps=False)
    torch.testing.assert_close(per_episode, t([-0.1, 0.0, 0.0, 0.0]) / (1 + 1e-6), atol=1e-12, rtol=0)
    cross = estimate("grpo", data)  # scores (-0.1, 0, 0, 0): mean -0.025, std 0.05
    torch.testing.assert_close(cross, t([-1.5, 0.5, 0.5, 0.5]) / (1 + 2e-5), atol=1e-6, rtol=0)
