"""``env=mix`` through the real pipeline: the embedded tiny model and tokenizer, real Sokoban and math_tool
envs, behaviour cloning from both experts, real Lightning Trainers; per-member rollout and validation metrics
are logged, every group plays one member. The killed-run resume of a curriculum run is a long test."""

from __future__ import annotations

import json
import signal

import pytest

import scale_helpers as sh
from arl.agent.mix import MixLoop
from arl_testing import compose

OVERRIDES = [
    "env=mix", "debug=smoke", "bc.episodes=16", "bc.bootstrap.enabled=false", "rl.iterations=2", "rl.val_every=1",
    "rollout.val_episodes=2", "rollout.max_new_tokens=16", "env.members.math_tool.max_turns=2", "algo.filter.name=none",
]


@pytest.fixture(scope="module")
def mix_run(tmp_path_factory):
    from arl.run.pipeline import train

    out = tmp_path_factory.mktemp("mix")
    played: list[list] = []
    original = MixLoop.run

    def recording(self, tasks, *args, **kwargs):
        episodes = original(self, tasks, *args, **kwargs)
        played.append(episodes)
        return episodes

    MixLoop.run = recording
    try:
        results = train(compose(OVERRIDES, output_dir=str(out)))
    finally:
        MixLoop.run = original
    return out, results, played


def test_each_group_plays_one_member_and_both_members_train(mix_run):
    _, _, played = mix_run
    assert len(played) == 2  # the two iterations' rollouts (validation plays the members' own loops)
    for episodes in played:
        members: dict[int, set[str]] = {}
        for e in episodes:
            members.setdefault(e.group_id, set()).add(e.env_name)
        assert all(len(names) == 1 for names in members.values()), members
    assert {e.env_name for episodes in played for e in episodes} <= {"sokoban", "math_tool"}


def test_per_member_rollout_and_validation_metrics_are_logged(mix_run):
    out, results, played = mix_run
    tb = sh.tb_scalars(out / "tensorboard" / "rl")
    for member in ("sokoban", "math_tool"):
        for measure in ("success_rate", "return_mean", "valid_action_ratio", "episodes"):
            assert [s for s, _ in tb[f"val/{member}/{measure}"]] == [0, 1, 2], (member, measure)
        drawn = [sum(e.env_name == member for e in episodes) for episodes in played]
        assert [v for _, v in tb[f"rollout/{member}/episodes"]] == drawn
        assert all(v == 2 for _, v in tb[f"val/{member}/episodes"])  # rollout.val_episodes per member
    for key in ("rollout/sokoban/success_rate", "rollout/sokoban/valid_action_ratio", "rollout/sokoban/return_mean"):
        assert key in tb or not any(e.env_name == "sokoban" for eps in played for e in eps)
    val = results["val_after_rl"]
    members = [val["val/sokoban/success_rate"], val["val/math_tool/success_rate"]]
    assert val["val/success_rate"] == pytest.approx(sum(members) / 2)  # the mean over the members
    assert "curriculum/stage" not in tb  # a fixed mix


