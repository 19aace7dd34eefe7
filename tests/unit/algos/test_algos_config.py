"""Registry errors, the algo schema (validation, the files derived from it) and the configs/algo presets."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from arl import algos
from arl.algos import advantages, filters, kl, policy_losses, registry, schema
from arl.algos.schema import AlgoConfig

ALGO_DIR = Path(__file__).resolve().parents[3] / "configs" / "algo"
PRESETS = sorted(p.stem for p in ALGO_DIR.glob("*.yaml"))
EXPECTED_PRESETS = {
    "base",
    "grpo",
    "gspo",
    "cispo",
    "sapo",
    "cispo_seqmask",
    "sapo_seqmask",
    "gigpo",
    "dapo_grpo",
    "dapo_gigpo",
    "stage_aware_gigpo",
    "sampo",
}


# ------------------------------------------------------------------------------------ registry
def test_registry_basics_and_errors() -> None:
    reg = registry.Registry("widget")

    @reg.register("b", "b_alias")
    def b() -> int:
        return 2

    @reg.register("a")
    def a() -> int:
        return 1

    assert reg.get("a")() == 1 and reg.get("b_alias") is b
    assert reg.names() == ("a", "b", "b_alias") and "a" in reg and len(reg) == 3
    with pytest.raises(KeyError) as err:
        reg.get("c")
    assert str(err.value) == "unknown widget 'c'; valid: a, b, b_alias"
    with pytest.raises(ValueError, match="valid: a, b, b_alias"):
        reg.get(["unhashable"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(a)


@pytest.mark.parametrize(
    ("get", "message"),
    [
        (policy_losses.get, "unknown policy loss 'nope'; valid: cispo, gspo, ppo_clip, reinforce, sapo"),
        (advantages.get, "unknown advantage estimator 'nope'; valid: gigpo, grpo, rloo"),
        (filters.get, "unknown filter 'nope'; valid: dapo, none, stage_aware"),
        (kl.get, "unknown kl estimator 'nope'; valid: abs, k1, k2, k3, low_var_kl"),
    ],
)
def test_component_registries_list_valid_names(get, message: str) -> None:
    with pytest.raises(KeyError) as err:
        get("nope")
    assert str(err.value) == message


def test_package_exports() -> None:
    for name in (
        "registry",
        "aggregation",
        "policy_losses",
        "advantages",
        "kl",
        "filters",
        "diagnostics",
        "objective",
        "schema",
        "clip_control",
        "validate_algo_config",
        "algo_config",
        "AlgoConfig",
    ):
        assert hasattr(algos, name)


# ------------------------------------------------------------------------------------- presets
def load_preset(name: str) -> dict[str, Any]:
    """Merge base.yaml with a preset the way Hydra does (defaults: [base, _self_])."""
    base = yaml.safe_load((ALGO_DIR / "base.yaml").read_text())
    preset = yaml.safe_load((ALGO_DIR / f"{name}.yaml").read_text()) or {}
    if name != "base":
        assert preset.pop("defaults") == ["base", "_self_"]

    def merge(dst: dict, src: dict) -> dict:
        for key, value in src.items():
            if isinstance(value, dict):
                assert key in dst, f"{name}.yaml adds unknown key {key}"
                merge(dst[key], value)
            else:
                dst[key] = value
        return dst

    return merge(copy.deepcopy(base), preset)


def test_all_presets_present() -> None:
    assert EXPECTED_PRESETS <= set(PRESETS)


#: three turns of two episodes of one group, for every preset's estimator
TURNS = {"step_rewards": torch.tensor([0.0, 1.0, 0.0]), "episode_ids": torch.tensor([0, 0, 1]),
         "turn_idx": torch.tensor([0, 1, 0]), "group_ids": torch.tensor([0, 0, 0]),
         "anchor_keys": torch.tensor([5, 6, 5]), "valid": torch.tensor([True, False, True])}


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_validates(name: str) -> None:
    algo = load_preset(name)
    algos.validate_algo_config(algo)
    cfg = algos.algo_config(algo)
    assert isinstance(cfg, AlgoConfig)
    adv, metrics = advantages.get(cfg.advantage.name)(advantages.TurnTable(**TURNS), cfg.advantage)
    assert adv.shape == (3,) and bool(torch.isfinite(adv).all()) and set(metrics) <= {"step_std"}
    filter_kwargs = filters.filter_kwargs(cfg.filter)
    assert "name" not in filter_kwargs and "max_rollout_rounds" not in filter_kwargs


# ------------------------------------------------------------------- one definition per key
def _leaves(node: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict) and key != "kwargs":  # a part's kwargs is one key whose value is a mapping
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_base_yaml_and_the_key_table_are_the_schema() -> None:
    """configs/algo/base.yaml and docs/algorithms.md's key table are generated from the schema."""
    assert (ALGO_DIR / "base.yaml").read_text() == schema.render_base_yaml(), "run python -m arl.algos --write"
    assert schema.main(["--check"]) == 0, "run python -m arl.algos --write"
    base = _leaves(load_preset("base"))
    assert base == {path: f.default for path, f in schema.keys()}  # noqa: SIM118 - a function of the module


