"""The typed run groups (``env``, ``rollout``, ``rl``, ``bc``): one definition per key, checked at
start-up, read without casts or second defaults by the orchestration room."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from arl.models.config import ModelSettings
from arl.run.settings import GROUPS, RolloutSettings, env_settings, rollout_settings, run_settings
from arl.utils import schema
from arl.utils.config import ConfigError, container
from arl_testing import ROOT, compose

RUN_ROOM = ROOT / "src" / "arl" / "run"
RUN_KEYS = {path.rsplit(".", 1)[-1] for cls in GROUPS.values() for path, _ in schema.keys(cls)}
MODEL_KEYS = {path.rsplit(".", 1)[-1] for path, _ in schema.keys(ModelSettings)}
# the run room reads every group; the loaders and the memory plan (a room below run, which reads the
# rollout and rl groups untyped) read the model group
READERS = [(p, RUN_KEYS) for p in sorted(RUN_ROOM.glob("*.py"))] + [
    (p, MODEL_KEYS) for p in sorted((ROOT / "src" / "arl" / "models").glob("*.py")) + [ROOT / "src" / "arl" / "plan" / "__init__.py"]]


def test_the_default_config_is_typed():
    run = run_settings(container(compose([])))
    assert isinstance(run.rl.ppo_epochs, int) and not isinstance(run.rl.ppo_epochs, bool)
    assert isinstance(run.rollout.step_timeout, float) and run.rollout.step_timeout == 60.0  # yaml writes 60
    assert run.rollout.stop == ("</action>",)
    assert run.rollout.hf_cache == "static" and run.rollout.vllm is None  # rollout=hf has no vllm block
    assert run.bc.dagger.temperature == 0.4 and isinstance(run.bc.bootstrap.min_return, float)
    assert run.rl.optimizer["_target_"] == "torch.optim.AdamW"
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.rl.iterations = 3  # type: ignore[misc]


def test_the_vllm_variant_has_its_block_and_no_kv_cache_key():
    r = run_settings(container(compose(["rollout=vllm"]))).rollout
    assert r.hf_cache is None and r.vllm.gpu_memory_utilization == 0.5 and r.vllm.passthrough == {}


def test_a_dictconfig_and_its_containers_give_the_same_settings():
    cfg = compose(["rollout.temperature=1", "rl.grad_clip=2"])
    assert run_settings(cfg) == run_settings(container(cfg))
    assert run_settings(cfg).rollout.temperature == 1.0 and isinstance(run_settings(cfg).rollout.temperature, float)


def test_one_error_names_every_bad_key():
    c = container(compose([]))
    c["rl"]["iteratons"] = 5  # a typo
    c["rl"]["ppo_epochs"] = 0
    del c["rollout"]["group_size"]
    c["bc"]["dagger"]["enabled"] = "yes"
    c["env"]["history_window"] = 1.5
    with pytest.raises(ConfigError) as err:
        run_settings(c)
    message = str(err.value)
    for expected in (
        "rl.iteratons is not a known key; valid keys: enabled, iterations,",
        "rl.ppo_epochs=0 is out of range: must be >= 1",
        "rollout.group_size is missing",
        "bc.dagger.enabled='yes' must be true or false",
        "env.history_window=1.5 must be an integer",
    ):
        assert expected in message, (expected, message)


def test_every_settings_key_is_set_by_the_yaml_of_every_env():
    """The yaml holds each key's one value: a key the schema requires is in every composed config
    (an absent-able key only in its variant)."""
    for env in ("sokoban", "alfworld", "webshop", "math_tool"):
        c = container(compose([f"env={env}"]))
        for name, cls in GROUPS.items():
            for f in dataclasses.fields(cls):
                if not f.metadata.get("may_be_absent"):
                    assert f.name in c[name], f"{name}.{f.name} is not set for env={env}"


def test_the_settings_functions_take_a_section_or_a_mapping():
    c = container(compose(["rollout.val_episodes=3"]))
    typed = rollout_settings(c["rollout"])
    assert rollout_settings(typed) is typed
    assert isinstance(typed, RolloutSettings) and typed.val_episodes == 3
    assert env_settings(c["env"]).name == "sokoban"
    with pytest.raises(ConfigError, match="invalid rollout config"):
        rollout_settings({**c["rollout"], "engine": "sglang"})


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            yield node


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@pytest.mark.parametrize("path, keys", READERS, ids=[f"{p.parent.name}/{p.name}" for p, _ in READERS])
def test_the_readers_neither_default_nor_cast_a_run_key(path: Path, keys: set[str]):
    """No ``x.get("<run key>", default)`` (a second default) and no ``int(x["<run key>"])`` (a cast
    the typed section already made) in ``src/arl/run``, ``src/arl/models`` or the memory plan."""
    for call in _calls(path):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and len(call.args) == 2:
            key = _literal(call.args[0])
            assert key not in keys, f"{path.name}:{call.lineno}: .get({key!r}, default) defaults a run key"
        if isinstance(func, ast.Name) and func.id in ("int", "float", "bool", "str") and call.args:
            arg = call.args[0]
            if isinstance(arg, ast.Subscript):
                key = _literal(arg.slice)
                assert key not in keys, f"{path.name}:{call.lineno}: {func.id}(...[{key!r}]) casts a run key"


def test_the_whole_training_config_is_one_typed_object(tmp_path):
    """validate_config's RunSettings holds every section the run reads, the horizon resolved; the
    composed config rides along for the records; a bad top-level key is named with the others."""
    run = run_settings(compose(["rollout.max_new_tokens=24", "seed=7"], output_dir=str(tmp_path / "a")))
    assert run.algo.loss.horizon == 24 and run.seed == 7 and run.task_name == "train"
    assert run.paths.output_dir == str(tmp_path / "a") and run.config["seed"] == 7
    assert run.logger["tensorboard"]["save_dir"] == str(tmp_path / "a" / "tensorboard")
    with pytest.raises(ConfigError, match=r"rl\.iterations is missing\n  - seed='x' must be an integer"):
        c = container(compose([]))
        del c["rl"]["iterations"]
        run_settings({**c, "seed": "x"})


def test_a_resume_in_place_relocates_every_path_under_the_run_folder(tmp_path):
    """RunSettings.relocated: the values that named a path under the old run folder (the logger's
    save_dir, the checkpoint and episode folders, the trainer's root) name it under the new one;
    nothing else moves."""
    old, new = tmp_path / "a", tmp_path / "b"
    run = run_settings(compose([], output_dir=str(old)))
    moved = run.relocated(str(new))
    assert moved.paths.output_dir == str(new) and moved.paths.log_dir == run.paths.log_dir
    assert moved.logger["tensorboard"]["save_dir"] == str(new / "tensorboard")
    assert moved.callbacks["last_checkpoint"]["dirpath"] == str(new / "checkpoints")
    assert moved.config["paths"]["output_dir"] == str(new)
    assert moved.trainer["default_root_dir"] == str(new)
    assert dataclasses.replace(moved, paths=run.paths, logger=run.logger, callbacks=run.callbacks, trainer=run.trainer) == run
    sibling = run_settings({**container(compose([], output_dir=str(old))), "task_name": str(old) + "_other"})
    assert sibling.relocated(str(new)).task_name == str(old) + "_other"  # a prefix of a name is not a folder


def test_a_renamed_key_given_by_its_old_name_stops_at_start_up_naming_the_new_one(tmp_path):
    """rollout.groups_per_step is rollout.tasks_per_iteration, algo.entropy_coeff is algo.entropy_coef:
    a config file or an override that still gives the old name stops the run with the new one named
    (on the command line before Hydra, which would refuse it as unknown without saying so); archived
    runs' configs are read under either name."""
    import subprocess
    import sys

    from arl.utils.config import lookup, renamed_key_problems, renamed_override_problems

    with pytest.raises(ConfigError, match="rollout.groups_per_step was renamed rollout.tasks_per_iteration"):
        run_settings(compose(["+rollout.groups_per_step=4"]))
    assert renamed_key_problems({"algo": {"entropy_coeff": 0.0}, "rollout": {"tasks_per_iteration": 4}}) == [
        "algo.entropy_coeff was renamed algo.entropy_coef: give algo.entropy_coef instead"]
    assert renamed_override_problems(["seed=1", "+rollout.groups_per_step=4,8", "algo=grpo"]) == [
        "rollout.groups_per_step was renamed rollout.tasks_per_iteration: give rollout.tasks_per_iteration instead"]
    assert renamed_override_problems(["rollout.tasks_per_iteration=4", "rollout.groups_per_step_x=1"]) == []
    assert lookup({"rollout": {"groups_per_step": 4}}, "rollout.tasks_per_iteration") == 4  # an archived run
    assert lookup({"rollout": {"tasks_per_iteration": 8, "groups_per_step": 4}}, "rollout.tasks_per_iteration") == 8
    assert lookup({"rollout": {}}, "rollout.tasks_per_iteration") is None
    for script in ("src/train.py", "src/plan.py"):
        out = subprocess.run([sys.executable, str(ROOT / script), "rollout.groups_per_step=4"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=120)
        assert out.returncode == 2 and "renamed rollout.tasks_per_iteration" in out.stderr, (script, out.stderr[-500:])
