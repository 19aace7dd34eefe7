"""Dynamic sampling in the rollout DataModule, as the official agent trainers do it: the filter
starts after ``cold_start`` iterations, re-rollout rounds top the batch up with kept groups, and
the last round fills what is still missing with its other groups (non-constant ones first).

The episodes come from a scripted agent loop whose returns are set per (round, group), so each
case is exact; the filter is the real ``dapo`` / ``stage_aware`` of ``arl.algos.filters``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from arl.agent.loop import RolloutStats
from arl.agent.records import Episode, Turn
from arl.algos import filters
from arl.algos.schema import FilterConfig
from arl.datamodules.rollout_datamodule import FilterSchedule, IterationPlan, RolloutDataModule, ValidationPlan
from arl.rollout.engine import SamplingParams
from arl_testing import episode_returns


class ScriptedLoop:
    """Returns, for round ``r`` (counted over the loop's life), episodes whose returns are
    ``script[r][g]`` (a list of ``group_size`` returns per group), one turn each."""

    sample_mode = "turn"

    def __init__(self, script, valid: bool = True):
        self.script = script
        self.valid = valid
        self.round = 0
        self.last_stats = RolloutStats(generated_tokens=1, env_steps=1, generate_seconds=1.0, env_seconds=1.0)
        self.pool = SimpleNamespace(restarts=0)
        self.spec = SimpleNamespace(graded=False)  # an env that does not grade its episodes beyond winning

    def run(self, tasks, group_size, params, first_episode_id=0):
        returns = self.script[min(self.round, len(self.script) - 1)]
        self.round += 1
        out = []
        for g, task in enumerate(tasks):
            for m in range(group_size):
                ep = Episode(task.group_id, first_episode_id + g * group_size + m, task.seed, "scripted", "scripted")
                r = returns[g][m]
                ep.turns = [Turn([1], [2], [0.0], "", "a", self.valid, "", r, True, 0)]
                ep.won = r > 0
                out.append(ep)
        return out


def _dm(script, filter_name="dapo", rounds=3, cold_start=0, fill=True, groups=4, valid=True):
    params = SamplingParams(temperature=1.0, max_new_tokens=4, stop=())
    schedule = FilterSchedule(filters.group_filter(FilterConfig(name=filter_name)), rounds, cold_start, fill)
    return RolloutDataModule(ScriptedLoop(script, valid), IterationPlan(10, groups, 2, params), ValidationPlan(params),
                             schedule, pad_id=0)


MIXED, CONST_OK, CONST_FAIL = [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]


def _spread(batch):
    return {g: max(v.values()) - min(v.values()) for g, v in episode_returns(batch).items()}


def test_rounds_top_up_with_kept_groups_only():
    dm = _dm([[MIXED, CONST_OK, CONST_FAIL, CONST_FAIL], [CONST_FAIL, MIXED, MIXED, CONST_OK], [MIXED] * 4])
    batch = dm.next_train_batch()
    assert batch.metrics["filter/rounds"] == 3 and batch.metrics["filter/kept_groups"] == 4
    assert batch.metrics["filter/filled_groups"] == 0 and batch.metrics["filter/active"] == 1.0
    spread = _spread(batch)
    assert len(spread) == 4 and all(s > 0 for s in spread.values())  # every kept group has reward spread
    # round 0 gave group 0, round 1 groups 1 and 2 (ids 4*round + g), round 2 its first group
    assert sorted(spread) == [0, 5, 6, 8]
    assert batch.metrics["rollout/episodes"] == 3 * 4 * 2  # everything rolled out is counted


def test_each_round_rolls_out_fresh_tasks_from_the_seed_stream():
    """A top-up round plays other tasks than the rounds before it (a task whose group was constant
    would most likely be constant again), drawn from the (seed, iteration, round) stream, so a
    resumed run replays them exactly."""
    from arl.datamodules.rollout_datamodule import train_task_seeds

    dm = _dm([[CONST_OK] * 4, [CONST_OK] * 4, [MIXED] * 4])
    seen = []
    run = dm.agent_loop.run

    def record(tasks, group_size, params, first_episode_id=0):
        seen.append([t.seed for t in tasks])
        return run(tasks, group_size, params, first_episode_id)

    dm.agent_loop.run = record
    dm.next_train_batch()
    assert len(seen) == 3
    assert seen == [train_task_seeds(dm.seed, 0, r, 4) for r in range(3)]
    assert all(set(a).isdisjoint(b) for a, b in ((seen[0], seen[1]), (seen[0], seen[2]), (seen[1], seen[2])))


def test_the_last_round_fills_the_batch_non_constant_groups_first():
    dm = _dm([[CONST_OK] * 4, [CONST_FAIL, CONST_OK, MIXED, CONST_FAIL]], rounds=2)
    batch = dm.next_train_batch()
    assert batch.metrics["filter/rounds"] == 2
    assert batch.metrics["filter/kept_groups"] == 1 and batch.metrics["filter/filled_groups"] == 3
    assert sorted(episode_returns(batch)) == [4, 5, 6, 7]  # the mixed group 6, then 4, 5, 7 in order
    assert sum(map(len, episode_returns(batch).values())) == 4 * 2


def test_the_fill_takes_the_missing_count_in_task_order():
    dm = _dm([[MIXED, CONST_OK, CONST_OK, CONST_OK], [CONST_FAIL, CONST_OK, MIXED, CONST_FAIL]], rounds=2)
    batch = dm.next_train_batch()
    # round 0 keeps group 0; the last round adds its mixed group 6, then fills 2 more: 4 and 5
    assert sorted(episode_returns(batch)) == [0, 4, 5, 6]
    assert (batch.metrics["filter/kept_groups"], batch.metrics["filter/filled_groups"]) == (2, 2)


def test_without_the_fill_it_trains_on_what_the_filter_kept():
    dm = _dm([[CONST_OK] * 4, [CONST_FAIL, CONST_OK, MIXED, CONST_FAIL]], rounds=2, fill=False)
    batch = dm.next_train_batch()
    assert sorted(episode_returns(batch)) == [6]
    assert (batch.metrics["filter/kept_groups"], batch.metrics["filter/filled_groups"]) == (1, 0)


def test_the_filter_starts_after_the_cold_start():
    dm = _dm([[CONST_OK, MIXED, CONST_FAIL, CONST_FAIL]] * 10, cold_start=2)
    for it in range(4):
        batch = dm.next_train_batch()
        if it < 2:  # plain GRPO iterations: one round, every group
            assert batch.metrics["filter/active"] == 0.0 and batch.metrics["filter/rounds"] == 1
            assert len(episode_returns(batch)) == 4
        else:
            assert batch.metrics["filter/active"] == 1.0 and batch.metrics["filter/rounds"] == 3
            # one mixed group per round; the last round fills the fourth slot with its first other group
            assert (batch.metrics["filter/kept_groups"], batch.metrics["filter/filled_groups"]) == (3, 1)


@pytest.mark.parametrize("filter_name,expected", [("dapo", [1, 4, 5, 6]), ("stage_aware", [1, 4, 5, 7])])
def test_the_fill_prefers_the_groups_the_filter_keeps(filter_name, expected):
    """Early in training (invalid answers, valid ratio below 0.9) stage_aware keeps all-failure
    groups: the last round takes that one before filling with the others in task order."""
    script = [[CONST_OK, MIXED, CONST_OK, CONST_OK], [CONST_OK, CONST_OK, CONST_OK, CONST_FAIL]]
    batch = _dm(script, filter_name=filter_name, rounds=2, valid=False).next_train_batch()
    assert sorted(episode_returns(batch)) == expected
    kept = 2 if filter_name == "stage_aware" else 1
    assert (batch.metrics["filter/kept_groups"], batch.metrics["filter/filled_groups"]) == (kept, 4 - kept)


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_a_batch_always_holds_the_target_with_the_fill(rounds):
    torch.manual_seed(rounds)
    script = [[[float(torch.randint(0, 2, ())), float(torch.randint(0, 2, ()))] for _ in range(4)] for _ in range(rounds)]
    batch = _dm(script, rounds=rounds).next_train_batch()
    assert len(episode_returns(batch)) == 4
