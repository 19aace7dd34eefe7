"""The ``algo`` config group, defined once: every key with its type, default, valid values and meaning.

Each section is a frozen dataclass whose fields are settings (:func:`arl.utils.schema.setting`; the
checks and the walking are shared with the run groups' sections): the default, one line of meaning
and the check that validation applies. Everything else is derived from these classes:

- :func:`validate_algo_config` checks a mapping (a dict or an OmegaConf ``DictConfig``) against
  them and raises one ``ValueError`` naming every missing, unknown or invalid key;
- :func:`algo_config` validates and returns the typed :class:`AlgoConfig` that the loss, the
  estimators and the filters take (``cfg.loss.clip_ratio_low``, ``cfg.advantage.gamma``);
- ``configs/algo/base.yaml`` is :func:`render_base_yaml`'s output, and the key table of
  docs/algorithms.md is :func:`key_table`'s (``python -m arl.algos --write`` rewrites both;
  tests fail when either differs). The presets beside base.yaml set values only;
- the algorithm functions take these values without defaults of their own (a test checks it);
- a part's ``name`` (the KL's ``estimator``) is a registered name or a ``package.module:function``
  (:func:`part_name`), whose signature a section's ``section_problems`` checks against the
  registry's contract with the section's ``kwargs`` (:func:`part_problems`), at start-up.

Nothing here imports a config library.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arl.algos import advantages, aggregation, clip_control, filters, kl, policy_losses
from arl.algos.registry import OUTSIDE_FORM, Kwargs, OutsideNameError, Registry
from arl.utils import schema as _schema
from arl.utils.schema import (  # noqa: F401  (re-exported: the section helpers of this group)
    BOOLEAN,
    NON_EMPTY,
    Check,
    integer,
    key_names,
    number,
    one_of,
    optional,
    replace,
    section,
    setting,
    yaml_scalar,
)


# ------------------------------------------------------------------------- the checks of the parts
def part_name(registry: Registry) -> Check:
    """A name of ``registry`` or a ``package.module:function`` that imports to a callable (refused with
    the reason it does not: the import error, the missing attribute). Its signature is checked
    against the registry's contract with the section's kwargs by :func:`part_problems`."""

    def problem(value: Any) -> str | None:
        if isinstance(value, str) and value in registry:
            return None
        if not isinstance(value, str) or ":" not in value:
            return f"is not valid; valid: {', '.join(registry.names())} (or '{OUTSIDE_FORM}')"
        try:
            registry.get(value)
        except OutsideNameError as err:
            return f"cannot be used: {err.reason}"
        return None

    return Check(" \\| ".join(f"`{n}`" for n in (*registry.names(), OUTSIDE_FORM)), problem)


def _kwargs_problem(value: Any) -> str | None:
    if not _schema.is_mapping(value):
        return "must be a mapping (parameter name: value)"
    bad = [key for key in value if not (isinstance(key, str) and key.isidentifier())]
    return f"has keys that are not parameter names: {bad}" if bad else None


#: a section's ``kwargs``: the extra keyword arguments of its function (typed as an immutable :class:`Kwargs`)
KWARGS = Check("mapping", _kwargs_problem, Kwargs)


def part_problems(registry: Registry, node: Mapping[str, Any], path: str, key: str = "name") -> list[str]:
    """The problems of calling the function that ``node[key]`` names (its name already valid) as the
    registry's contract says, with ``node["kwargs"]`` (when the contract passes kwargs): one sentence,
    ``algo.loss.name=mypkg.losses:my_loss: the policy loss is called with ... ; my_loss lacks ...``."""
    contract = registry.contract
    kwargs = node["kwargs"] if contract.kwargs else {}
    found = contract.problems(registry.get(node[key]), kwargs, path)
    if not found:
        return []
    return [f"{path}.{key}={node[key]}: {contract.describe(registry.name)}; {'; '.join(found)}"]


# ------------------------------------------------------------------------------------------- the schema
@dataclass(frozen=True)
class LossConfig:
    """``algo.loss``: the policy loss, its aggregation and its clip / gate parameters."""

    name: str = setting("ppo_clip", "policy loss", part_name(policy_losses.REGISTRY))
    kwargs: Kwargs = setting(
        Kwargs(), "extra keyword arguments of the loss (a package.module:function's own settings)", KWARGS
    )
    agg: str = setting("token-mean", "loss aggregation (docs/algorithms.md)", one_of(lambda: aggregation.AGG_MODES))
    horizon: int | None = setting(
        None,
        "H of seq-mean-token-sum-norm, a constant (null: the generation budget, rollout.max_new_tokens; "
        "x env.max_turns in trajectory mode), never the padded width of a micro-batch",
        optional(integer(1)),
    )
    clip_ratio_low: float = setting(0.2, "eps_low: lower clip bound 1 - eps_low (ppo_clip, gspo, cispo)", number(0.0))
    clip_ratio_high: float = setting(
        0.2, "eps_high: upper clip bound 1 + eps_high (ppo_clip, gspo, cispo)", number(0.0)
    )
    clip_ratio_c: float = setting(3.0, "dual-clip constant c > 1 for A < 0 (ppo_clip)", number(1.0, low_open=True))
    tau_pos: float = setting(1.0, "SAPO gate temperature for A > 0", number(0.0, low_open=True))
    tau_neg: float = setting(1.05, "SAPO gate temperature for A <= 0", number(0.0, low_open=True))
    seq_ratio: str = setting(
        "geometric",
        "gspo: the sequence ratio, geometric (GSPO's mean of the token log-ratios) | outlier_weighted (their "
        "softmax-weighted mean by beta |log r|: the furthest token counts most)",
        one_of(lambda: policy_losses.SEQ_RATIOS),
    )
    outlier_beta: float = setting(
        10.0, "gspo outlier_weighted: beta, per nat of |log r| (0: the geometric mean)", number(0.0)
    )
    token_bound: float | None = setting(
        None,
        "gspo: eps_tok; a sequence whose furthest token ratio is past 1 + eps_tok (A > 0) or below 1 - eps_tok "
        "(A < 0) is clipped whole (null: no token bound)",
        optional(number(0.0, low_open=True)),
    )

    @staticmethod
    def section_problems(node: Mapping[str, Any], path: str) -> list[str]:
        """The loss function's signature against its contract and ``kwargs``; the sequence-ratio keys
        with a loss other than ``gspo``."""
        found = part_problems(policy_losses.REGISTRY, node, path)
        if node["name"] != "gspo":
            for key, off in (("seq_ratio", "geometric"), ("token_bound", None)):
                if node[key] != off:
                    found.append(f"{path}.{key}={node[key]} is a setting of the gspo loss; {path}.name={node['name']} "
                                 f"has no sequence ratio (set {path}.name=gspo, or {path}.{key}={yaml_scalar(off)})")
        return found


@dataclass(frozen=True)
class SeqMaskConfig:
    """``algo.seq_mask``: sequence masking of drifted negative-advantage samples."""

    enabled: bool = setting(False, "drop negative-advantage sequences whose ratio fell below exp(-delta)", BOOLEAN)
    delta: float = setting(3.0e-3, "threshold on (1/|y|) sum_t (log pi_old - log pi)", number(0.0))


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    """``algo.rollout_correction``: the importance weight of pi_old against the policy that sampled the
    tokens: truncated IS for the engine-vs-trainer mismatch, decoupled PPO's behaviour weight for stale
    samples (:func:`arl.algos.policy_losses.rollout_is_weights`)."""

    enabled: bool = setting(False, "weigh every token's loss by w = pi_old / pi_rollout (as level and mode say)", BOOLEAN)
    cap: float = setting(2.0, "the weight's cap (>= 1)", number(1.0))
    level: str = setting(
        "token",
        "token (w per token) | sequence (the row's likelihood ratio) | geometric (its per-token geometric mean, "
        "GSPO's scale)",
        one_of(lambda: policy_losses.IS_LEVELS),
    )
    mode: str = setting(
        "truncate", "truncate (min(w, cap): TIS) | mask (w past the cap becomes 0: AReaL's decoupled PPO)",
        one_of(lambda: policy_losses.IS_MODES),
    )


@dataclass(frozen=True)
class AdvantageConfig:
    """``algo.advantage``: the estimator and its settings (each estimator takes the keys it uses)."""

    name: str = setting("grpo", "advantage estimator", part_name(advantages.ESTIMATORS))
    kwargs: Kwargs = setting(
        Kwargs(), "extra keyword arguments of the estimator (a package.module:function's own settings)", KWARGS
    )
    gamma: float = setting(0.95, "gigpo: discount of the step returns", number(0.0, 1.0))
    step_weight: float = setting(1.0, "gigpo: w in A = A_episode + w * A_step", number(0.0))
    norm: str = setting(
        "mean_norm",
        "gigpo: mean_norm (subtract the mean) | mean_std_norm (also divide by std)",
        one_of(lambda: advantages.NORM_MODES),
    )
    norm_by_std: bool = setting(True, "grpo: divide by the group std + eps", BOOLEAN)
    cross_steps: bool = setting(
        True, "grpo/rloo: statistics over every turn sample of the group (false: one per episode)", BOOLEAN
    )
    invalid_penalty: float = setting(
        -0.1, "added to the score and step return of a turn whose action did not parse", number(None, 0.0)
    )
    penalty_only_groups: str = setting(
        "normalise",
        "grpo/gigpo: a group whose episode returns are all equal, and a gigpo step group whose step returns are "
        "(both differ only by the penalty): normalise (as any group, the official code) | center (no std "
        "division) | zero (no advantage)",
        one_of(lambda: advantages.PENALTY_ONLY_MODES),
    )
    eps: float = setting(
        1.0e-6, "grpo/gigpo: added to a std before dividing by it (the official 1e-6)", number(0.0, low_open=True)
    )

    @staticmethod
    def section_problems(node: Mapping[str, Any], path: str) -> list[str]:
        """The estimator's signature against its contract and ``kwargs``."""
        return part_problems(advantages.ESTIMATORS, node, path)


