"""Every config composes and validates; bad values stop the run with a message naming the key."""

import subprocess
import sys
import time

import pytest

from arl.utils.config import ConfigError, validate_config
from arl_testing import CONFIG_DIR, ROOT, compose

EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
ALGOS = sorted(p.stem for p in (CONFIG_DIR / "algo").glob("*.yaml") if p.stem != "base")
DEBUGS = sorted(p.stem for p in (CONFIG_DIR / "debug").glob("*.yaml"))


METHODS = ["grpo", "gspo", "cispo", "sapo", "cispo_seqmask", "sapo_seqmask", "gigpo", "dapo_grpo", "dapo_gigpo", "sampo"]
ENVS = ["sokoban", "alfworld", "webshop", "math_tool"]
SEARCHES = sorted(p.stem for p in (CONFIG_DIR / "hparams_search").glob("*.yaml"))


def test_the_experiment_matrix_is_complete():
    expected = {f"{m}_{e}" for m in METHODS for e in ENVS} | {f"bc_{e}" for e in ENVS}
    assert set(EXPERIMENTS) == expected


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    cfg = compose([f"experiment={experiment}"])
    validate_config(cfg)
    assert cfg.task_name == experiment
    method, env = ("bc", experiment[3:]) if experiment.startswith("bc_") else next(
        (m, experiment[len(m) + 1 :]) for m in sorted(METHODS, key=len, reverse=True) if experiment.startswith(m + "_")
    )
    assert cfg.env.name == env
    if method != "bc":
        assert cfg.algo.name == method
    # the paper's GPU scale (DESIGN section 4)
    assert cfg.model.name == "hf" and cfg.model.path == "Qwen/Qwen3-4B" and cfg.model.dtype == "bfloat16"
    assert cfg.rollout.engine == "vllm" and cfg.trainer.accelerator == "gpu"
    assert (cfg.rollout.groups_per_step, cfg.rollout.group_size) == (16, 8)
    assert cfg.rl.optimizer.lr == 1e-6 and cfg.rl.iterations == 200


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_validates_under_cpu_small(experiment):
    cfg = compose([f"experiment={experiment}", "debug=cpu_small"])
    validate_config(cfg)
    assert cfg.model.name == "tiny" and cfg.model.path is None and cfg.model.dtype == "float32"
    assert cfg.rollout.engine == "hf" and cfg.trainer.accelerator == "cpu"
    assert cfg.env.kwargs.prompt_style == "compact"
    assert cfg.rollout.max_new_tokens == cfg.env.cpu_small.max_new_tokens
    assert cfg.bc.episodes == cfg.env.cpu_small.bc_episodes
    # the tiny model's tokenizer learns the env's own text
    assert list(cfg.model.tiny.corpus_envs) == [cfg.env.name] and cfg.model.tiny.vocab_size == cfg.env.cpu_small.vocab_size


@pytest.mark.parametrize("env", ENVS)
def test_cpu_small_undoes_every_gpu_setting(env):
    """experiment=<m>_<env> debug=cpu_small is exactly algo=<m> env=<env> debug=cpu_small."""
    from omegaconf import OmegaConf

    def plain(overrides):
        c = OmegaConf.to_container(compose(overrides, output_dir="/tmp/arl-same"), resolve=True)
        for key in ("task_name", "tags"):
            c.pop(key)
        return c

    assert plain([f"experiment=gigpo_{env}", "debug=cpu_small"]) == plain(["algo=gigpo", f"env={env}", "debug=cpu_small"])
    assert plain([f"experiment=bc_{env}", "debug=cpu_small", "bc.val_untrained=false", "bc.bootstrap.enabled=false",
                  "bc.dagger.enabled=false", "rl.enabled=true"]) == plain([f"env={env}", "debug=cpu_small"])


