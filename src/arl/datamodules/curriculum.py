"""A curriculum over the members of a mix (``env.curriculum``, ``env=mix``): stages of member weights.

The run starts in the first stage and plays its weights (the member each task draws, :mod:`arl.agent.mix`).
A stage that is not the last says when the run moves on to the next one, in one of two ways:

- ``until_iteration: k``: from iteration ``k`` on (the ``k``-th update's batch and later) the next stage is in
  force; never undone;
- ``metric: val/<member>/<measure>`` with ``advance_above: a``: the run moves on once the measure was ``>= a``
  at ``patience`` consecutive validations in this stage; with ``retreat_below: r`` (``r < a``) it comes back to
  this stage from the next once the same measure was ``< r`` at ``patience`` consecutive validations there
  (hysteresis: between ``r`` and ``a`` nothing moves). ``retreat_below: null`` never goes back.

A validation is seen by the first batch after it (:meth:`Curriculum.observe` with its ``val/*`` values); the
run moves at most one stage per validation, and ``until_iteration`` stages are passed as soon as their
iteration comes (several at once if need be). Everything here is plain logic on numbers: the DataModule
calls it, keeps its :meth:`~Curriculum.state_dict` in every checkpoint, and a resumed run goes on in the
same stage with the same counters. :func:`curriculum_problems` is the start-up check of the config section.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MEASURES = ("success_rate", "return_mean", "valid_action_ratio", "score")  # val/<member>/<measure>
STAGE_KEYS = ("weights", "until_iteration", "metric", "advance_above", "patience", "retreat_below")


@dataclass(frozen=True)
class Stage:
    """One stage: the member weights in force, and (every stage but the last) when the run leaves it
    (module docstring)."""

    weights: Mapping[str, float]
    until_iteration: int | None = None
    metric: str | None = None
    advance_above: float | None = None
    patience: int = 1
    retreat_below: float | None = None


def build_stages(node: Mapping[str, Any]) -> tuple[Stage, ...]:
    """The stages of a ``curriculum`` section that :func:`curriculum_problems` accepts (absent keys: null,
    ``patience`` 1)."""
    stages = []
    for raw in node["stages"]:
        values = {k: raw.get(k) for k in STAGE_KEYS if raw.get(k) is not None}
        values["weights"] = {str(k): float(v) for k, v in raw["weights"].items()}
        for key, cast in (("until_iteration", int), ("patience", int), ("advance_above", float), ("retreat_below", float)):
            if key in values:
                values[key] = cast(values[key])
        stages.append(Stage(**values))
    return tuple(stages)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _weights_problems(weights: Any, members: Sequence[str], where: str) -> list[str]:
    if not isinstance(weights, Mapping) or not weights:
        return [f"{where}.weights must be a mapping of member names to weights (members: {', '.join(members)})"]
    errors = [f"{where}.weights.{k} is not a member; members: {', '.join(members)}" for k in weights if k not in members]
    bad = [k for k, v in weights.items() if not _number(v) or v < 0]
    errors += [f"{where}.weights.{k}={weights[k]!r} must be a number >= 0" for k in bad]
    if not bad and sum(weights.values()) <= 0:
        errors.append(f"{where}.weights are all 0: a stage must play some member")
    return errors


def metric_problem(metric: Any, members: Sequence[str], graded: Sequence[str] = ()) -> str | None:
    """What is wrong with a stage's ``metric`` (None: a validation measure the run logs: ``val/<member>/<measure>``
    of a member, ``score`` of a graded one, or the overall ``val/<measure>``)."""
    parts = metric.split("/") if isinstance(metric, str) else []
    ok = (
        len(parts) == 3 and parts[0] == "val" and parts[1] in members and parts[2] in MEASURES
        and (parts[2] != "score" or parts[1] in graded)
    ) or (len(parts) == 2 and parts[0] == "val" and parts[1] in MEASURES and (parts[1] != "score" or bool(graded)))
    if ok:
        return None
    examples = ", ".join(f"val/{m}/success_rate" for m in members[:2])
    return (f"is not a validation measure of this mix: val/<member>/<measure> with a member ({', '.join(members)}) and "
            f"a measure ({', '.join(MEASURES)}; score of a graded member only), or val/<measure>; e.g. {examples}")


def _gate_problems(stage: Mapping[str, Any], where: str, last: bool, members: Sequence[str], graded: Sequence[str]) -> list[str]:
    given = {k for k in STAGE_KEYS[1:] if stage.get(k) is not None}
    if last:
        return [f"{where}.{k} is set, and the last stage has no next stage to move to: remove it" for k in sorted(given)]
    if ("until_iteration" in given) == ("metric" in given):
        named = ", ".join(sorted(given & {"until_iteration", "metric"})) or "neither"
        return [(f"{where} needs exactly one way to the next stage: until_iteration (an iteration) or metric (with "
                 f"advance_above); it sets {named}")]
    if "until_iteration" in given:
        errors = [f"{where}.{k} only goes with metric, not until_iteration" for k in sorted(given - {"until_iteration"})]
        value = stage["until_iteration"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            errors.append(f"{where}.until_iteration={value!r} must be an integer >= 1")
        return errors
    errors = []
    problem = metric_problem(stage["metric"], members, graded)
    if problem:
        errors.append(f"{where}.metric={stage['metric']!r} {problem}")
    above, below, patience = stage.get("advance_above"), stage.get("retreat_below"), stage.get("patience")
    if not _number(above):
        errors.append(f"{where}.advance_above={above!r} must be a number (the measure that moves the run on)")
    if below is not None and (not _number(below) or (_number(above) and below >= above)):
        errors.append(f"{where}.retreat_below={below!r} must be a number below advance_above={above!r} (or null: "
                      "never go back)")
    if patience is not None and (not isinstance(patience, int) or isinstance(patience, bool) or patience < 1):
        errors.append(f"{where}.patience={patience!r} must be an integer >= 1 (consecutive validations)")
    return errors


def curriculum_problems(node: Any, members: Sequence[str], graded: Sequence[str] = (), path: str = "env.curriculum") -> list[str]:
    """Every problem of a ``curriculum`` section (a mapping with ``stages``) for a mix of ``members`` (``graded``:
    those whose env grades episodes), each a sentence naming the key."""
    if not isinstance(node, Mapping) or set(node) != {"stages"}:
        return [f"{path} must be a mapping with one key, stages (a list of stages), or null"]
    stages = node["stages"]
    if not isinstance(stages, Sequence) or isinstance(stages, str) or len(stages) < 2:
        return [f"{path}.stages must be a list of two stages or more (one stage is a fixed mix: member weights)"]
    errors: list[str] = []
    iterations: list[int] = []
    for k, stage in enumerate(stages):
        where = f"{path}.stages.{k}"
        if not isinstance(stage, Mapping):
            errors.append(f"{where} must be a mapping with keys {', '.join(STAGE_KEYS)}")
            continue
        errors += [f"{where}.{key} is not a known key; valid keys: {', '.join(STAGE_KEYS)}" for key in stage if key not in STAGE_KEYS]
        errors += _weights_problems(stage.get("weights"), members, where)
        errors += _gate_problems(stage, where, k == len(stages) - 1, members, graded)
        if isinstance(stage.get("until_iteration"), int):
            if iterations and stage["until_iteration"] <= iterations[-1]:
                errors.append(f"{where}.until_iteration={stage['until_iteration']} must come after the earlier "
                              f"stage's {iterations[-1]}")
            iterations.append(stage["until_iteration"])
    return errors


@dataclass
class Curriculum:
    """The stage in force and the counters of its gates (module docstring).

    Attributes:
        stages: the stages, first to last.
        stage: the index of the stage in force.
        above: consecutive validations in this stage whose measure reached ``advance_above``.
        below: consecutive validations in this stage whose previous stage's measure fell under its ``retreat_below``.
        history: ``(iteration, stage)`` of every move, in order.
    """

    stages: Sequence[Stage]
    stage: int = 0
    above: int = 0
    below: int = 0
    history: list[tuple[int, int]] = field(default_factory=list)

    @property
    def validation_driven(self) -> bool:
        """Some stage moves on (or back) by a validation measure."""
        return any(s.metric is not None for s in self.stages[:-1])

    def weights(self) -> dict[str, float]:
        """The member weights in force."""
        return dict(self.stages[self.stage].weights)

    def observe(self, iteration: int, val_metrics: Mapping[str, float] | None = None) -> bool:
        """Take in the batch of ``iteration`` about to be rolled out and, when a validation came since the last
        call, its ``val/*`` values. Returns whether the stage changed."""
        changed = False
        if val_metrics is not None:
            changed = self._judge(iteration, val_metrics)
        while self.stage < len(self.stages) - 1:
            gate = self.stages[self.stage].until_iteration
            if gate is None or iteration < gate:
                break
            self._move(iteration, self.stage + 1)
            changed = True
        return changed

    def _judge(self, iteration: int, values: Mapping[str, float]) -> bool:
        """One validation: move on after ``patience`` validations at or above ``advance_above``, else back after
        ``patience`` validations under the previous stage's ``retreat_below``."""
        here = self.stages[self.stage]
        if here.metric is not None and self.stage < len(self.stages) - 1:
            self.above = self.above + 1 if _measure(values, here.metric) >= here.advance_above else 0
            if self.above >= here.patience:
                self._move(iteration, self.stage + 1)
                return True
        back = self.stages[self.stage - 1] if self.stage > 0 else None
        if back is not None and back.metric is not None and back.retreat_below is not None:
            self.below = self.below + 1 if _measure(values, back.metric) < back.retreat_below else 0
            if self.below >= back.patience:
                self._move(iteration, self.stage - 1)
                return True
        return False

    def _move(self, iteration: int, stage: int) -> None:
        self.stage, self.above, self.below = stage, 0, 0
        self.history.append((int(iteration), stage))

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "above": self.above, "below": self.below, "history": [list(h) for h in self.history]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        stage = int(state["stage"])
        if not 0 <= stage < len(self.stages):
            raise ValueError(f"the checkpoint's curriculum is in stage {stage}; this config has {len(self.stages)} stages")
        self.stage, self.above, self.below = stage, int(state["above"]), int(state["below"])
        self.history = [(int(i), int(s)) for i, s in state.get("history", [])]


def _measure(values: Mapping[str, float], metric: str) -> float:
    """``values[metric]`` as a float (NaN, e.g. a valid-action ratio without a turn, passes no threshold)."""
    if metric not in values:
        raise KeyError(f"the curriculum's metric {metric!r} is not among the validation's values "
                       f"({', '.join(sorted(k for k in values if k.startswith('val/')))})")
    return float(values[metric])