@dataclass(frozen=True)
class FilterConfig:
    """``algo.filter``: dynamic sampling (the filter and the DataModule's re-rollout schedule)."""

    name: str = setting("none", "group filter", part_name(filters.FILTERS))
    kwargs: Kwargs = setting(
        Kwargs(), "extra keyword arguments of the filter (a package.module:function's own settings)", KWARGS
    )
    max_rollout_rounds: int = setting(
        3, "dapo/stage_aware: rollout rounds to fill the batch with kept groups", integer(1)
    )
    cold_start: int = setting(0, "iterations before the filter starts (official ALFWorld DAPO: 15)", integer(0))
    fill_last_round: bool = setting(
        True,
        "the last round fills the batch with its other groups (non-constant first), as the official code; false "
        "trains on the kept groups only",
        BOOLEAN,
    )
    valid_ratio_threshold: float = setting(
        0.9, "stage_aware: keep all-failure groups while the valid-format ratio is below this", number(0.0, 1.0)
    )
    atol: float = setting(
        0.0, "dapo/stage_aware: a group is constant when max - min of its returns <= atol", number(0.0)
    )

    @staticmethod
    def section_problems(node: Mapping[str, Any], path: str) -> list[str]:
        """The filter's signature against its contract, the keys it names and ``kwargs``."""
        return part_problems(filters.FILTERS, node, path)


