"""arl.algos.clip_control: the schedule and the controller by hand, the factor's bounds as a property,
the controller's direction as a closed loop, the state across a checkpoint, and the start-up refusals."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.algos import clip_control as cc
from arl.algos.schema import AlgoConfig, ClipControlConfig, LossConfig, validate_algo_config

BASE_YAML = Path(__file__).resolve().parents[3] / "configs" / "algo" / "base.yaml"


def ctl(**changes) -> ClipControlConfig:
    return dataclasses.replace(ClipControlConfig(), **changes)


# ------------------------------------------------------------------------------------------ the schedule
def test_linear_schedule_hand() -> None:
    cfg = ctl(mode="schedule", shape="linear", end_factor=0.5, iterations=4)
    # f(k) = 1 + (0.5 - 1) min(k / 4, 1): 1, 0.875, 0.75, 0.625, 0.5, then 0.5
    assert [cc.scheduled_factor(k, cfg) for k in range(6)] == [1.0, 0.875, 0.75, 0.625, 0.5, 0.5]
    assert cc.scheduled_factor(1000, cfg) == 0.5
    widen = ctl(mode="schedule", end_factor=3.0, iterations=2)
    assert [cc.scheduled_factor(k, widen) for k in range(4)] == [1.0, 2.0, 3.0, 3.0]  # 1 + 2 k / 2


def test_cosine_schedule_hand() -> None:
    cfg = ctl(mode="schedule", shape="cosine", end_factor=0.5, iterations=4)
    # f(k) = 1 - 0.5 (1 - cos(pi k / 4)) / 2
    # k=1: cos(pi/4) = 0.70710678 -> 1 - 0.5 x 0.14644661 = 0.92677670
    # k=2: cos(pi/2) = 0          -> 1 - 0.25 = 0.75
    # k=3: cos(3 pi/4) = -0.7071  -> 1 - 0.5 x 0.85355339 = 0.57322330
    want = [1.0, 0.92677670, 0.75, 0.57322330, 0.5, 0.5]
    assert [cc.scheduled_factor(k, cfg) for k in range(6)] == pytest.approx(want, abs=1e-8)


def test_schedule_is_what_the_module_uses() -> None:
    control = cc.ClipControl(ctl(mode="schedule", end_factor=2.0, iterations=4))
    algo = AlgoConfig(loss=LossConfig(clip_ratio_low=0.1, clip_ratio_high=0.3))
    # iteration 2: f = 1 + (2 - 1) 2 / 4 = 1.5; eps 0.1 -> 0.15, 0.3 -> 0.45
    at2 = control.algo_at(algo, 2)
    assert control.factor_at(2) == 1.5
    assert (at2.loss.clip_ratio_low, at2.loss.clip_ratio_high) == pytest.approx((0.15, 0.45))
    assert at2.loss.clip_ratio_c == algo.loss.clip_ratio_c and at2.advantage == algo.advantage  # only the bounds
    control.observe({"actor/clipfrac": 0.9})  # the schedule has no controller
    assert control.factor_at(2) == 1.5


# ---------------------------------------------------------------------------------------- the controller
ADAPTIVE = ctl(mode="adaptive", target_metric="clipfrac", target=0.1, rate=0.5, max_step=0.1, min_factor=0.1,
               max_factor=10.0)


@pytest.mark.parametrize("measured,want", [
    (0.12, 1.1),   # 1 + 0.5 (0.12 / 0.1 - 1) = 1 + 0.5 x 0.2 = 1.1 (at the clamp's edge): more clipped than wanted, widen
    (0.11, 1.05),  # 1 + 0.5 x 0.1 = 1.05
    (0.30, 1.1),   # 1 + 0.5 x 2 = 2, clamped to 1 + max_step = 1.1
    (0.10, 1.0),   # on target: unchanged
    (0.09, 0.95),  # 1 + 0.5 x (-0.1) = 0.95: less clipped than wanted, tighten
    (0.0, 0.9),    # 1 + 0.5 x (-1) = 0.5, clamped to 1 - max_step = 0.9
])
def test_controller_steps_on_clipfrac_hand(measured: float, want: float) -> None:
    assert cc.adaptive_factor(1.0, measured, ADAPTIVE) == pytest.approx(want)
    assert cc.adaptive_factor(2.0, measured, ADAPTIVE) == pytest.approx(2.0 * want)  # a multiplier


@pytest.mark.parametrize("measured,want", [
    (0.012, 0.9),   # 1 - 0.5 (0.012 / 0.01 - 1) = 1 - 0.1 = 0.9: the policy moved too far, tighten
    (0.009, 1.05),  # 1 - 0.5 x (-0.1) = 1.05: it moved too little, widen
    (-0.01, 1.1),   # a negative estimate: 1 - 0.5 x (-2) = 2, clamped to 1.1
])
def test_controller_steps_on_ppo_kl_the_other_way_hand(measured: float, want: float) -> None:
    cfg = dataclasses.replace(ADAPTIVE, target_metric="ppo_kl", target=0.01)
    assert cc.adaptive_factor(1.0, measured, cfg) == pytest.approx(want)


def test_controller_stays_within_its_bounds_hand() -> None:
    assert cc.adaptive_factor(9.5, 0.3, ADAPTIVE) == 10.0  # 9.5 x 1.1 = 10.45 -> max_factor 10
    assert cc.adaptive_factor(0.105, 0.0, ADAPTIVE) == 0.1  # 0.105 x 0.9 = 0.0945 -> min_factor 0.1


@pytest.mark.parametrize("metric,plant,settles_at", [
    ("clipfrac", lambda f: min(0.3 / f, 1.0), 3.0),  # a wider range clips less: 0.3 / f = 0.1 at f = 3
    ("ppo_kl", lambda f: 0.004 * f, 2.5),            # a wider range moves further: 0.004 f = 0.01 at f = 2.5
])
def test_controller_settles_where_the_metric_meets_its_target(metric, plant, settles_at) -> None:
    """The direction closes a negative feedback loop with each metric: run against a plant that
    responds to the factor as the update does, the factor settles where the metric is on target
    (a wrong sign would run to a bound instead)."""
    cfg = dataclasses.replace(ADAPTIVE, target_metric=metric, target=0.1 if metric == "clipfrac" else 0.01)
    control = cc.ClipControl(cfg)
    for _ in range(200):
        control.observe({f"actor/{metric}": plant(control.factor), "actor/old_log_probs_source": 2.0})
    assert control.factor == pytest.approx(settles_at, rel=1e-3)


def test_controller_skips_iterations_that_say_nothing() -> None:
    control = cc.ClipControl(ADAPTIVE)
    control.observe({"actor/clipfrac": 0.0, "actor/old_log_probs_source": 0.0})  # on-policy: nothing can clip
    control.observe({"actor/old_log_probs_source": 2.0})  # no optimiser step: no clipfrac
    assert control.factor == 1.0
    control.observe({"actor/clipfrac": 0.12, "actor/old_log_probs_source": 2.0})
    assert control.factor == pytest.approx(1.1)
    algo = AlgoConfig(loss=LossConfig(clip_ratio_low=3e-3, clip_ratio_high=4e-3))
    assert control.algo_at(algo, 7).loss.clip_ratio_high == pytest.approx(4.4e-3)  # the factor, not the iteration


def test_state_survives_a_checkpoint() -> None:
    control = cc.ClipControl(ADAPTIVE)
    for measured in (0.3, 0.3, 0.11):
        control.observe({"actor/clipfrac": measured, "actor/old_log_probs_source": 1.0})
    assert control.factor == pytest.approx(1.1 * 1.1 * 1.05)
    resumed = cc.ClipControl(ADAPTIVE)
    resumed.load_state_dict(control.state_dict())
    assert resumed.factor == control.factor
    other = cc.ClipControl(ctl(mode="schedule"))  # a checkpoint of another mode, or without the state, starts at 1
    other.load_state_dict(control.state_dict())
    fresh = cc.ClipControl(ADAPTIVE)
    fresh.load_state_dict({})
    assert other.factor == fresh.factor == 1.0


# ------------------------------------------------------------------------------------------ properties
adaptive_cfgs = st.builds(
    lambda metric, target, rate, max_step, low, span: ctl(
        mode="adaptive", target_metric=metric, target=target, rate=rate, max_step=max_step, min_factor=low,
        max_factor=low * span),
    st.sampled_from(cc.TARGET_METRICS), st.floats(1e-4, 1.0), st.floats(1e-3, 10.0), st.floats(0.0, 0.99),
    st.floats(1e-3, 2.0), st.floats(1.0, 100.0),
)


@settings(max_examples=80, deadline=None)
@given(adaptive_cfgs, st.lists(st.floats(-1.0, 1.0), max_size=30))
def test_factor_stays_within_bounds_and_steps(cfg: ClipControlConfig, measured: list[float]) -> None:
    control = cc.ClipControl(cfg)
    for m in measured:
        before = control.factor
        control.observe({f"actor/{cfg.target_metric}": m, "actor/old_log_probs_source": 2.0})
        assert cfg.min_factor <= control.factor <= cfg.max_factor
        if cfg.min_factor < before * (1 - cfg.max_step) and before * (1 + cfg.max_step) < cfg.max_factor:
            assert before * (1 - cfg.max_step) * (1 - 1e-12) <= control.factor <= before * (1 + cfg.max_step) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 1.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_fixed_mode_is_the_configured_range(iteration: int, clipfrac: float, low: float, high: float) -> None:
    """Fixed mode: factor 1 whatever happened, and the update's config is the very object given
    (the module's update is the one without clip control, bit for bit)."""
    control = cc.ClipControl(ClipControlConfig())
    assert ClipControlConfig().mode == "fixed"
    algo = AlgoConfig(loss=LossConfig(clip_ratio_low=low, clip_ratio_high=high))
    control.observe({"actor/clipfrac": clipfrac, "actor/ppo_kl": clipfrac, "actor/old_log_probs_source": 2.0})
    assert control.factor_at(iteration) == 1.0
    assert control.algo_at(algo, iteration) is algo


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 500), st.integers(1, 200), st.floats(0.01, 10.0), st.sampled_from(cc.SHAPES))
def test_schedule_moves_monotonically_between_its_ends(iteration, iterations, end, shape) -> None:
    cfg = ctl(mode="schedule", shape=shape, end_factor=end, iterations=iterations)
    f, g = cc.scheduled_factor(iteration, cfg), cc.scheduled_factor(iteration + 1, cfg)
    assert min(1.0, end) - 1e-12 <= f <= max(1.0, end) + 1e-12
    assert (g - f) * (end - 1.0) >= -1e-12  # towards the end factor, never back
    assert cc.scheduled_factor(0, cfg) == 1.0 and cc.scheduled_factor(iterations, cfg) == pytest.approx(end)


