"""Every config composes and validates; bad values stop the run with a message naming the key."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from arl.utils.config import ConfigError, validate_config
from arl_testing import CONFIG_DIR, ROOT, compose

EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
ALGOS = sorted(p.stem for p in (CONFIG_DIR / "algo").glob("*.yaml") if p.stem != "base")
DEBUGS = sorted(p.stem for p in (CONFIG_DIR / "debug").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    cfg = compose([f"experiment={experiment}"])
    validate_config(cfg)


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algo_preset_validates(algo):
    validate_config(compose([f"algo={algo}"]))


@pytest.mark.parametrize("debug", DEBUGS)
def test_every_debug_config_validates(debug):
    validate_config(compose([f"debug={debug}"]))


def test_default_is_sampo_sokoban_on_tiny():
    cfg = compose()
    assert cfg.task_name == "sampo_sokoban"
    assert cfg.algo.name == "sampo" and cfg.algo.loss.name == "gspo"
    assert cfg.algo.advantage.name == "gigpo" and cfg.algo.filter.name == "dapo"
    assert cfg.model.name == "tiny" and cfg.env.name == "sokoban"


def test_eval_config_composes():
    cfg = compose(["ckpt_path=/nonexistent"], config_name="eval.yaml")
    assert cfg.env.name == "sokoban"


@pytest.mark.parametrize(
    "override, key",
    [
        ("algo.loss.name=nope", "algo.loss.name"),
        ("algo.advantage.name=nope", "algo.advantage.name"),
        ("algo.filter.name=nope", "algo.filter.name"),
        ("algo.loss.agg=nope", "algo.loss.agg"),
        ("env.name=nope", "env.name"),
        ("rollout.group_size=0", "rollout.group_size"),
        ("rl.iterations=0", "rl.iterations"),
        ("rollout.top_p=1.5", "rollout.top_p"),
    ],
)
def test_bad_values_name_the_key(override, key):
    cfg = compose([override])
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert key in str(err.value)


@pytest.mark.parametrize(
    "override, must_list",
    [
        ("algo.loss.name=nope", ["gspo", "ppo_clip", "cispo", "sapo", "reinforce"]),
        ("env.name=nope", ["sokoban"]),
        ("algo.advantage.name=nope", ["grpo", "gigpo", "rloo"]),
    ],
)
def test_cli_stops_fast_before_loading_a_model(tmp_path, override, must_list):
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), override, f"paths.log_dir={tmp_path}"],
        capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "ARL_CACHE": str(tmp_path / "cache")},
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 2, proc.stderr[-2000:]
    msg = proc.stderr
    assert override.split("=")[0] in msg
    for name in must_list:
        assert name in msg
    assert not (tmp_path / "cache").exists(), "a model was built before validation"
    assert elapsed < 60


def test_seeds_search_is_a_multirun_over_seeds():
    cfg = compose(["hparams_search=seeds"], output_dir="/tmp/x")
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    assert str(hc.mode) == "RunMode.MULTIRUN"
    assert hc.sweeper.params["seed"] == "1,2,3"