@dataclass(frozen=True)
class KLConfig:
    """``algo.kl``: the KL(policy || reference) penalty."""

    coef: float = setting(0.01, "weight of the KL(policy || reference) penalty", number(0.0))
    estimator: str = setting("k3", "KL estimator (low_var_kl: k3)", part_name(kl.ESTIMATORS))
    in_loss: bool = setting(True, "true: add coef * KL to the loss; false: subtract it from the reward", BOOLEAN)

    @staticmethod
    def section_problems(node: Mapping[str, Any], path: str) -> list[str]:
        """The estimator's signature against its contract (it takes no kwargs)."""
        return part_problems(kl.ESTIMATORS, node, path, key="estimator")


@dataclass(frozen=True)
class ClipControlConfig:
    """``algo.clip_control``: a factor on the clip bounds eps_low, eps_high that follows the training
    stage (:mod:`arl.algos.clip_control`)."""

    mode: str = setting(
        "fixed",
        "fixed (the configured bounds) | schedule (a factor from 1 to end_factor over iterations) | adaptive (a "
        "controller steering target_metric toward target)",
        one_of(clip_control.MODES),
    )
    shape: str = setting("linear", "schedule: linear | cosine path of the factor", one_of(clip_control.SHAPES))
    end_factor: float = setting(0.5, "schedule: the factor at iteration `iterations` and after", number(0.0, low_open=True))
    iterations: int = setting(100, "schedule: iterations over which the factor moves from 1 to end_factor", integer(1))
    target_metric: str = setting(
        "clipfrac",
        "adaptive: the measured quantity, clipfrac (above target: widen) | ppo_kl (above target: tighten)",
        one_of(clip_control.TARGET_METRICS),
    )
    target: float = setting(
        0.1, "adaptive: the value of target_metric to hold (a fraction for clipfrac, nats per token for ppo_kl)",
        number(0.0, low_open=True),
    )
    rate: float = setting(0.5, "adaptive: gain; a step is 1 + rate (measured / target - 1), signed by the metric",
                          number(0.0, low_open=True))
    max_step: float = setting(0.1, "adaptive: each step's multiplier kept in [1 - max_step, 1 + max_step]",
                              number(0.0, 1.0, high_open=True))
    min_factor: float = setting(0.1, "adaptive: the lowest factor", number(0.0, low_open=True))
    max_factor: float = setting(10.0, "adaptive: the highest factor", number(0.0, low_open=True))

    @staticmethod
    def section_problems(node: Mapping[str, Any], path: str) -> list[str]:
        """The adaptive factor's bounds in order."""
        if node["min_factor"] > node["max_factor"]:
            return [f"{path}.min_factor={node['min_factor']} is above {path}.max_factor={node['max_factor']}"]
        return []


