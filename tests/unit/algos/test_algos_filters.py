"""arl.algos.filters: hand cases and the dapo property."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.algos import filters
from arl.algos.schema import FilterConfig

SETTINGS = {"atol": 0.0, "valid_ratio_threshold": 0.9}  # the schema's defaults (test_schema checks it)


def run(name: str, **kw):
    """Filter ``name`` with the settings it takes (the schema's defaults unless given)."""
    settings = {**filters.filter_kwargs(FilterConfig(name=name)), **kw}
    return filters.get(name)(**settings)

# group 0: [1, 1] constant (won)        group 1: [0, 2] varies
# group 2: [-1, -1] constant, all-failure (<= 0)   group 3: [5] a single episode: constant
RETURNS = torch.tensor([1.0, 1.0, 0.0, 2.0, -1.0, -1.0, 5.0])
GROUPS = torch.tensor([0, 0, 1, 1, 2, 2, 3])


def test_none_keeps_all() -> None:
    res = run("none", returns=RETURNS, group_ids=GROUPS)
    assert res.keep.all() and res.kept_groups == 4 and res.total_groups == 4
    assert res.kept_group_ids.tolist() == [0, 1, 2, 3]


def test_dapo_hand() -> None:
    res = run("dapo", returns=RETURNS, group_ids=GROUPS)
    assert res.keep.tolist() == [False, False, True, True, False, False, False]
    assert res.kept_group_ids.tolist() == [1] and res.kept_group_ids.dtype == torch.long
    assert (res.kept_groups, res.total_groups) == (1, 4)


def test_dapo_atol() -> None:
    # |1.2 - 1.0| = 0.2 <= 0.5 -> constant -> dropped; atol 0 keeps it
    returns, groups = torch.tensor([1.0, 1.2]), torch.tensor([4, 4])
    assert run("dapo", returns=returns, group_ids=groups, atol=0.5).kept_groups == 0
    assert run("dapo", returns=returns, group_ids=groups).kept_groups == 1


def test_stage_aware_hand() -> None:
    def fn(**kw):
        return run("stage_aware", **kw)

    # valid ratio 0.5 < 0.9: also keep the all-failure group 2 (constant -1 <= 0)
    early = fn(returns=RETURNS, group_ids=GROUPS, valid_ratio=0.5)
    assert early.kept_group_ids.tolist() == [1, 2]
    assert early.keep.tolist() == [False, False, True, True, True, True, False]
    # at or above the threshold (and without a ratio) it is dapo
    for ratio in (0.95, 0.9, None):
        assert fn(returns=RETURNS, group_ids=GROUPS, valid_ratio=ratio).kept_group_ids.tolist() == [1]
    # custom threshold
    assert fn(
        returns=RETURNS, group_ids=GROUPS, valid_ratio=0.95, valid_ratio_threshold=0.99
    ).kept_group_ids.tolist() == [1, 2]


def test_settings_and_the_bound_filter() -> None:
    with pytest.raises(TypeError):
        filters.get("dapo")(returns=RETURNS, group_ids=GROUPS, atol=0.0, valid_ratio_threshold=0.9)
    with pytest.raises(TypeError):
        filters.get("dapo")(returns=RETURNS, group_ids=GROUPS)  # atol has no default outside the schema
    cfg = FilterConfig(name="stage_aware", valid_ratio_threshold=0.8)
    assert filters.filter_kwargs(cfg) == {"valid_ratio_threshold": 0.8, "atol": 0.0}
    assert filters.filter_kwargs(FilterConfig(name="dapo", valid_ratio_threshold=0.8)) == {"atol": 0.0}
    assert filters.group_filter(FilterConfig(name="none")) is None
    bound = filters.group_filter(cfg)
    # 0.85 < 0.8 is false: dapo's choice; the unbound default threshold (0.9) would keep group 2
    assert bound(returns=RETURNS, group_ids=GROUPS, valid_ratio=0.85).kept_group_ids.tolist() == [1]
    assert bound(returns=RETURNS, group_ids=GROUPS, valid_ratio=0.5).kept_group_ids.tolist() == [1, 2]


def test_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="one per episode"):
        run("dapo", returns=torch.zeros(3), group_ids=torch.zeros(2, dtype=torch.long))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-2, 2)), min_size=1, max_size=30))
def test_dapo_keeps_exactly_non_constant_groups(episodes) -> None:
    groups = torch.tensor([g for g, _ in episodes])
    returns = torch.tensor([float(r) for _, r in episodes])
    res = run("dapo", returns=returns, group_ids=groups)
    by_group: dict[int, set[int]] = {}
    for g, r in episodes:
        by_group.setdefault(g, set()).add(r)
    expected = sorted(g for g, rs in by_group.items() if len(rs) > 1)
    assert res.kept_group_ids.tolist() == expected
    assert res.total_groups == len(by_group) and res.kept_groups == len(expected)
    assert res.keep.tolist() == [g in expected for g, _ in episodes]
