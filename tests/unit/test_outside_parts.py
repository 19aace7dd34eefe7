"""Algorithm parts from outside ARL (``algo.loss.name=pkg.mod:function``, likewise the advantage estimator,
the filter and the KL estimator): the name resolves by import, the signature is checked at validation
against the caller's contract with the section's ``kwargs``, the kwargs reach the function; and the two
examples (examples/custom_policy_loss.py, examples/custom_advantage.py) give hand-checked values."""

from __future__ import annotations

import copy
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from arl.algos import advantages, algo_config, filters, kl, objective, policy_losses, schema, validate_algo_config
from arl.algos.registry import Kwargs, OutsideNameError, Registry, UnknownNameError, import_function

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "configs" / "algo" / "base.yaml").read_text())


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))


def with_values(**changes: Any) -> dict[str, Any]:
    """base.yaml's algo group with dotted changes (``{"loss.name": ...}`` as ``loss__name=...``)."""
    algo = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = algo
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return algo


def problems_of(**changes: Any) -> str:
    with pytest.raises(ValueError) as err:
        validate_algo_config(with_values(**changes))
    return str(err.value)


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """A module ``outside_parts_<test>`` of functions written here, importable; returns its name."""

    def write(source: str, name: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(tmp_path))
        return name

    return write


# ------------------------------------------------------------------------------------------ resolution
def test_a_path_resolves_by_import_and_registered_names_are_unchanged() -> None:
    import custom_advantage
    import custom_policy_loss

    assert policy_losses.get("custom_policy_loss:soft_clip") is custom_policy_loss.soft_clip
    assert advantages.get("custom_advantage:rank_advantage") is custom_advantage.rank_advantage
    assert filters.get("custom_advantage:solved_groups") is custom_advantage.solved_groups
    assert kl.get("custom_policy_loss:reverse_kl") is custom_policy_loss.reverse_kl
    assert policy_losses.get("ppo_clip") is policy_losses.ppo_clip
    assert import_function("arl.algos.registry:Registry.names") is Registry.names  # a dotted attribute
    assert "custom_policy_loss:soft_clip" not in policy_losses.REGISTRY  # resolved, never registered


@pytest.mark.parametrize(("name", "reason"), [
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz' (ModuleNotFoundError: No module named 'no_such_module_xyz')"),
    ("custom_policy_loss:no_such", "module 'custom_policy_loss' has no attribute 'no_such'"),
    ("custom_policy_loss:LOG_RATIO_CLAMP", "custom_policy_loss.LOG_RATIO_CLAMP is not callable (it is of type float)"),
    ("custom_policy_loss:", "expected 'package.module:function'"),
    (":soft_clip", "expected 'package.module:function'"),
    ("a:b:c", "expected 'package.module:function'"),
])
def test_a_path_that_does_not_give_a_function_says_why(name: str, reason: str) -> None:
    with pytest.raises(OutsideNameError) as err:
        policy_losses.get(name)
    assert err.value.reason == reason
    assert str(err.value) == f"policy loss {name!r}: {reason}"
    assert isinstance(err.value, UnknownNameError) and isinstance(err.value, KeyError | ValueError)


def test_a_module_that_fails_while_importing_is_named(outside) -> None:
    name = outside("raise RuntimeError('broken on purpose')\n", "outside_parts_broken")
    with pytest.raises(OutsideNameError, match=r"cannot import 'outside_parts_broken' \(RuntimeError: broken on purpose\)"):
        advantages.get(f"{name}:f")


# ------------------------------------------------------------------------------- validation at start-up
def test_the_examples_validate_with_their_kwargs() -> None:
    algo = with_values(loss__name="custom_policy_loss:soft_clip", loss__kwargs={"positive_weight": 0.5},
                       advantage__name="custom_advantage:rank_advantage", advantage__kwargs={"spread": 1.0},
                       filter__name="custom_advantage:solved_groups", filter__kwargs={"min_return": 5.0},
                       kl__estimator="custom_policy_loss:reverse_kl")
    cfg = algo_config(algo)
    assert cfg.loss.kwargs == {"positive_weight": 0.5} and isinstance(cfg.loss.kwargs, Kwargs)
    assert cfg.advantage.kwargs == {"spread": 1.0} and cfg.filter.kwargs == {"min_return": 5.0}
    assert cfg.kl.estimator == "custom_policy_loss:reverse_kl"
    hash(cfg)  # the typed config stays a frozen, hashable value
    assert algo_config(BASE).loss.kwargs == {} and repr(algo_config(BASE).advantage.kwargs) == "{}"