@dataclass(frozen=True)
class AlgoConfig:
    """The whole ``algo`` group (GRPO-like defaults; the presets of configs/algo/ change some)."""

    name: str = setting("grpo", "label of the recipe (run names, logs)", NON_EMPTY)
    loss: LossConfig = section(LossConfig, "policy loss")
    seq_mask: SeqMaskConfig = section(SeqMaskConfig, "sequence masking")
    rollout_correction: RolloutCorrectionConfig = section(RolloutCorrectionConfig, "rollout correction")
    advantage: AdvantageConfig = section(AdvantageConfig, "advantage")
    filter: FilterConfig = section(FilterConfig, "dynamic sampling")
    kl: KLConfig = section(KLConfig, "KL penalty")
    entropy_coef: float = setting(0.001, "entropy bonus: loss -= entropy_coef * aggregated entropy", number())
    clip_control: ClipControlConfig = section(ClipControlConfig, "clip bounds that follow the training stage")

    @staticmethod
    def section_problems(node: Mapping[str, Any], path: str) -> list[str]:
        """A clip control other than ``fixed`` needs a loss with clip bounds."""
        mode, loss = node["clip_control"]["mode"], node["loss"]["name"]
        if mode == "fixed" or loss in clip_control.CLIPPED_LOSSES:
            return []
        return [(f"{path}.clip_control.mode={mode} scales the clip bounds eps_low / eps_high, which {path}.loss.name="
                 f"{loss} does not have; it works with {', '.join(clip_control.CLIPPED_LOSSES)} "
                 f"(or set {path}.clip_control.mode=fixed)")]