# ------------------------------------------------------------------------------------ start-up refusals
def _algo(**changes) -> dict:
    algo = yaml.safe_load(BASE_YAML.read_text())
    for key, value in changes.items():
        head, leaf = key.split(".")
        algo[head][leaf] = value
    return algo


@pytest.mark.parametrize("loss", ["sapo", "reinforce", "arl.algos.policy_losses:ppo_clip"])
@pytest.mark.parametrize("mode", ["schedule", "adaptive"])
def test_a_loss_without_clip_bounds_is_refused(loss: str, mode: str) -> None:
    with pytest.raises(ValueError, match=rf"algo.clip_control.mode={mode} scales the clip bounds .* algo.loss.name="
                                         rf"{re.escape(loss)} does not have; it works with ppo_clip, gspo, cispo"):
        validate_algo_config(_algo(**{"loss.name": loss, "clip_control.mode": mode}))
    validate_algo_config(_algo(**{"loss.name": loss}))  # fixed: any loss


@pytest.mark.parametrize("loss", cc.CLIPPED_LOSSES)
def test_the_clipped_losses_take_every_mode(loss: str) -> None:
    for mode in cc.MODES:
        validate_algo_config(_algo(**{"loss.name": loss, "clip_control.mode": mode}))


def test_factor_bounds_in_order() -> None:
    with pytest.raises(ValueError, match=r"algo.clip_control.min_factor=2.0 is above algo.clip_control.max_factor=1.0"):
        validate_algo_config(_algo(**{"clip_control.min_factor": 2.0, "clip_control.max_factor": 1.0}))


def test_factor_is_dimensionless_and_scales_both_bounds_alike() -> None:
    """The asymmetry of the range is kept: eps_high / eps_low is the same at every factor."""
    control = cc.ClipControl(ctl(mode="schedule", end_factor=0.25, iterations=3))
    algo = AlgoConfig(loss=LossConfig(clip_ratio_low=3e-3, clip_ratio_high=4e-3))
    for k in range(5):
        loss = control.algo_at(algo, k).loss
        assert loss.clip_ratio_high / loss.clip_ratio_low == pytest.approx(4 / 3)
        assert math.isclose(loss.clip_ratio_low, 3e-3 * cc.scheduled_factor(k, control.cfg))