def test_behaviour_cloning_collects_both_experts(mix_run):
    out, results, _ = mix_run
    lines = (out / "bc_dataset.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["env"] == "mix"
    assert {json.loads(line)["env_name"] for line in lines[1:]} == {"sokoban", "math_tool"}
    assert results["bc/expert_episodes"] == 16.0
    records = [json.loads(line) for line in (out / "val_episodes" / "iter2.jsonl").read_text().splitlines()]
    assert sorted(r["env"] for r in records) == ["math_tool", "math_tool", "sokoban", "sokoban"]


@pytest.mark.long  # two processes (over a minute of a worker): make test-long, run by CI after make test
def test_a_mix_under_ddp_validates_every_member_over_both_ranks(tmp_path, tiny_path):
    """trainer=ddp: each rank rolls out its share of the groups and of every member's validation episodes; the
    logged values are global (each member counts its whole set at every validation) and rank 0 writes every
    member's episodes of a validation once."""
    from arl.datamodules.rollout_datamodule import val_task_seeds

    mine = ["trainer=ddp", "bc.enabled=false", "rollout.val_episodes=4", "rollout.tasks_per_iteration=2",
            "rollout.group_size=2"]
    kept = [o for o in OVERRIDES if o.split("=")[0] not in {m.split("=")[0] for m in mine} and not o.startswith("bc.")]
    run_dir, _ = sh.train_run([*mine, *kept], tmp_path)
    tb = sh.tb_scalars(run_dir / "tensorboard" / "rl")
    for member in ("sokoban", "math_tool"):
        assert [(s, v) for s, v in tb[f"val/{member}/episodes"]] == [(0, 4.0), (1, 4.0), (2, 4.0)], member
    assert [v for _, v in tb["rollout/episodes"]] == [4.0, 4.0]  # 2 groups x 2 over both ranks
    for step in (0, 1, 2):
        rows = [json.loads(line) for line in (run_dir / "val_episodes" / f"iter{step}.jsonl").read_text().splitlines()]
        for member in ("sokoban", "math_tool"):
            assert sorted(r["seed"] for r in rows if r["env"] == member) == val_task_seeds(4), (step, member)


CURRICULUM = ("env.curriculum={stages: [{weights: {sokoban_6x6: 1, sokoban_7x7: 0}, "
              "metric: val/sokoban_6x6/valid_action_ratio, advance_above: 0.0, patience: 2}, "
              "{weights: {sokoban_6x6: 0, sokoban_7x7: 1}, until_iteration: 3}, {weights: {sokoban_6x6: 1, sokoban_7x7: 1}}]}")
RESUME = ["env=sokoban_levels", CURRICULUM, "debug=smoke", "bc.enabled=false", "rl.iterations=4", "rl.val_every=1",
          "rollout.val_episodes=2", "rollout.max_new_tokens=8", "env.members.sokoban_6x6.max_turns=2",
          "env.members.sokoban_7x7.max_turns=2", "algo.filter.name=none"]


@pytest.mark.long
def test_a_killed_curriculum_run_resumes_with_the_same_stages_and_batches(tmp_path, tiny_path):
    """Straight 4 iterations == killed in iteration 3 (after the validation-driven move at iteration 1, before the
    iteration-driven one at 3) and resumed: the same stages, rollouts and final weights."""
    import test_resume as tr

    from arl.run.pipeline import train

    straight_dir = tmp_path / "straight"
    with sh.one_thread():  # as the subprocesses: the same float arithmetic, bit for bit
        train(compose(RESUME, output_dir=str(straight_dir)))
    log_dir = tmp_path / "killed"
    base = [*RESUME, "task_name=mix_resume", f"paths.log_dir={log_dir}"]
    killed = _cli([*base, "+callbacks.kill._target_=scale_helpers.KillAt", "+callbacks.kill.iteration=3"])
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (run_dir,) = (log_dir / "mix_resume" / "runs").iterdir()
    resumed = _cli([*base, "ckpt_path=last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight, after = sh.tb_scalars(straight_dir / "tensorboard" / "rl"), sh.tb_scalars(run_dir / "tensorboard" / "rl")
    # validations 0 and 1 pass the gate (patience 2): stage 1 from iteration 1; stage 2 from iteration 3
    assert [v for _, v in straight["curriculum/stage"]] == [0, 1, 1, 2] == [v for _, v in after["curriculum/stage"]]
    for tag in ("rollout/sokoban_6x6/episodes", "rollout/sokoban_7x7/episodes", "rollout/return_mean",
                "rollout/response_len_mean", "val/sokoban_7x7/return_mean", "actor/pg_loss"):
        assert [s for s, _ in after[tag]] == [s for s, _ in straight[tag]], tag
        assert [v for _, v in after[tag]] == pytest.approx([v for _, v in straight[tag]], abs=1e-6), tag
    diff = max((tr._weights(straight_dir)[k] - w).abs().max().item() for k, w in tr._weights(run_dir).items())
    assert diff <= tr.EXACT


def _cli(args: list[str]):
    import subprocess
    import sys

    from arl_testing import ROOT

    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *args], capture_output=True, text=True,
                          timeout=900, env=sh.subprocess_env())