@pytest.mark.parametrize("name", [p for p in PRESETS if p != "base"])
def test_presets_set_only_schema_keys(name: str) -> None:
    preset = yaml.safe_load((ALGO_DIR / f"{name}.yaml").read_text())
    preset.pop("defaults")
    unknown = set(_leaves(preset)) - {path for path, _ in schema.keys()}  # noqa: SIM118 - a function of the module
    assert not unknown, f"{name}.yaml sets keys the schema does not define: {sorted(unknown)}"


def _algo_callables():
    """Every function and dataclass of arl.algos that takes algo settings."""
    for module in (advantages, filters, kl, policy_losses, algos.objective, algos.aggregation, algos.diagnostics,
                   algos.clip_control):
        for value in vars(module).values():
            if (inspect.isfunction(value) or dataclasses.is_dataclass(value)) and value.__module__ == module.__name__:
                yield f"{module.__name__}.{value.__name__}", value


def test_no_algo_key_has_a_second_default() -> None:
    """A parameter named like an algo key (gamma, atol, clip_ratio_low, ...) takes its value from the
    config: no function or dataclass of arl.algos gives it a default of its own."""
    paths = [path for path, _ in schema.keys()]  # noqa: SIM118 - a function of the module
    key_names = {path.rsplit(".", 1)[-1] for path in paths} - {"name", "enabled"}
    second = []
    for where, fn in _algo_callables():
        for param in inspect.signature(fn).parameters.values():
            if param.name in key_names and param.default is not inspect.Parameter.empty:
                second.append(f"{where}({param.name}={param.default!r})")
    assert not second, f"defaults outside the schema: {second}"


def test_every_setting_of_a_registered_function_is_a_key() -> None:
    """The filters take data and schema keys, nothing else; the estimators take the turn table and the
    ``algo.advantage`` block, nothing else."""
    for name in filters.FILTERS.names():
        settings = set(inspect.signature(filters.get(name)).parameters) - set(filters.DATA_KEYS)
        assert settings <= set(schema.key_names(schema.FilterConfig)), name
    for name in advantages.ESTIMATORS.names():
        assert list(inspect.signature(advantages.get(name)).parameters) == ["table", "cfg"], name


def test_a_disagreement_fails_the_check(tmp_path: Path, monkeypatch) -> None:
    """The generated files are checked, not trusted: a stale base.yaml fails --check."""
    stale = tmp_path / "base.yaml"
    stale.write_text(schema.render_base_yaml().replace("gamma: 0.95", "gamma: 0.9"))
    monkeypatch.setattr(schema, "BASE_YAML", stale)
    assert schema.main(["--check"]) == 1


def test_sampo_preset_values() -> None:
    algo = load_preset("sampo")
    assert algo["loss"]["name"] == "gspo" and algo["loss"]["agg"] == "token-mean"
    assert (algo["loss"]["clip_ratio_low"], algo["loss"]["clip_ratio_high"]) == (3e-3, 4e-3)
    assert algo["advantage"]["name"] == "gigpo" and algo["filter"]["name"] == "dapo"
    assert (algo["advantage"]["gamma"], algo["advantage"]["step_weight"]) == (0.95, 1.0)
    assert algo["kl"] == {"coef": 0.01, "estimator": "k3", "in_loss": True}
    assert algo["entropy_coef"] == 0.001
    cfg = algos.algo_config(algo).advantage
    assert cfg.name == "gigpo"
    assert (cfg.gamma, cfg.step_weight, cfg.norm, cfg.invalid_penalty, cfg.penalty_only_groups, cfg.eps) == (
        0.95, 1.0, "mean_norm", -0.1, "normalise", 1e-6)


def test_seqmask_presets() -> None:
    for name, loss in (("cispo_seqmask", "cispo"), ("sapo_seqmask", "sapo")):
        cfg = algos.algo_config(load_preset(name))
        assert cfg.loss.name == loss and cfg.seq_mask.enabled and cfg.seq_mask.delta == pytest.approx(3e-3)
    cispo = algos.algo_config(load_preset("cispo"))
    assert (cispo.loss.clip_ratio_low, cispo.loss.clip_ratio_high, cispo.seq_mask.enabled) == (1.0, 0.2, False)