def test_a_function_missing_a_parameter_stops_validation_naming_it(outside) -> None:
    name = outside("""
        def my_loss(*, log_prob, old_log_prob, advantages, cfg):
            return log_prob, {}
    """, "outside_parts_missing")
    message = problems_of(loss__name=f"{name}:my_loss")
    assert (f"algo.loss.name={name}:my_loss: the policy loss is called with log_prob, old_log_prob, advantages, "
            "response_mask, cfg (keywords); my_loss lacks 'response_mask'") in message


def test_an_extra_required_parameter_is_named_with_where_to_set_it() -> None:
    message = problems_of(loss__name="custom_policy_loss:soft_clip")
    assert ("algo.loss.name=custom_policy_loss:soft_clip: the policy loss is called with log_prob, old_log_prob, "
            "advantages, response_mask, cfg (keywords); soft_clip requires 'positive_weight', which the call does "
            "not give (set it in algo.loss.kwargs)") in message
    message = problems_of(advantage__name="custom_advantage:rank_advantage")
    assert ("algo.advantage.name=custom_advantage:rank_advantage: the advantage estimator is called with table, cfg "
            "(positional); rank_advantage requires 'spread'") in message


def test_an_unknown_kwarg_is_an_error_naming_it() -> None:
    message = problems_of(loss__name="custom_policy_loss:soft_clip",
                          loss__kwargs={"positive_weight": 0.5, "negative_weight": 2.0})
    assert "soft_clip has no parameter 'negative_weight' (algo.loss.kwargs.negative_weight)" in message
    # a registered part takes no kwargs
    message = problems_of(advantage__kwargs={"spread": 1.0})
    assert ("algo.advantage.name=grpo: the advantage estimator is called with table, cfg (positional); grpo has no "
            "parameter 'spread' (algo.advantage.kwargs.spread)") in message


def test_kwargs_may_not_set_an_input_or_a_key_of_the_section() -> None:
    message = problems_of(loss__name="custom_policy_loss:soft_clip",
                          loss__kwargs={"positive_weight": 0.5, "cfg": None})
    assert "algo.loss.kwargs.cfg sets 'cfg', an input the call gives itself" in message
    message = problems_of(filter__name="dapo", filter__kwargs={"atol": 0.5})
    assert "algo.filter.kwargs.atol: 'atol' is a key of algo.filter: set algo.filter.atol instead" in message
    message = problems_of(advantage__name="custom_advantage:rank_advantage", advantage__kwargs={"table": 1, "spread": 1})
    assert "algo.advantage.kwargs.table sets 'table', an input the call gives itself" in message


def test_a_module_that_does_not_exist_is_refused_with_the_import_error() -> None:
    message = problems_of(loss__name="no_such_module_xyz.losses:my_loss")
    assert ("algo.loss.name='no_such_module_xyz.losses:my_loss' cannot be used: cannot import "
            "'no_such_module_xyz.losses' (ModuleNotFoundError: No module named 'no_such_module_xyz')") in message
    # a plain unknown name still lists the registered ones, and says a path is accepted
    assert ("algo.kl.estimator='k4' is not valid; valid: abs, k1, k2, k3, low_var_kl (or 'package.module:function')"
            in problems_of(kl__estimator="k4"))


def test_positional_and_kl_contracts(outside) -> None:
    name = outside("""
        def one_input(table):
            return table, {}

        def any_estimator(*args, **kwargs):
            return args, kwargs

        def kl_with_setting(log_prob, ref_log_prob, beta):
            return log_prob

        def keyword_only_kl(*, log_prob, ref_log_prob):
            return log_prob

        def filter_with_settings(*, returns, group_ids, valid_ratio, atol, margin):
            return None

        def any_filter(**kwargs):
            return None
    """, "outside_parts_contracts")
    assert "one_input takes 1 positional parameter(s), the call gives 2" in problems_of(
        advantage__name=f"{name}:one_input")
    validate_algo_config(with_values(advantage__name=f"{name}:any_estimator", advantage__kwargs={"whatever": 1}))
    message = problems_of(kl__estimator=f"{name}:kl_with_setting")
    assert (f"algo.kl.estimator={name}:kl_with_setting: the kl estimator is called with log_prob, ref_log_prob "
            "(positional); kl_with_setting requires 'beta', which the call does not give (this part takes no kwargs)"
            in message)
    assert "keyword_only_kl takes 0 positional parameter(s), the call gives 2" in problems_of(
        kl__estimator=f"{name}:keyword_only_kl")
    # a filter takes the algo.filter keys it names (atol) and the rest from kwargs
    assert "filter_with_settings requires 'margin'" in problems_of(filter__name=f"{name}:filter_with_settings")
    validate_algo_config(with_values(filter__name=f"{name}:filter_with_settings", filter__kwargs={"margin": 1.0}))
    validate_algo_config(with_values(filter__name=f"{name}:any_filter"))


