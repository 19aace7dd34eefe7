"""The rollout DataModule over a mix: per-member rollout metrics, groups that stay in one member, the
curriculum fed by the module's validations and logged every iteration, its state across a resume, member
validation batches and the per-member validation values (overall: the mean over the members)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from arl.agent.loop import RolloutStats
from arl.agent.mix import Member, MixLoop
from arl.agent.records import Episode, Turn
from arl.datamodules.batches import ValidationBatch, member_values
from arl.datamodules.curriculum import Curriculum, Stage
from arl.datamodules.rollout_datamodule import IterationPlan, RolloutDataModule, ValidationPlan
from arl.rollout.engine import SamplingParams

PARAMS = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, stop=())


class _MemberLoop:
    """An env that wins every episode of ``wins`` and no other (one valid turn each, return = won)."""

    sample_mode = "turn"
    engine = tokenizer = None

    def __init__(self, name: str, wins: bool, graded: bool = False):
        self.env_name = self.label = name
        self.wins = wins
        self.pool = SimpleNamespace(restarts=1, n_workers=0)
        self.spec = SimpleNamespace(graded=graded)
        self.last_stats = RolloutStats()
        self.calls: list[list[int]] = []

    def run(self, tasks, group_size, params, first_episode_id=0, teacher=None):
        self.calls.append([t.seed for t in tasks])
        self.last_stats = RolloutStats(generated_tokens=2, env_steps=len(tasks) * group_size, generate_seconds=1.0,
                                       env_seconds=1.0)
        out = []
        for i, task in enumerate(tasks):
            for k in range(group_size):
                turn = Turn([1, 2], [3], [0.0], "a", "a", True, "", float(self.wins), True, 0)
                out.append(Episode(task.group_id, first_episode_id + i * group_size + k, task.seed, self.label,
                                   self.label, [turn], won=self.wins, score=0.5))
        return out

    def close(self):
        pass


def _mix(weights=None) -> MixLoop:
    members = [Member("easy", _MemberLoop("sokoban", True)), Member("hard", _MemberLoop("sokoban", False), val_episodes=3)]
    return MixLoop(members, weights or {"easy": 0.5, "hard": 0.5})


def _dm(loop, iterations=6) -> RolloutDataModule:
    return RolloutDataModule(loop, IterationPlan(iterations, 8, 2, PARAMS), ValidationPlan(PARAMS, episodes=5, batch_size=4),
                             seed=3)


def _attach(dm: RolloutDataModule, last_val: dict[str, float], at: int | None) -> SimpleNamespace:
    module = SimpleNamespace(last_val=last_val, last_val_iteration=at)
    dm.trainer = SimpleNamespace(lightning_module=module, global_rank=0, world_size=1)
    return module


def test_rollout_metrics_per_member_and_groups_in_one_member():
    loop = _mix()
    dm = _dm(loop)
    batch = dm.next_train_batch()
    m = batch.metrics
    easy, hard = m["rollout/easy/episodes"], m["rollout/hard/episodes"]
    assert easy + hard == m["rollout/episodes"] == 16 and easy > 0 and hard > 0
    assert (m["rollout/easy/success_rate"], m["rollout/hard/success_rate"]) == (1.0, 0.0)
    assert m["rollout/success_rate"] == easy / 16 and m["rollout/easy/return_mean"] == 1.0
    assert m["rollout/easy/valid_action_ratio"] == 1.0 and m["rollout/env_worker_restarts"] == 2
    assert "curriculum/stage" not in m  # a fixed mix
    groups: dict[int, set[int]] = {}
    for g, e in zip(batch.turns["group_id"].tolist(), batch.turns["episode_return"].tolist()):
        groups.setdefault(g, set()).add(e)
    assert len(groups) == 8 and all(len(returns) == 1 for returns in groups.values())  # one member's outcome a group
    assert sorted(batch.turns["episode_id"].tolist()) == list(range(16))


def test_the_curriculum_follows_the_modules_validations_and_is_logged():
    loop = _mix()
    dm = _dm(loop)
    stages = [Stage({"easy": 1.0, "hard": 0.0}, metric="val/easy/success_rate", advance_above=0.5, patience=2),
              Stage({"easy": 0.0, "hard": 1.0})]
    dm.use_curriculum(Curriculum(stages))
    module = _attach(dm, {"val/easy/success_rate": 0.9}, at=0)  # the start validation
    log = []
    for value, at in [(0.9, 0), (0.9, 0), (0.9, 2), (0.9, 2), (0.9, 4)]:
        module.last_val, module.last_val_iteration = {"val/easy/success_rate": value}, at
        m = dm.next_train_batch().metrics
        log.append((m["curriculum/stage"], m["curriculum/weight/easy"], m["rollout/easy/episodes"], m["rollout/hard/episodes"]))
    # validation 0 counts once (it is seen by iteration 0 only), validation 2 is the second: stage 1 from iteration 2
    assert log == [(0, 1.0, 16, 0), (0, 1.0, 16, 0), (1, 0.0, 0, 16), (1, 0.0, 0, 16), (1, 0.0, 0, 16)]
    assert dm.curriculum.history == [(2, 1)]


def test_a_resumed_datamodule_draws_the_same_members_and_stages():
    stages = [Stage({"easy": 1.0, "hard": 0.2}, metric="val/easy/success_rate", advance_above=0.5, patience=2,
                    retreat_below=0.2), Stage({"easy": 0.2, "hard": 1.0})]
    values = [(0.9, 0), (0.9, 1), (0.1, 2), (0.1, 3), (0.9, 4), (0.9, 5)]

    def play(dm, module, its):
        out = []
        for it in its:
            module.last_val, module.last_val_iteration = {"val/easy/success_rate": values[it][0]}, values[it][1]
            batch = dm.next_train_batch()
            out.append((batch.metrics["curriculum/stage"], batch.turns["group_id"].tolist(), batch.turns["episode_return"].tolist()))
        return out

    straight = _dm(_mix())
    straight.use_curriculum(Curriculum(stages))
    expected = play(straight, _attach(straight, {}, None), range(6))
    assert [s for s, _, _ in expected] == [0, 1, 1, 0, 0, 1]

    first = _dm(_mix())
    first.use_curriculum(Curriculum(stages))
    before = play(first, _attach(first, {}, None), range(3))
    state = first.state_dict()
    assert state["mix"]["curriculum"]["stage"] == 1 and state["mix"]["weights"] == {"easy": 0.2, "hard": 1.0}
    resumed = _dm(_mix())
    resumed.use_curriculum(Curriculum(stages))
    resumed.load_state_dict(state)
    # the resumed module restores the last validation (iteration 2), which this DataModule has already seen
    module = _attach(resumed, {"val/easy/success_rate": 0.1}, 2)
    assert before + play(resumed, module, range(3, 6)) == expected


def test_changed_weights_on_resume_are_the_configs_with_a_warning(caplog):
    dm = _dm(_mix({"easy": 1.0, "hard": 0.0}))
    dm.next_train_batch()
    state = dm.state_dict()
    other = _dm(_mix({"easy": 0.0, "hard": 1.0}))
    other.load_state_dict(state)
    assert other.agent_loop.weights == {"easy": 0.0, "hard": 1.0} and "drew by the weights" in caplog.text
    with pytest.raises(TypeError, match="members of a mix"):
        _dm(_MemberLoop("sokoban", True)).use_curriculum(Curriculum([Stage({"a": 1.0}), Stage({"a": 1.0})]))


def test_validation_plays_every_member_on_its_own_held_out_seeds():
    loop = _mix({"easy": 1.0, "hard": 0.0})  # a weight of 0 still validates
    dm = _dm(loop)
    batches = list(iter(dm.val_dataloader()))
    assert [(b.member, len(b.seeds)) for b in batches] == [("easy", 4), ("easy", 1), ("hard", 3)]
    assert [b.seeds[0] for b in batches] == [2**30, 2**30 + 4, 2**30]  # the seeds a run of that env alone validates
    assert batches[0].records[0]["env"] == "easy"


def _vbatch(member, won, turns, valid, ret, failed=None, graded=False, score=None):
    n = len(won)
    results = {
        "won": torch.tensor(won, dtype=torch.bool), "ret": torch.tensor(ret, dtype=torch.float32),
        "turns": torch.tensor(turns), "valid_turns": torch.tensor(valid),
        "score": torch.tensor(score or [0.0] * n), "env_error": torch.tensor(failed or [False] * n),
    }
    return ValidationBatch(results, 0, graded=graded, member=member)


def test_member_values_count_as_val_does_and_the_overall_is_the_mean_over_members():
    a = _vbatch("a", [True, False, False], [2, 4, 0], [2, 2, 0], [1.0, 0.0, 0.5], failed=[False, False, True])
    b = _vbatch("b", [True], [1], [1], [3.0], graded=True, score=[0.25])
    rank0 = {"a": a.tally()}
    rank1 = {"b": b.tally()}
    values = member_values([rank0, rank1])
    assert values["val/a/success_rate"] == pytest.approx(1 / 3)  # a failed episode is a loss
    assert values["val/a/return_mean"] == pytest.approx(0.5)  # over the episodes that did not fail
    assert values["val/a/valid_action_ratio"] == pytest.approx(4 / 6)  # over the turns played
    assert values["val/a/episodes"] == 3 and "val/a/score" not in values
    assert values["val/b/score"] == pytest.approx(25.0) and values["val/b/success_rate"] == 1.0
    assert values["val/success_rate"] == pytest.approx((1 / 3 + 1.0) / 2)  # each member counts the same
    assert values["val/score"] == pytest.approx(25.0)  # over the graded members
    assert values["val/return_mean"] == pytest.approx((0.5 + 3.0) / 2)
    assert member_values([{}, {}]) == {}
    empty = member_values([{"a": _vbatch("a", [False], [0], [0], [0.0], failed=[True]).tally()}])
    assert math.isnan(empty["val/a/valid_action_ratio"]) and math.isnan(empty["val/valid_action_ratio"])
