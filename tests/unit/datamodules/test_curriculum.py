"""The curriculum's schedule by hand: exact sequences of validation measures and iterations, and the stages
they give (advance, patience, hysteresis, retreat, the last stage, iteration gates, state across a resume)."""

from __future__ import annotations

import math

import pytest

from arl.datamodules.curriculum import Curriculum, Stage

EASY, HARD = {"easy": 1.0, "hard": 0.0}, {"easy": 0.0, "hard": 1.0}
METRIC = "val/easy/success_rate"


def _stages(patience=1, retreat=None, above=0.6):
    return [Stage(EASY, metric=METRIC, advance_above=above, patience=patience, retreat_below=retreat), Stage(HARD)]


def _replay(curriculum: Curriculum, measures: list[float | None]) -> list[int]:
    """The stage after each observation, iteration k seeing measure k (None: no validation came)."""
    stages = []
    for k, value in enumerate(measures):
        curriculum.observe(k, None if value is None else {METRIC: value, "val/success_rate": 0.0})
        stages.append(curriculum.stage)
    return stages


def test_it_advances_at_the_first_measure_at_or_above_the_threshold():
    c = Curriculum(_stages())
    assert c.weights() == EASY
    assert _replay(c, [0.1, None, 0.59, 0.6, 0.1, 0.9]) == [0, 0, 0, 1, 1, 1]
    assert c.weights() == HARD and c.history == [(3, 1)]


def test_patience_counts_consecutive_validations_only():
    c = Curriculum(_stages(patience=3))
    # a validation under the threshold resets the count; iterations without a validation do not
    assert _replay(c, [0.7, 0.8, 0.2, 0.7, None, 0.7, None, None, 0.9, 0.1]) == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    assert c.history == [(8, 1)]


def test_it_goes_back_under_retreat_below_and_not_between_the_thresholds():
    c = Curriculum(_stages(patience=1, retreat=0.3))
    # 0.6 moves on; 0.45 and 0.3 (between the thresholds, 0.3 not under it) hold; 0.29 goes back; 0.5 holds; 0.6 again
    assert _replay(c, [0.6, 0.45, 0.3, 0.29, 0.5, 0.6, 0.1]) == [1, 1, 1, 0, 0, 1, 0]
    assert c.history == [(0, 1), (3, 0), (5, 1), (6, 0)]


def test_going_back_needs_patience_validations_too():
    c = Curriculum(_stages(patience=2, retreat=0.3))
    assert _replay(c, [0.7, 0.7, 0.1, 0.5, 0.1, 0.1, 0.6]) == [0, 1, 1, 1, 1, 0, 0]


def test_without_retreat_below_it_never_goes_back_and_the_last_stage_stays():
    c = Curriculum(_stages())
    assert _replay(c, [0.9, 0.0, 0.0, 1.0, 0.0]) == [1, 1, 1, 1, 1]
    three = Curriculum([Stage(EASY, metric=METRIC, advance_above=0.5), Stage({"easy": 0.5, "hard": 0.5},
                        metric=METRIC, advance_above=0.8), Stage(HARD)])
    # one move per validation: 0.9 passes both gates, the second only at the next validation
    assert _replay(three, [0.9, 0.9, 0.9]) == [1, 2, 2]


def test_a_missing_value_passes_no_threshold_and_a_missing_metric_is_an_error():
    c = Curriculum(_stages(retreat=0.3))
    assert _replay(c, [math.nan, 0.9, math.nan]) == [0, 1, 1]  # a NaN (no turn played) neither moves on nor back
    with pytest.raises(KeyError, match="val/easy/success_rate"):
        c.observe(3, {"val/success_rate": 0.1})


def test_iteration_stages_move_when_their_iteration_comes_however_the_batches_fall():
    c = Curriculum([Stage(EASY, until_iteration=3), Stage({"easy": 0.5, "hard": 0.5}, until_iteration=5), Stage(HARD)])
    changed = [c.observe(k) for k in range(7)]
    assert [s for _, s in c.history] == [1, 2] and changed == [False, False, False, True, False, True, False]
    late = Curriculum(list(c.stages))
    assert late.observe(9) and late.stage == 2 and late.history == [(9, 1), (9, 2)]  # both passed at once


def test_validation_and_iteration_gates_combine():
    c = Curriculum([Stage(EASY, metric=METRIC, advance_above=0.5, patience=2), Stage({"easy": 0.5, "hard": 0.5},
                    until_iteration=4), Stage(HARD)])
    assert _replay(c, [0.6, 0.7, None, None, None]) == [0, 1, 1, 1, 2]


def test_the_state_resumes_the_same_schedule():
    measures = [0.7, 0.1, 0.7, 0.7, 0.2, 0.2, 0.25, 0.9, 0.9]
    straight = Curriculum(_stages(patience=2, retreat=0.3))
    expected = _replay(straight, measures)
    first = Curriculum(_stages(patience=2, retreat=0.3))
    before = _replay(first, measures[:5])  # killed after iteration 4, mid-way through a retreat count
    resumed = Curriculum(_stages(patience=2, retreat=0.3))
    resumed.load_state_dict(first.state_dict())
    after = []
    for k, value in enumerate(measures[5:], 5):
        resumed.observe(k, {METRIC: value})
        after.append(resumed.stage)
    assert before + after == expected == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert resumed.history == straight.history and resumed.state_dict() == straight.state_dict()
    with pytest.raises(ValueError, match="stage 5"):
        resumed.load_state_dict({"stage": 5, "above": 0, "below": 0})