def test_presets_compose_with_hydra(tmp_path: Path) -> None:
    """The presets work as the `algo` group of a primary config (relative `- base` default)."""
    hydra = pytest.importorskip("hydra")
    from omegaconf import OmegaConf

    shutil.copytree(ALGO_DIR, tmp_path / "algo")
    (tmp_path / "config.yaml").write_text("defaults:\n  - algo: grpo\n  - _self_\n")
    with hydra.initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        for name in PRESETS:
            if name == "base":
                continue
            cfg = hydra.compose(config_name="config", overrides=[f"algo={name}"])
            algo = OmegaConf.to_container(cfg.algo, resolve=True)
            assert algo == load_preset(name), name
            algos.validate_algo_config(cfg.algo)  # a DictConfig is accepted too
        cfg = hydra.compose(config_name="config", overrides=["algo=sampo", "algo.loss.agg=seq-mean-token-mean"])
        assert algos.algo_config(cfg.algo).loss.agg == "seq-mean-token-mean"


# ------------------------------------------------------------------------------------ validation
BAD_VALUES = [
    ("name", ""),
    ("loss.name", "nope"),
    ("loss.agg", "token-sum"),
    ("loss.clip_ratio_low", -0.1),
    ("loss.clip_ratio_high", -1e-3),
    ("loss.clip_ratio_c", 1.0),
    ("loss.tau_pos", 0.0),
    ("loss.tau_neg", -1.0),
    ("loss.clip_ratio_low", "3e-3"),  # a string where a number belongs
    ("seq_mask.enabled", "yes"),
    ("seq_mask.delta", -1e-3),
    ("rollout_correction.enabled", 1),
    ("rollout_correction.cap", 0.5),
    ("advantage.name", "gae"),
    ("advantage.gamma", 1.5),
    ("advantage.gamma", -0.1),
    ("advantage.step_weight", -1.0),
    ("advantage.norm", "std_norm"),
    ("advantage.norm_by_std", None),
    ("advantage.cross_steps", "true"),
    ("advantage.invalid_penalty", 0.5),
    ("advantage.eps", 0.0),
    ("filter.name", "dapo2"),
    ("filter.max_rollout_rounds", 0),
    ("filter.max_rollout_rounds", 2.5),
    ("filter.valid_ratio_threshold", 1.5),
    ("filter.atol", -0.1),
    ("filter.cold_start", -1),
    ("kl.coef", -0.01),
    ("kl.estimator", "k4"),
    ("kl.in_loss", "no"),
    ("entropy_coef", float("nan")),
]


def with_value(algo: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    algo = copy.deepcopy(algo)
    node = algo
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node[key]
    node[leaf] = value
    return algo


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_validate_names_the_bad_key(key: str, value: Any) -> None:
    algo = with_value(load_preset("sampo"), key, value)
    with pytest.raises(ValueError) as err:
        algos.validate_algo_config(algo)
    assert f"algo.{key}={value!r}" in str(err.value)
    with pytest.raises(ValueError):
        algos.algo_config(algo)


def test_validate_message_lists_valid_names() -> None:
    with pytest.raises(ValueError) as err:
        algos.validate_algo_config(with_value(load_preset("base"), "loss.name", "nope"))
    assert "algo.loss.name='nope' is not valid; valid: cispo, gspo, ppo_clip, reinforce, sapo" in str(err.value)


def test_validate_missing_and_unknown_keys() -> None:
    algo = load_preset("base")
    del algo["kl"]["coef"]
    algo["loss"]["clip_ratio"] = 0.2
    algo["extra"] = 1
    with pytest.raises(ValueError) as err:
        algos.validate_algo_config(algo)
    message = str(err.value)
    assert "algo.kl.coef is missing" in message
    assert "algo.loss.clip_ratio is not a known key" in message
    assert "algo.extra is not a known key" in message
    with pytest.raises(ValueError, match="algo.loss must be a mapping"):
        algos.validate_algo_config(with_value(load_preset("base"), "loss", "ppo_clip"))


def test_algo_config_is_typed() -> None:
    algo = load_preset("base")
    algo["loss"]["clip_ratio_c"] = 4  # an integer in yaml is a float key's value
    algo["filter"]["name"] = "stage_aware"
    cfg = algos.algo_config(algo)
    assert isinstance(cfg.loss.clip_ratio_c, float) and cfg.loss.clip_ratio_c == 4.0
    assert (cfg.kl.coef, cfg.kl.estimator, cfg.kl.in_loss, cfg.entropy_coef) == (0.01, "k3", True, 0.001)
    assert filters.filter_kwargs(cfg.filter) == {"valid_ratio_threshold": 0.9, "atol": 0.0}
    assert algos.algo_config(cfg) is cfg
    changed = schema.replace(cfg, **{"loss.horizon": 64, "entropy_coef": 0.0})
    assert (changed.loss.horizon, changed.entropy_coef, changed.loss.clip_ratio_c) == (64, 0.0, 4.0)