@pytest.mark.parametrize("env", ENVS)
def test_cpu_pretrained_is_cpu_small_with_smollm2_and_its_bc_budget(env):
    """debug=cpu_pretrained changes the model and the BC/validation budgets, nothing else of cpu_small."""
    from omegaconf import OmegaConf

    pre = compose([f"experiment=bc_{env}", "debug=cpu_pretrained"])
    validate_config(pre)
    block = pre.env.cpu_pretrained
    assert pre.model.name == "smollm2_135m" and pre.model.path is None and pre.model.dtype == "float32"
    assert (pre.bc.episodes, pre.bc.epochs, pre.bc.batch_size, pre.bc.optimizer.lr) == (block.bc_episodes, 1, 4, 1e-4)
    assert not pre.bc.bootstrap.enabled and not pre.bc.dagger.enabled
    assert (pre.rollout.val_episodes, pre.rollout.max_new_tokens, pre.env.max_turns) == (
        block.val_episodes, block.max_new_tokens, block.max_turns)
    small = OmegaConf.to_container(compose([f"experiment=bc_{env}", "debug=cpu_small"]), resolve=True)
    pre = OmegaConf.to_container(pre, resolve=True)
    changed = {("model",), ("bc",), ("rollout", "val_episodes"), ("rollout", "max_new_tokens"), ("env", "max_turns")}
    for top in ("env", "rollout", "trainer", "algo", "rl"):
        for key in set(small[top]) | set(pre[top]):
            if (top,) not in changed and (top, key) not in changed:
                assert small[top].get(key) == pre[top].get(key), f"{top}.{key}"


def test_bc_experiments_stop_after_behaviour_cloning():
    cfg = compose(["experiment=bc_webshop", "debug=cpu_small"])
    assert cfg.bc.enabled and cfg.bc.bootstrap.enabled and cfg.bc.val_untrained and not cfg.rl.enabled
    bad = compose(["experiment=bc_webshop", "bc.enabled=false"])
    with pytest.raises(ConfigError, match="nothing to do"):
        validate_config(bad)
    with pytest.raises(ConfigError, match="bc.bootstrap.temperature"):
        validate_config(compose(["experiment=bc_webshop", "bc.bootstrap.temperature=0"]))
    with pytest.raises(ConfigError, match=r"bc.val_every=0 must be >= 1"):
        validate_config(compose(["experiment=bc_webshop", "bc.val_every=0"]))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["bc.epochs=-1"], r"bc.epochs=-1 must be >= 0"),
        (["bc.dagger.rounds=0"], r"bc.dagger.rounds=0 must be >= 1"),
        (["bc.dagger.episodes=0"], r"bc.dagger.episodes=0 must be >= 1"),
        (["bc.dagger.temperature=-0.5"], r"bc.dagger.temperature=-0.5 must be >= 0"),
        (["rollout.sample_mode=trajectory"], r"bc.dagger needs rollout.sample_mode=turn"),
    ],
)
def test_dagger_settings_are_validated(overrides, message):
    validate_config(compose(["experiment=bc_sokoban", "bc.epochs=0", "bc.dagger.enabled=true", "bc.dagger.temperature=0"]))
    with pytest.raises(ConfigError, match=message):
        validate_config(compose(["experiment=bc_sokoban", "bc.dagger.enabled=true", *overrides]))


@pytest.mark.parametrize("search", SEARCHES)
def test_every_hparams_search_is_a_multirun_that_validates(search):
    from hydra.core.hydra_config import HydraConfig

    cfg = compose(["experiment=sampo_sokoban", "debug=cpu_small", f"hparams_search={search}"], output_dir="/tmp/x")
    validate_config(cfg)
    hc = HydraConfig.get()
    assert str(hc.mode) == "RunMode.MULTIRUN"
    params = dict(hc.sweeper.params)
    assert "seed" in params and len(str(params["seed"]).split(",")) >= 2
    for key, values in params.items():  # every grid point is a valid config
        for value in str(values).split(","):
            validate_config(compose(["experiment=sampo_sokoban", "debug=cpu_small", f"{key}={value}"], output_dir="/tmp/x"))


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algo_preset_validates(algo):
    validate_config(compose([f"algo={algo}"]))


