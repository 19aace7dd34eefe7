"""Clipping that follows the training stage (``algo.clip_control``): a factor on the clip bounds.

The clip range of ``ppo_clip``, ``gspo`` and ``cispo`` is [1 - eps_low, 1 + eps_high] (the
``algo.loss`` keys ``clip_ratio_low`` / ``clip_ratio_high``). Here both eps are multiplied by one
dimensionless factor ``f`` (the range widens for f > 1 and tightens for f < 1, its asymmetry
kept), chosen per iteration by ``algo.clip_control.mode``:

- ``fixed``: f = 1, the configured range (the update is bit-identical to one without this module);
- ``schedule``: f follows the iteration count k (the RL module's ``iteration``, the x-axis of the
  logs: the update of iteration k uses f(k)), from f(0) = 1 to f(N) = ``end_factor`` at
  N = ``iterations``, constant after: ``linear`` f(k) = 1 + (end - 1) p, ``cosine``
  f(k) = 1 + (end - 1) (1 - cos(pi p)) / 2, with p = min(k / N, 1) (:func:`scheduled_factor`);
- ``adaptive``: a controller in the manner of the adaptive KL controller (Ziegler et al. 2019,
  *Fine-Tuning Language Models from Human Preferences*; verl's ``AdaptiveKLController``) steers a
  measured quantity of the update toward ``target``; after each iteration's update
  f <- clamp(f * clamp(1 + s rate (m / target - 1), 1 - max_step, 1 + max_step), min_factor, max_factor)
  with m the iteration's global ``actor/<target_metric>`` and s its direction (:func:`adaptive_factor`).

The direction s follows from how each metric responds to the factor, so that the loop is a negative
feedback: a wider range clips fewer tokens (``clipfrac`` falls as f grows), so a clip fraction above
target widens the range (s = +1); a wider range lets the policy move further from pi_old within the
iteration (``ppo_kl``, the mean of log pi_old - log pi over the update's tokens, grows with f), so a
KL above target tightens it (s = -1), as the KL controller raises its coefficient when the KL is
above target.

:class:`ClipControl` holds the factor between iterations and its checkpoint state. Nothing here
imports anything but the schema's types.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the schema imports this module for the names of the modes
    from arl.algos.schema import AlgoConfig, ClipControlConfig

#: ``algo.clip_control.mode``
MODES: tuple[str, ...] = ("fixed", "schedule", "adaptive")
#: ``algo.clip_control.shape`` (schedule)
SHAPES: tuple[str, ...] = ("linear", "cosine")
#: ``algo.clip_control.target_metric`` (adaptive) and its direction: +1 widens when above target
DIRECTIONS: dict[str, float] = {"clipfrac": 1.0, "ppo_kl": -1.0}
TARGET_METRICS: tuple[str, ...] = tuple(DIRECTIONS)
#: the registered losses whose clip bounds the factor scales (the others have none, or are outside parts)
CLIPPED_LOSSES: tuple[str, ...] = ("ppo_clip", "gspo", "cispo")


def scheduled_factor(iteration: int, cfg: ClipControlConfig) -> float:
    """The schedule's factor f(k) at iteration ``iteration`` = k >= 0 (dimensionless; 1 at k = 0,
    ``cfg.end_factor`` from k = ``cfg.iterations`` on), ``cfg.shape`` linear or cosine."""
    progress = min(max(int(iteration), 0) / cfg.iterations, 1.0)
    if cfg.shape == "cosine":
        progress = (1.0 - math.cos(math.pi * progress)) / 2.0
    return 1.0 + (cfg.end_factor - 1.0) * progress


def adaptive_factor(factor: float, measured: float, cfg: ClipControlConfig) -> float:
    """The controller's next factor after an iteration whose ``cfg.target_metric`` was ``measured``
    (a clip fraction in [0, 1], or ``ppo_kl`` in nats per token), from the current ``factor``:
    ``factor`` times the step 1 + s rate (measured / target - 1) clamped to [1 - max_step,
    1 + max_step] (s: :data:`DIRECTIONS`), the product clamped to [min_factor, max_factor]."""
    direction = DIRECTIONS[cfg.target_metric]
    step = 1.0 + direction * cfg.rate * (measured / cfg.target - 1.0)
    step = min(max(step, 1.0 - cfg.max_step), 1.0 + cfg.max_step)
    return min(max(factor * step, cfg.min_factor), cfg.max_factor)


@dataclasses.dataclass
class ClipControl:
    """The factor on the clip bounds across iterations (one per RL module).

    ``factor_at(k)`` is the factor of iteration k's update; :meth:`algo_at` the ``algo`` config that
    update uses; :meth:`observe` feeds the controller the iteration's global metrics after the update.
    ``state_dict`` / ``load_state_dict`` carry the adaptive factor across a resume (the schedule's is
    a function of the iteration, which the module restores itself).
    """

    cfg: ClipControlConfig
    factor: float = 1.0  # the adaptive controller's current factor

    def factor_at(self, iteration: int) -> float:
        """The factor (dimensionless) of iteration ``iteration``'s update."""
        if self.cfg.mode == "schedule":
            return scheduled_factor(iteration, self.cfg)
        if self.cfg.mode == "adaptive":
            return self.factor
        return 1.0

    def algo_at(self, algo: AlgoConfig, iteration: int) -> AlgoConfig:
        """``algo`` with the clip bounds of iteration ``iteration``: eps_low and eps_high times the
        factor; ``algo`` itself (the very object) in ``fixed`` mode."""
        if self.cfg.mode == "fixed":
            return algo
        factor = self.factor_at(iteration)
        loss = dataclasses.replace(algo.loss, clip_ratio_low=algo.loss.clip_ratio_low * factor,
                                   clip_ratio_high=algo.loss.clip_ratio_high * factor)
        return dataclasses.replace(algo, loss=loss)

    def observe(self, metrics: Mapping[str, float]) -> None:
        """After an iteration's update: the adaptive controller's step on ``metrics``, the iteration's
        metrics global over ranks as the RL module logs them (``actor/clipfrac``, ``actor/ppo_kl``).
        An iteration that says nothing about the range leaves the factor: one without an optimiser
        step (the metric absent), and an on-policy one (``actor/old_log_probs_source`` 0: the ratio
        is 1 on every token, so nothing is clipped and pi_old is pi)."""
        if self.cfg.mode != "adaptive":
            return
        measured = metrics.get(f"actor/{self.cfg.target_metric}")
        if measured is None or metrics.get("actor/old_log_probs_source") == 0.0:
            return
        self.factor = adaptive_factor(self.factor, float(measured), self.cfg)

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.cfg.mode, "factor": self.factor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the factor; a checkpoint of a run in another mode (or from before this existed)
        leaves the start value 1."""
        if state.get("mode") == self.cfg.mode:
            self.factor = float(state["factor"])