# ----------------------------------------------------------------------------------------- walking it
def keys(cls: type = AlgoConfig, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """Every leaf key as ``(dotted path, field)``, in declaration order."""
    return _schema.keys(cls, prefix)


def validate_algo_config(algo: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming every missing, unknown, misspelt or invalid key of ``algo``
    (the rules: the schema's checks, listed in docs/algorithms.md)."""
    errors = _schema.problems(algo, AlgoConfig, "algo")
    if errors:
        raise ValueError("invalid algo config:\n  - " + "\n  - ".join(errors))


def algo_config(algo: Mapping[str, Any] | AlgoConfig) -> AlgoConfig:
    """The validated, typed :class:`AlgoConfig` of an ``algo`` mapping (numbers cast to their type)."""
    if isinstance(algo, AlgoConfig):
        return algo
    validate_algo_config(algo)
    return _schema.build(AlgoConfig, algo)


# ----------------------------------------------------------------------------- the files derived from it
COMMENT_COLUMN = 32
BASE_YAML = Path(__file__).resolve().parents[3] / "configs" / "algo" / "base.yaml"
ALGORITHMS_MD = Path(__file__).resolve().parents[3] / "docs" / "algorithms.md"
TABLE_MARKERS = ("<!-- algo-keys:begin -->", "<!-- algo-keys:end -->")


def render_base_yaml() -> str:
    """``configs/algo/base.yaml``: every key with its default and a comment."""
    lines = [
        "# GENERATED from src/arl/algos/schema.py by `python -m arl.algos --write`: every key of the algo",
        "# group with its default (GRPO-like). Edit the schema, not this file. The other presets start from this",
        "# file and set only what differs; docs/algorithms.md lists the valid values and the formulas.",
    ]

    def emit(cls: type, indent: str) -> None:
        after_section = False
        for f in dataclasses.fields(cls):
            if "section" in f.metadata:
                lines.extend(["", f"{indent}{f.name}:"])
                emit(f.metadata["section"], indent + "  ")
                after_section = True
                continue
            if after_section:
                lines.append("")
                after_section = False
            head = f"{indent}{f.name}: {yaml_scalar(f.default)}"
            width = 118 - COMMENT_COLUMN - 2
            doc = textwrap.wrap(f.metadata["doc"], width) or [""]
            lines.append(f"{head:<{COMMENT_COLUMN - 1}} # {doc[0]}".rstrip())
            lines.extend(f"{'':<{COMMENT_COLUMN - 1}} # {more}" for more in doc[1:])

    emit(AlgoConfig, "")
    return "\n".join(lines) + "\n"


def key_table() -> str:
    """The markdown table of every ``algo`` key (docs/algorithms.md)."""
    rows = ["| key | default | valid | meaning |", "|---|---|---|---|"]
    for path, f in keys():
        meaning = f.metadata["doc"].replace("|", "\\|")
        rows.append(f"| `algo.{path}` | `{yaml_scalar(f.default)}` | {f.metadata['check'].rule} | {meaning} |")
    return "\n".join(rows)


def _with_table(text: str) -> str:
    begin, end = TABLE_MARKERS
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{key_table()}\n{end}{tail}"


def main(argv: list[str]) -> int:
    """``--write``: rewrite base.yaml and the docs' key table; ``--check``: exit 1 when either differs;
    no argument: print base.yaml."""
    if not argv:
        print(render_base_yaml(), end="")
        return 0
    doc = ALGORITHMS_MD.read_text()
    wanted = {BASE_YAML: render_base_yaml(), ALGORITHMS_MD: _with_table(doc)}
    stale = [p for p, text in wanted.items() if p.read_text() != text]
    if argv[0] == "--write":
        for path in stale:
            path.write_text(wanted[path])
            print(f"wrote {path}")
        return 0
    for path in stale:
        print(f"{path} differs from the schema: run python -m arl.algos --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
