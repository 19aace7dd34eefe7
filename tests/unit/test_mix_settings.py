"""``env=mix``: the config forms compose, the mix section is checked at start-up with messages naming the
key, and the curriculum study's two arms validate the same sets at equal optimiser steps."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from arl.run.checks import validate_config
from arl.run.settings import EnvSettings, MixSettings
from arl.utils.config import ConfigError
from arl_testing import CONFIG_DIR, compose

MIXES = ["mix", "sokoban_levels"]  # env group options that are mixes
STAGES = ("env.curriculum={stages: [{weights: {sokoban: 1, math_tool: 0}, metric: val/sokoban/success_rate, "
          "advance_above: 0.5, patience: 2, retreat_below: 0.2}, {weights: {sokoban: 0, math_tool: 1}}]}")


def test_the_default_mix_is_sokoban_and_math_tool_half_and_half():
    run = validate_config(compose(["env=mix"]))
    assert isinstance(run.env, MixSettings) and run.env.name == "mix"
    assert list(run.env.members) == ["sokoban", "math_tool"] and run.env.start_weights() == {"sokoban": 0.5, "math_tool": 0.5}
    sections = run.env.sections()
    assert sections["sokoban"] == EnvSettings(name="sokoban", history_window=1, show_observations=False, max_turns=10,
                                              kwargs=dict(compose(["env=sokoban"]).env.kwargs))
    assert sections["math_tool"].kwargs["tool_format"] == "text" and sections["math_tool"].max_turns == 5
    assert run.env.max_turns == 10 and run.env.curriculum is None


def test_the_documented_override_forms_compose():
    weighted = validate_config(compose(["env=mix", "env.members.sokoban.weight=0.7", "env.members.math_tool.weight=0.3"]))
    assert weighted.env.start_weights() == {"sokoban": 0.7, "math_tool": 0.3}
    added = validate_config(compose(["env=mix", "+env@env.members.sokoban_7x7=sokoban", "+env.members.sokoban_7x7.weight=0.2",
                                     "env.members.sokoban_7x7.kwargs.dim_room=[7,7]"]))
    assert added.env.sections()["sokoban_7x7"].kwargs["dim_room"] == [7, 7] and added.env.members["sokoban_7x7"].weight == 0.2
    removed = validate_config(compose(["env=mix", "~env.members.math_tool"]))
    assert list(removed.env.members) == ["sokoban"]
    levels = validate_config(compose(["env=sokoban_levels"])).env.sections()
    assert (levels["sokoban_6x6"].kwargs["dim_room"], levels["sokoban_7x7"].kwargs["dim_room"]) == ([6, 6], [7, 7])
    assert (levels["sokoban_6x6"].kwargs["num_boxes"], levels["sokoban_7x7"].kwargs["num_boxes"]) == (1, 2)
    assert validate_config(compose(["env=mix", "+env.members.sokoban.val_episodes=8"])).env.members["sokoban"].val_episodes == 8


@pytest.mark.parametrize("env", MIXES)
def test_cpu_small_gives_every_member_its_prompt_style_and_the_tokenizer_every_members_text(env):
    cfg = compose([f"env={env}", "debug=cpu_small"])
    run = validate_config(cfg)
    assert all(s.kwargs["prompt_style"] == "compact" for s in run.env.sections().values())
    assert list(cfg.model.tiny.corpus_envs) == (["sokoban", "math_tool"] if env == "mix" else ["sokoban"])
    assert list(compose(["env=sokoban", "debug=cpu_small"]).model.tiny.corpus_envs) == ["sokoban"]
    # the mix's budgets, and no key set by both the debug config and its budget (the debug config would win)
    budget = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "debug" / "budget" / f"cpu_small_{env}.yaml"))
    debug = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "debug" / "cpu_small.yaml"))
    assert not set(_leaves(budget)) & set(_leaves(debug))
    assert cfg.rollout.max_new_tokens == budget["rollout"]["max_new_tokens"]


def _leaves(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*prefix, k))
    else:
        yield prefix


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env.members.sokoban.weight=-1"], r"env.members.sokoban.weight=-1 is out of range: must be >= 0"),
        (["env.members.sokoban.weight=0", "env.members.math_tool.weight=0"], r"env.members.\*.weight are all 0"),
        (["env.members.sokoban.name=sokobn"], r"env.members.sokoban.name='sokobn' is not valid; valid choices: "),
        (["env.members.sokoban.name=mix"], r"a member cannot be a mix itself"),
        (["env.members.sokoban.name=program"], r"a gateway env .* cannot be a member of a mix"),
        (["env.members.sokoban.history_window=-1"], r"env.members.sokoban.history_window=-1 is out of range"),
        (["+env.members.sokoban.colour=red"], r"env.members.sokoban.colour is not a known key"),
        (["+env.max_turns=3"], r"env.max_turns is not a known key; valid keys: name, kwargs, members, curriculum"),
        (["+env@env.members.x=sokoban"], r"env.members.x.weight is missing"),
        (["+env.members.sokoban.val_episodes=0"], r"env.members.sokoban.val_episodes=0 is out of range"),
        (["env.members.math_tool.name=gym", "+env.members.math_tool.kwargs.id=CartPole-v1"],
         r"env.members.math_tool.name=gym has no scripted expert"),
        (["bc.dagger.enabled=true"], r"bc.dagger with env=mix"),
        ([STAGES, "rl.max_staleness=0"], r"env.curriculum advanced by a validation measure with rl.max_staleness=0"),
    ],
)
def test_a_bad_mix_stops_at_start_up_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(compose(["env=mix", *overrides]))


def test_a_member_without_an_expert_may_play_when_nothing_clones_it():
    validate_config(compose(["env=mix", "env.members.math_tool.name=gym", "+env.members.math_tool.kwargs.id=x",
                             "env.members.math_tool.weight=0"]))


def test_a_curriculum_section_is_checked_against_the_members():
    run = validate_config(compose(["env=mix", STAGES]))
    (first, last) = run.env.curriculum
    assert (first.metric, first.advance_above, first.patience, first.retreat_below) == ("val/sokoban/success_rate", 0.5, 2, 0.2)
    assert run.env.start_weights() == {"sokoban": 1.0, "math_tool": 0.0} and last.metric is None
    timed = ("env.curriculum={stages: [{weights: {sokoban: 1}, until_iteration: 5}, {weights: {math_tool: 1}}]}")
    validate_config(compose(["env=mix", timed, "rl.max_staleness=0"]))  # an iteration schedule is exact asynchronously
    bad = {
        "{stages: [{weights: {sokoban: 1}}]}": "a list of two stages or more",
        "{stages: [{weights: {sokoban: 1}}, {weights: {math_tool: 1}}]}": "needs exactly one way to the next stage",
        "{stages: [{weights: {sokoban: 1}, until_iteration: 3, metric: val/success_rate, advance_above: 0.5}, "
        "{weights: {math_tool: 1}}]}": "needs exactly one way",
        "{stages: [{weights: {sokoban: 1}, metric: val/webshop/success_rate, advance_above: 0.5}, {weights: {math_tool: 1}}]}":
            "is not a validation measure of this mix",
        "{stages: [{weights: {sokoban: 1}, metric: val/sokoban/success, advance_above: 0.5}, {weights: {math_tool: 1}}]}":
            "is not a validation measure of this mix",
        "{stages: [{weights: {sokoban: 1}, metric: val/sokoban/success_rate}, {weights: {math_tool: 1}}]}":
            r"advance_above=None must be a number",
        "{stages: [{weights: {sokoban: 1}, metric: val/sokoban/success_rate, advance_above: 0.5, retreat_below: 0.5}, "
        "{weights: {math_tool: 1}}]}": "must be a number below advance_above",
        "{stages: [{weights: {sokoban: 1}, metric: val/sokoban/success_rate, advance_above: 0.5, patience: 0}, "
        "{weights: {math_tool: 1}}]}": r"patience=0 must be an integer >= 1",
        "{stages: [{weights: {sokoban: 1}, until_iteration: 4, patience: 2}, {weights: {math_tool: 1}}]}":
            "patience only goes with metric",
        "{stages: [{weights: {sokoban: 1}, until_iteration: 4}, {weights: {math_tool: 1}, until_iteration: 4}, "
        "{weights: {sokoban: 1}}]}": "must come after the earlier stage's 4",
        "{stages: [{weights: {sokoban: 1}, until_iteration: 4}, {weights: {math_tool: 1}, until_iteration: 9}]}":
            "the last stage has no next stage",
        "{stages: [{weights: {sokoban: 0}, until_iteration: 4}, {weights: {math_tool: 1}}]}": "weights are all 0",
        "{stages: [{weights: {sokoban: 1, alfworld: 1}, until_iteration: 4}, {weights: {math_tool: 1}}]}":
            "weights.alfworld is not a member",
        "{stages: [{weights: {sokoban: 1}, until_iteration: 4, speed: 2}, {weights: {math_tool: 1}}]}":
            "stages.0.speed is not a known key",
    }
    for section, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            validate_config(compose(["env=mix", f"env.curriculum={section}"]))


@pytest.mark.parametrize("debug", [None, "cpu_small"])
def test_the_curriculum_study_arms_validate_the_same_sets_at_equal_optimiser_steps(debug):
    extra = [f"debug={debug}"] if debug else []
    curriculum = compose(["experiment=curriculum_sokoban", *extra])
    control = compose(["experiment=curriculum_sokoban_control", *extra])
    cur, ctl = validate_config(curriculum), validate_config(control)
    assert cur.env.sections() == ctl.env.sections()  # the same members: the same held-out games under the same names
    assert [m.val_episodes for m in cur.env.members.values()] == [m.val_episodes for m in ctl.env.members.values()]
    assert cur.rollout == ctl.rollout and cur.rl == ctl.rl and cur.algo == ctl.algo  # the same optimiser steps
    assert cur.env.start_weights() == {"sokoban_6x6": 1.0, "sokoban_7x7": 0.0}
    assert [s.weights for s in cur.env.curriculum] == [{"sokoban_6x6": 1.0, "sokoban_7x7": 0.0},
                                                      {"sokoban_6x6": 0.0, "sokoban_7x7": 1.0}]
    assert cur.env.curriculum[0].metric == "val/sokoban_6x6/success_rate"
    assert ctl.env.curriculum is None and ctl.env.start_weights() == {"sokoban_6x6": 0.0, "sokoban_7x7": 1.0}
    if debug is None:  # the paper's GPU scale, as experiment=sokoban
        assert cur.model.path == "Qwen/Qwen3-4B" and cur.rl.iterations == 200
    else:
        assert cur.model.name == "tiny" and cur.rollout.max_new_tokens == 32


def test_eval_validates_a_mix_run_with_its_own_env_section(tmp_path):
    """``src/eval.py`` on a mix run's checkpoint takes the run's mix section whole (the eval's own single-env keys
    do not join it) and types it as a mix; a member's key given on the command line still wins."""
    from arl.run.evaluation import with_run_config
    from arl.run.settings import eval_settings

    run_cfg = OmegaConf.to_container(compose(["env=mix", "debug=cpu_small"], output_dir=str(tmp_path / "r")), resolve=False)
    evl = OmegaConf.to_container(compose(["ckpt_path=x"], config_name="eval.yaml", output_dir=str(tmp_path / "e")),
                                 resolve=True)
    out = with_run_config(evl, run_cfg, ["ckpt_path=x", "env.members.math_tool.max_turns=3"])
    ev = eval_settings(out)
    assert isinstance(ev.env, MixSettings) and list(ev.env.members) == ["sokoban", "math_tool"]
    assert ev.env.members["math_tool"].max_turns == 3 and ev.env.sections()["sokoban"].kwargs["prompt_style"] == "compact"
