"""ALFWorld game generator: households, tasks, PDDL problems and game files (pure, no engine runs)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from arl.envs.alfworld.engine import require_alfworld
from arl.envs.alfworld.gen import tables
from arl.envs.alfworld.gen.games import GeneratorConfig, config_hash, game_files, generated_root
from arl.envs.alfworld.gen.household import (
    SPLIT_SEED_BASE,
    floor_plan,
    plan_indices,
    rules_from_alfworld,
    sample_game,
    traj_data,
)
from arl.envs.alfworld.gen.pddl import demangle, goal_pddl, mangle, problem_pddl


@pytest.fixture(scope="module")
def lib():
    mods = require_alfworld()
    return rules_from_alfworld(mods["constants"]), mods["goal_library"].gdict


def test_mangle_is_alfreds_spelling():
    assert mangle("Mug|+00.32|+00.91|-02.71") == "Mug_bar__plus_00_dot_32_bar__plus_00_dot_91_bar__minus_02_dot_71"
    assert mangle("loc|-5|2|3|30") == "loc_bar__minus_5_bar_2_bar_3_bar_30"
    assert mangle("Sink|+00.71|+00.82|-01.77|SinkBasin") == (
        "Sink_bar__plus_00_dot_71_bar__plus_00_dot_82_bar__minus_01_dot_77_bar_SinkBasin"
    )
    for name in ("Mug|+00.32|+00.91|-02.71", "loc|-5|2|3|30", "a,b"):
        assert demangle(mangle(name)) == name


def test_floor_plans_are_deterministic_and_alfred_numbered():
    a, b = floor_plan("Kitchen", 7), floor_plan("Kitchen", 7)
    assert a == b and a.number == 7 and a.kind == "Kitchen"
    assert floor_plan("LivingRoom", 19).number == 219
    assert floor_plan("Bedroom", 1).number == 301 and floor_plan("Bathroom", 30).number == 430
    assert floor_plan("Kitchen", 7) != floor_plan("Kitchen", 8)
    for kind in tables.ROOM_KINDS:
        plan = floor_plan(kind, 3)
        counts = Counter(r.rtype for r in plan.receptacles)
        for rtype, (low, high) in tables.RECEPTACLES[kind].items():
            assert low <= counts.get(rtype, 0) <= high
        ids = [r.rid for r in plan.receptacles]
        locs = [r.location for r in plan.receptacles] + [plan.agent_location]
        assert len(set(ids)) == len(ids) and len(set(locs)) == len(locs)
        sinks = [r.rid for r in plan.receptacles if r.rtype == "SinkBasin"]
        assert all(s.startswith("Sink|") and s.endswith("|SinkBasin") for s in sinks)
    with pytest.raises(ValueError, match="floor plan index"):
        floor_plan("Kitchen", 31)
    with pytest.raises(ValueError, match="unknown room kind"):
        floor_plan("Garage", 1)


def test_split_seeds_and_plans_are_disjoint():
    assert SPLIT_SEED_BASE == {"train": 0, "valid_seen": 10_000_000, "valid_unseen": 20_000_000}
    assert list(plan_indices("train")) == list(range(1, 26)) == list(plan_indices("valid_seen"))
    assert list(plan_indices("valid_unseen")) == [26, 27, 28, 29, 30]
    with pytest.raises(ValueError, match="unknown split"):
        plan_indices("test")


def test_games_are_deterministic_and_cycle_task_types(lib):
    rules, goals = lib
    specs = [sample_game("train", i, rules, goals) for i in range(12)]
    assert specs == [sample_game("train", i, rules, goals) for i in range(12)]
    assert [s.task.task_type for s in specs] == list(tables.TASK_TYPES) * 2
    assert sample_game("train", 3, rules, goals, attempt=1) != specs[3]
    assert specs[0].task_id == "trial_G00000000"
    assert sample_game("valid_seen", 0, rules, goals).task_id == "trial_G10000000"
    unseen = [sample_game("valid_unseen", i, rules, goals) for i in range(12)]
    assert all(s.plan.number % 100 in range(26, 31) for s in unseen)
    assert all(s.plan.number % 100 in range(1, 26) for s in specs)


def test_game_invariants(lib):
    rules, goals = lib
    for split in ("train", "valid_unseen"):
        for index in range(60):
            spec = sample_game(split, index, rules, goals)
            t = spec.task
            assert spec.plan.kind in tables.TASK_ROOMS[t.task_type]
            receps = {r.rid: r.rtype for r in spec.plan.receptacles}
            ids = [th.oid for th in spec.things]
            assert len(set(ids)) == len(ids) and not set(ids) & set(receps)
            for th in spec.things:
                assert th.receptacle in receps
                if th.otype not in tables.LAMPS:
                    assert th.otype in rules.can_contain[receps[th.receptacle]], (th, receps[th.receptacle])
                else:
                    assert receps[th.receptacle] in tables.LAMP_HOSTS[th.otype]
            targets = [th for th in spec.things if th.otype == t.object_target]
            assert len(targets) >= (2 if t.task_type == "pick_two_obj_and_place" else 1)
            if t.task_type == "look_at_obj_in_light":
                assert t.parent_target == "" and t.toggle_target in tables.LAMPS
                assert any(th.otype == t.toggle_target for th in spec.things)
                assert (
                    spec.task_dir == f"look_at_obj_in_light-{t.object_target}-None-{t.toggle_target}-{spec.plan.number}"
                )
                continue
            assert t.toggle_target == "" and t.parent_target in set(receps.values())
            assert t.object_target in rules.can_contain[t.parent_target]
            assert t.parent_target not in tables.NEVER_A_GOAL
            # the goal does not hold at the start: no target starts in a goal-type receptacle
            assert all(receps[th.receptacle] != t.parent_target for th in targets)
            needs = {
                "pick_clean_then_place_in_recep": rules.cleanable,
                "pick_heat_then_place_in_recep": rules.heatable,
                "pick_cool_then_place_in_recep": rules.coolable,
            }.get(t.task_type)
            if needs is not None:
                assert t.object_target in needs
            if t.task_type == "pick_heat_then_place_in_recep":
                assert all(receps[th.receptacle] != "Microwave" for th in targets)
            if t.task_type == "pick_cool_then_place_in_recep":
                assert all(receps[th.receptacle] != "Fridge" for th in targets)


def test_tables_use_alfred_names_and_allowed_places(lib):
    rules, _ = lib
    constants = require_alfworld()["constants"]
    known = set(constants.OBJECTS)
    for kind in tables.ROOM_KINDS:
        assert set(tables.RECEPTACLES[kind]) <= known | {"SinkBasin", "BathtubBasin"}
        assert set(tables.OBJECTS[kind]) <= known
        for otype in tables.OBJECTS[kind]:
            # every object of a room can be placed in some receptacle of that room kind
            assert any(otype in rules.can_contain.get(r, ()) for r in tables.RECEPTACLES[kind]), (kind, otype)
    assert set(tables.LAMPS) == set(rules.toggleable)
    assert tables.OPENABLE == set(constants.OPENABLE_CLASS_LIST) - {"Box"}


def test_problem_pddl_facts(lib):
    rules, goals = lib
    spec = sample_game("train", 3, rules, goals)  # a heat task
    assert spec.task.task_type == "pick_heat_then_place_in_recep"
    text = problem_pddl(spec, rules, goals)
    assert text.startswith("\n(define (problem plan_trial_G00000003)\n(:domain alfred)\n(:objects")
    assert "agent1 - agent" in text
    assert f"(atLocation agent1 {mangle(spec.plan.agent_location)})" in text
    for r in spec.plan.receptacles:
        assert f"(receptacleType {mangle(r.rid)} {r.rtype}Type)" in text
        assert f"(receptacleAtLocation {mangle(r.rid)} {mangle(r.location)})" in text
        assert (f"(openable {mangle(r.rid)})" in text) == (r.rtype in tables.OPENABLE)
    for th in spec.things:
        assert f"(inReceptacle {mangle(th.oid)} {mangle(th.receptacle)})" in text
        assert f"(pickupable {mangle(th.oid)})" in text
        assert (f"(heatable {mangle(th.oid)})" in text) == (th.otype in rules.heatable)
    assert f"(canContain {spec.task.parent_target}Type {spec.task.object_target}Type)" in text
    goal = goal_pddl(spec, goals)
    assert text.endswith(goal)
    assert "#" not in goal and f"(objectType ?o {spec.task.object_target}Type)" in goal
    assert f"(receptacleType ?r {spec.task.parent_target}Type)" in goal and "(isHot ?o)" in goal
    assert text.count("(") == text.count(")")


def test_game_files_layout(lib):
    rules, goals = lib
    spec = sample_game("train", 5, rules, goals)
    game, traj = game_files(spec, walkthrough=["look"])
    assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
    assert game["solvable"] is True and game["walkthrough"] == ["look"]
    assert "UNKNOWN GOAL" not in game["grammar"]
    assert f"Your task is to: {spec.task.description}." in game["grammar"]
    assert game["pddl_domain"].startswith(";; Specification in PDDL of the Alfred domain")
    assert traj == traj_data(spec)
    assert traj["task_type"] == "pick_two_obj_and_place"
    assert traj["pddl_params"]["object_target"] == spec.task.object_target
    assert traj["pddl_params"]["toggle_target"] == "" and traj["pddl_params"]["mrecep_target"] == ""
    json.dumps(traj)
    assert game_files(spec)[0]["solvable"] is False


def test_cache_key_follows_the_config(monkeypatch, tmp_path):
    monkeypatch.setenv("ARL_CACHE", str(tmp_path))
    a, b = config_hash(GeneratorConfig()), config_hash(GeneratorConfig(max_expert_steps=40))
    assert a != b and len(a) == 12
    assert generated_root() == tmp_path / "alfworld-gen" / a
