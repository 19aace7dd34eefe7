"""``src/eval.py`` on a run's checkpoint plays episodes as that run did (``with_run_config``)."""

from omegaconf import OmegaConf

from arl.run.evaluation import with_run_config
from arl_testing import compose


def _configs(tmp_path):
    run = compose(["experiment=bc_alfworld", "debug=cpu_small"], output_dir=str(tmp_path / "run"))
    run_cfg = OmegaConf.to_container(run, resolve=False)  # as the run's .hydra/config.yaml holds it
    evl = compose(["ckpt_path=x", "rollout.val_temperature=0.4"], config_name="eval.yaml", output_dir=str(tmp_path / "e"))
    return OmegaConf.to_container(evl, resolve=True), run_cfg


def test_eval_takes_the_runs_model_env_and_episode_budgets(tmp_path):
    c, run_cfg = _configs(tmp_path)
    assert c["env"]["name"] == "sokoban" and c["rollout"]["max_new_tokens"] == 32  # eval's own defaults
    out = with_run_config(c, run_cfg, ["ckpt_path=x", "rollout.val_temperature=0.4"])
    assert out["env"]["name"] == "alfworld" and out["env"]["kwargs"]["prompt_style"] == "compact"
    assert out["model"]["name"] == "tiny"
    # the ALFWorld answer budget of the run (expert answers take up to 116 tokens), not eval's 32
    assert out["rollout"]["max_new_tokens"] == 128 and out["rollout"]["max_prompt_tokens"] == 2048
    # what is the eval's to choose stays the eval's
    assert out["rollout"]["val_temperature"] == 0.4 and out["rollout"]["val_episodes"] == c["rollout"]["val_episodes"]
    assert out["ckpt_path"] == "x" and out["seed"] == c["seed"]


def test_a_key_added_since_the_run_takes_todays_value(tmp_path):
    """An archived run's model section predates ``model.logit_chunk_tokens``: eval keeps every key
    the run had and takes the new key from its own config, and the result validates."""
    from arl.models.config import ModelSettings
    from arl.utils.schema import problems

    c, run_cfg = _configs(tmp_path)
    del run_cfg["model"]["logit_chunk_tokens"]
    run_cfg["model"]["dtype"] = "float32"
    out = with_run_config(c, run_cfg, [])
    assert out["model"]["logit_chunk_tokens"] == c["model"]["logit_chunk_tokens"]
    assert problems(out["model"], ModelSettings, "model") == []
    assert problems(run_cfg["model"], ModelSettings, "model")  # the run's own section alone no longer validates
    assert out["model"]["dtype"] == "float32" and out["model"].keys() == run_cfg["model"].keys() | {"logit_chunk_tokens"}


def test_command_line_still_wins_over_the_run(tmp_path):
    c, run_cfg = _configs(tmp_path)
    out = with_run_config(c, run_cfg, ["rollout.max_new_tokens=64", "env.max_turns=7", "rollout.val_episodes=3"])
    assert out["rollout"]["max_new_tokens"] == 64 and out["env"]["max_turns"] == 7
    # only the run's keys are re-applied; val_episodes is the eval's own (composition applies it), so
    # the "3" here, absent from the composed eval config, is left alone
    assert out["rollout"]["val_episodes"] == c["rollout"]["val_episodes"]


def test_command_line_values_read_as_hydra_reads_them(tmp_path):
    """A dict written the Hydra way (no space after the colon) is a dict, merged into the run's (a
    YAML reading made it the key 'valid_seen:512'); a group choice leaves the run's section whole."""
    c, run_cfg = _configs(tmp_path)
    out = with_run_config(c, run_cfg, ["env.kwargs.num_games={valid_seen:512}", "env=alfworld"])
    assert out["env"]["kwargs"]["num_games"] == {"train": 20000, "valid_seen": 512}
    assert out["env"]["kwargs"]["notes"] and out["env"]["history_window"] == 12  # the run's env, not env=alfworld's


def _loop(tiny):
    from arl.agent.loop import AgentLoop, LoopOptions
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    return AgentLoop(HFEngine(model, tok), tok, "sokoban", {"prompt_style": "compact", "max_steps": 3},
                     LoopOptions(history_window=1, max_turns=3))


def test_sampled_validation_is_reproducible_named_and_leaves_the_training_stream_alone(tiny, tmp_path):
    """The paper's validation sampling (T 0.6, top-p 0.95, top-k 20) draws from a generator of its
    own: validating twice gives the same episodes, the global RNG is where it was, the metrics
    come as val/* and val_sampled/* (val_greedy/* for greedy)."""
    import torch

    from arl.run.evaluation import run_validation

    rollout = OmegaConf.to_container(compose(["rollout.val_episodes=6", "rollout.max_new_tokens=12"]).rollout, resolve=True)
    loop = _loop(tiny)
    runs = {}
    try:
        torch.manual_seed(0)
        state = torch.get_rng_state()
        for name, seed, temperature in (("first", 3, 0.6), ("again", 3, 0.6), ("other", 4, 0.6), ("greedy", 3, 0.0)):
            path = tmp_path / f"{name}.jsonl"
            metrics = run_validation(loop, {**rollout, "val_temperature": temperature}, path, seed=seed)
            runs[name] = (metrics, path.read_text())
            assert torch.equal(torch.get_rng_state(), state), name
    finally:
        loop.close()
    assert runs["first"] == runs["again"]
    assert runs["first"][1] != runs["other"][1]  # another validation seed samples other answers
    first, greedy = runs["first"][0], runs["greedy"][0]
    assert first["val_sampled/success_rate"] == first["val/success_rate"] and not any(k.startswith("val_greedy/") for k in first)
    assert greedy["val_greedy/valid_action_ratio"] == greedy["val/valid_action_ratio"]
    assert not any(k.startswith("val_sampled/") for k in greedy)


def test_success_by_type_sums_the_ranks_counts():
    from arl.agent.metrics import success_by_type

    rank0 = {"heat": (1, 2), "cool": (0, 1)}
    rank1 = {"heat": (2, 2), "look": (1, 4)}
    assert success_by_type([rank0, rank1]) == {
        "val/success_rate/cool": 0.0, "val/success_rate/heat": 0.75, "val/success_rate/look": 0.25}
    assert success_by_type([{"sokoban": (3, 4)}], prefix="rollout/") == {}  # one type: the overall rate says it
    assert success_by_type([]) == {}