@pytest.mark.parametrize(("value", "problem"), [
    ("positive_weight=0.5", "must be a mapping (parameter name: value)"),
    ({"not a name": 1}, "has keys that are not parameter names: ['not a name']"),
])
def test_kwargs_must_be_a_mapping_of_parameter_names(value: Any, problem: str) -> None:
    assert f"algo.loss.kwargs={value!r} {problem}" in problems_of(loss__kwargs=value)


def test_the_key_table_says_a_path_is_accepted() -> None:
    table = schema.key_table()
    assert "| `algo.loss.name` | `ppo_clip` | `cispo` \\| `gspo` \\| `ppo_clip` \\| `reinforce` \\| `sapo` \\| " \
           "`package.module:function` |" in table
    assert "| `algo.advantage.kwargs` | `{}` | mapping |" in table
    assert "  kwargs: {}" in schema.render_base_yaml()


# ---------------------------------------------------------------------------- the kwargs reach the part
def _typed(**changes: Any) -> schema.AlgoConfig:
    return algo_config(with_values(**changes))


#: two rows of three tokens: ratios 1.5, 1.5, 0.5 / 0.5, 1, (masked); advantages +1, -1, +1 / -1, 2, 0
RATIOS = torch.tensor([[1.5, 1.5, 0.5], [0.5, 1.0, 1.0]], dtype=torch.float64)
ADV = torch.tensor([[1.0, -1.0, 1.0], [-1.0, 2.0, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
S_HIGH = 1 + 0.3 * math.tanh(0.5 / 0.3)  # s(1.5) with eps_high 0.3: 1.2793328826002732
S_LOW = 1 + 0.1 * math.tanh(-0.5 / 0.1)  # s(0.5) with eps_low 0.1: 0.9000090795737405
#: w * max(-A r, -A s(r)) by hand, positive_weight 0.5
SOFT_CLIP = [[0.5 * -S_HIGH, 1.5, 0.5 * -0.5], [S_LOW, 0.5 * -2.0]]


def test_soft_clip_values_gradient_and_metrics() -> None:
    from custom_policy_loss import soft_clip

    assert (S_HIGH, S_LOW) == (pytest.approx(1.2793328826002732), pytest.approx(0.9000090795737405))
    cfg = _typed(loss__clip_ratio_low=0.1, loss__clip_ratio_high=0.3).loss
    old = torch.zeros(2, 3, dtype=torch.float64)
    log_prob = RATIOS.log().requires_grad_(True)
    loss_mat, metrics = soft_clip(log_prob=log_prob, old_log_prob=old, advantages=ADV, response_mask=MASK, cfg=cfg,
                                  positive_weight=0.5)
    assert loss_mat[0].tolist() == pytest.approx([-0.6396664413001366, 1.5, -0.25])
    assert loss_mat[1, :2].tolist() == pytest.approx([0.9000090795737405, -1.0])
    assert loss_mat[0].tolist() == pytest.approx(SOFT_CLIP[0]) and loss_mat[1, :2].tolist() == pytest.approx(SOFT_CLIP[1])
    loss_mat[0, 0].backward()
    # on the soft branch: d/dlog pi of -w A s(r) = -w A (1 - tanh^2((r - 1) / eps)) r = -0.5 * 0.133035 * 1.5
    assert float(log_prob.grad[0, 0]) == pytest.approx(-0.5 * (1 - math.tanh(0.5 / 0.3) ** 2) * 1.5)
    assert float(log_prob.grad[0, 0]) == pytest.approx(-0.09977617248518286)
    # the soft branch is taken at (0, 0) and (1, 0): 2 of 5 tokens; weights 0.5, 1, 0.5, 1, 0.5
    assert float(metrics["clipfrac"]) == pytest.approx(0.4) and float(metrics["clipfrac_lower"]) == 0.0
    assert float(metrics["token_weight"]) == pytest.approx(0.7)
    assert float(metrics["ppo_kl"]) == pytest.approx(-(2 * math.log(1.5) + 2 * math.log(0.5)) / 5)
    # on-policy the gradient is REINFORCE's -w A per token
    on = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    soft_clip(log_prob=on, old_log_prob=on.detach(), advantages=torch.tensor([[2.0, -3.0]], dtype=torch.float64),
              response_mask=torch.ones(1, 2), cfg=cfg, positive_weight=0.5)[0].sum().backward()
    assert on.grad.tolist() == [[-1.0, 3.0]]
    with pytest.raises(ValueError, match="positive_weight=-1.0 must be >= 0"):
        soft_clip(log_prob=on, old_log_prob=old[:1, :2], advantages=ADV[:1, :2], response_mask=MASK[:1, :2], cfg=cfg,
                  positive_weight=-1.0)


def test_actor_loss_hands_the_loss_its_kwargs() -> None:
    cfg = _typed(loss__name="custom_policy_loss:soft_clip", loss__kwargs={"positive_weight": 0.5},
                 loss__clip_ratio_low=0.1, loss__clip_ratio_high=0.3, kl__coef=0.0, entropy_coef=0.0)
    batch = objective.TokenBatch(log_prob=RATIOS.log(), old_log_prob=torch.zeros(2, 3, dtype=torch.float64),
                                 advantages=ADV, response_mask=MASK)
    loss, metrics = objective.actor_loss(batch, cfg)
    by_hand = sum(SOFT_CLIP[0]) + sum(SOFT_CLIP[1])  # token-mean over the 5 response tokens
    assert float(loss) == pytest.approx(by_hand / 5) == pytest.approx(0.10206852765872078)
    assert float(metrics["token_weight"]) == pytest.approx(0.7)  # only soft_clip logs it, with the kwarg's weight
    halved = _typed(loss__name="custom_policy_loss:soft_clip", loss__kwargs={"positive_weight": 0.25},
                    loss__clip_ratio_low=0.1, loss__clip_ratio_high=0.3, kl__coef=0.0, entropy_coef=0.0)
    assert float(objective.actor_loss(batch, halved)[1]["token_weight"]) == pytest.approx((3 * 0.25 + 2) / 5)


def test_a_loss_of_the_wrong_shape_is_named(outside) -> None:
    name = outside("""
        def summed(*, log_prob, old_log_prob, advantages, response_mask, cfg):
            return (log_prob * advantages).sum(), {}

        def one_value(*, log_prob, old_log_prob, advantages, response_mask, cfg):
            return log_prob
    """, "outside_parts_shapes")
    batch = objective.TokenBatch(log_prob=torch.zeros(2, 3), old_log_prob=torch.zeros(2, 3),
                                 advantages=torch.ones(2, 3), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=rf"policy loss '{name}:summed' returned a loss matrix of shape \(\); it must "
                                         r"return \(loss_mat \(B, T\), .* with the \(B, T\) = \(2, 3\) of its inputs"):
        objective.actor_loss(batch, _typed(loss__name=f"{name}:summed", kl__coef=0.0, entropy_coef=0.0))
    with pytest.raises(ValueError, match=rf"policy loss '{name}:one_value' returned a Tensor"):
        objective.actor_loss(batch, _typed(loss__name=f"{name}:one_value", kl__coef=0.0, entropy_coef=0.0))


def test_reverse_kl_values_and_the_kl_term(outside) -> None:
    from custom_policy_loss import reverse_kl

    log_prob = torch.zeros(1, 3, dtype=torch.float64)
    ref = torch.tensor([[math.log(2.0), math.log(0.5), 0.0]], dtype=torch.float64)
    # u log u - (u - 1): u = 2 -> 2 log 2 - 1; u = 1/2 -> 1/2 log 1/2 + 1/2; u = 1 -> 0
    expected = [2 * math.log(2) - 1, 0.5 * math.log(0.5) + 0.5, 0.0]
    assert reverse_kl(log_prob, ref)[0].tolist() == pytest.approx(expected)
    assert expected == pytest.approx([0.3862943611198906, 0.15342640972002736, 0.0])
    assert kl.kl_penalty(log_prob, ref, "custom_policy_loss:reverse_kl")[0].tolist() == pytest.approx(expected)
    assert float(kl.kl_in_reward(log_prob, ref, torch.tensor([[1.0, 1.0, 0.0]]), 0.1,
                                 "custom_policy_loss:reverse_kl")[0]) == pytest.approx(0.1 * sum(expected[:2]))
    name = outside("""
        def per_row(log_prob, ref_log_prob):
            return (log_prob - ref_log_prob).sum(-1)
    """, "outside_parts_kl")
    with pytest.raises(ValueError, match=rf"kl estimator '{name}:per_row' returned shape \(1,\); it must return the "
                                         r"per-token KL estimate \(B, T\) = \(1, 3\)"):
        kl.kl_penalty(log_prob, ref, f"{name}:per_row")


#: two groups: group 7 with four episodes (returns 1, 0, 0, 2; one invalid turn), group 8 with one
TURNS = {
    "step_rewards": torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.5]),
    "episode_ids": torch.tensor([0, 0, 1, 2, 2, 3, 0]),
    "turn_idx": torch.tensor([0, 1, 0, 0, 1, 0, 0]),
    "group_ids": torch.tensor([7, 7, 7, 7, 7, 7, 8]),
    "anchor_keys": torch.tensor([1, 2, 1, 1, 3, 1, 9]),
    "valid": torch.tensor([True, False, True, True, True, True, True]),
}


def test_rank_advantage_values() -> None:
    from custom_advantage import rank_advantage

    table = advantages.TurnTable(**TURNS)
    cfg = _typed().advantage  # invalid_penalty -0.1
    adv, metrics = rank_advantage(table, cfg, spread=2.0)
    # group 7: ranks 2, 0.5, 0.5, 3 of n = 4 -> centred 1/6, -1/3, -1/3, 1/2 -> x 2; group 8 (one episode): 0
    expected = [1 / 3, 1 / 3 - 0.1, -2 / 3, -2 / 3, -2 / 3, 1.0, 0.0]
    assert adv.tolist() == pytest.approx(expected) and adv.dtype == torch.float32
    assert float(metrics["tied_frac"]) == pytest.approx(2 / 5)  # episodes 1 and 2 of group 7 tie
    # the advantages of a group's episodes add up to 0; equal returns everywhere give only the penalty
    assert 1 / 3 - 2 / 3 - 2 / 3 + 1.0 == pytest.approx(0.0)
    flat = advantages.TurnTable(**{**TURNS, "step_rewards": torch.zeros(7)})
    assert rank_advantage(flat, cfg, spread=2.0)[0].tolist() == pytest.approx([0, -0.1, 0, 0, 0, 0, 0])
    empty = advantages.TurnTable(**{k: v[:0] for k, v in TURNS.items()})
    assert rank_advantage(empty, cfg, spread=1.0)[0].shape == (0,)


def test_the_estimator_gets_its_kwargs_and_its_result_is_checked(outside) -> None:
    table = advantages.TurnTable(**TURNS)
    cfg = _typed(advantage__name="custom_advantage:rank_advantage", advantage__kwargs={"spread": 1.0}).advantage
    adv, metrics = advantages.estimator(cfg)(table, cfg)
    assert adv.tolist() == pytest.approx([1 / 6, 1 / 6 - 0.1, -1 / 3, -1 / 3, -1 / 3, 0.5, 0.0])
    assert set(metrics) == {"tied_frac"}
    grpo = _typed().advantage
    assert advantages.estimator(grpo)(table, grpo)[0].tolist() == advantages.grpo(table, grpo)[0].tolist()
    name = outside("""
        def per_episode(table, cfg):
            return table.step_rewards[:2], {}
    """, "outside_parts_estimator")
    bad = _typed(advantage__name=f"{name}:per_episode").advantage
    with pytest.raises(ValueError, match=rf"advantage estimator '{name}:per_episode' returned advantages of shape "
                                         r"\(2,\); it must return \(advantages \(N,\), .* for the N = 7 turn samples"):
        advantages.estimator(bad)(table, bad)


def test_solved_groups_values_and_the_bound_filter() -> None:
    returns = torch.tensor([0.0, 5.5, 1.0, 2.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 2])
    cfg = _typed(filter__name="custom_advantage:solved_groups", filter__kwargs={"min_return": 5.0}).filter
    assert filters.filter_kwargs(cfg) == {"min_return": 5.0}
    result = filters.group_filter(cfg)(returns=returns, group_ids=groups, valid_ratio=0.5)
    # group 0's best 5.5 and group 2's 5.0 reach 5; group 1's best is 2
    assert result.keep.tolist() == [True, True, False, False, True]
    assert result.kept_group_ids.tolist() == [0, 2] and (result.kept_groups, result.total_groups) == (2, 3)
    higher = _typed(filter__name="custom_advantage:solved_groups", filter__kwargs={"min_return": 5.2}).filter
    assert filters.group_filter(higher)(returns=returns, group_ids=groups, valid_ratio=None).kept_group_ids.tolist() == [0]