@pytest.mark.parametrize("debug", DEBUGS)
def test_every_debug_config_validates(debug):
    validate_config(compose([f"debug={debug}"]))


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_a_gpu_rollout_device_without_a_gpu_stops_at_start_up():
    with pytest.raises(ConfigError, match="no GPU"):
        validate_config(compose(["rollout.device=cuda"]))
    validate_config(compose(["rollout.device=cpu"]))
    validate_config(compose(["rollout.device=auto"]))


def test_trainer_gpu_is_one_gpu_in_bf16_autocast():
    cfg = compose(["experiment=bc_alfworld", "debug=cpu_small", "model=smollm2_135m", "trainer=gpu"])
    validate_config(cfg)
    assert (cfg.trainer.accelerator, cfg.trainer.devices, cfg.trainer.precision) == ("gpu", 1, "bf16-mixed")
    assert "strategy" not in cfg.trainer and cfg.rollout.engine == "hf" and cfg.rollout.device == "auto"


def test_default_is_sampo_sokoban_on_tiny():
    cfg = compose()
    assert cfg.algo.name == "sampo" and cfg.algo.loss.name == "gspo"
    assert cfg.algo.advantage.name == "gigpo" and cfg.algo.filter.name == "dapo"
    assert cfg.model.name == "tiny" and cfg.env.name == "sokoban" and cfg.trainer.accelerator == "cpu"


def test_make_train_is_sampo_sokoban_on_the_cpu():
    """`make train` = experiment=sampo_sokoban debug=cpu_small: the budgets docs/results.md measured."""
    makefile = (ROOT / "Makefile").read_text()
    assert "src/train.py experiment=sampo_sokoban debug=cpu_small" in makefile
    cfg = compose(["experiment=sampo_sokoban", "debug=cpu_small"])
    assert cfg.task_name == "sampo_sokoban" and cfg.model.name == "tiny" and cfg.rollout.engine == "hf"
    assert (cfg.rollout.groups_per_step, cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (8, 8, 32)
    assert (cfg.rl.iterations, cfg.rl.val_every, cfg.rl.optimizer.lr) == (30, 10, 1e-4)
    assert (cfg.bc.episodes, cfg.bc.epochs, cfg.bc.optimizer.lr) == (1200, 3, 2e-3)
    assert cfg.rollout.val_episodes == 256 and cfg.env.kwargs.prompt_style == "compact"


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
        ("rollout.device=gpu0", "rollout.device"),
        ("rollout.device=cuda:x", "rollout.device"),
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
    compose(["hparams_search=seeds"], output_dir="/tmp/x")
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    assert str(hc.mode) == "RunMode.MULTIRUN"
    assert hc.sweeper.params["seed"] == "1,2,3"


def test_long_override_lists_get_a_short_unique_run_folder():
    from arl.utils.config import short_dirname

    assert short_dirname("experiment=grpo_sokoban,seed=1") == "experiment=grpo_sokoban,seed=1"
    long_a = ",".join(f"rollout.key_{i}={i}" for i in range(30)) + ",experiment=grpo_sokoban"
    long_b = long_a.replace("grpo", "sapo")
    a, b = short_dirname(long_a), short_dirname(long_b)
    assert len(a.encode()) <= 200 and len(b.encode()) <= 200 and a != b
    assert a.startswith("rollout.key_0=0,") and a[-11] == "~"
    assert short_dirname(long_a) == a  # stable: a resumed sweep finds its folders
    cut = short_dirname("é" * 150)  # 300 bytes: the cut never splits a character
    assert len(cut.encode()) <= 200 and cut.startswith("é" * 94) and cut[-11] == "~"


def test_the_sweep_subdir_goes_through_arl_dirname():
    """The multirun test (slow) runs it for real; here: the resolver, as the config calls it."""
    from omegaconf import OmegaConf

    from arl.utils.config import register_resolvers

    register_resolvers()
    assert "${arl_dirname:${hydra.job.override_dirname}}" in (ROOT / "configs" / "hydra" / "default.yaml").read_text()
    c = OmegaConf.create({"name": "k=v," * 100, "subdir": "${arl_dirname:${name}}"})
    assert len(c.subdir.encode()) <= 200 and c.subdir.startswith("k=v,k=v")
