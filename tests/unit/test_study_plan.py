"""A study's plan (arl.analysis.study_plan): read and checked, handed to the study script, and every
departure of real archived runs (the ALFWorld strong-start confirmation) from it named."""

from pathlib import Path

import pytest
import yaml

from arl.analysis.runs import find_runs
from arl.analysis.study_plan import departures, load_plan, shell_exports

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "docs" / "results" / "alfworld_strong_confirmation" / "runs"
START = "docs/results/alfworld_strong/bc_start_dagger/bc_policy_hf"
START_SHA = "61b62741fe49b097b5c8915717758cba5add0a441f6454217e39af8e70663c1c"

# the confirmation as a plan would have fixed it (its runs carry rollout.groups_per_step, the old name)
CONFIRMATION = {
    "name": "alfworld_strong_confirmation", "experiment": "alfworld", "start": {"path": START, "sha256": START_SHA},
    "methods": ["sampo", "grpo"], "seeds": [11, 12, 13, 14], "iterations": 16, "val_every": 16,
    "val_episodes": 256, "min_optimizer_steps": 36,
    "overrides": ["debug=cpu_small", "env.kwargs.task_types=[pick_and_place_simple,look_at_obj_in_light]",
                  "env.max_turns=20", "env.kwargs.max_steps=20", "rollout.groups_per_step=4",
                  "algo.filter.cold_start=2", "rl.optimizer.lr=0.0001", "algo.advantage.penalty_only_groups=center",
                  "+env.kwargs.num_games.valid_seen=256"],
}


def _plan(tmp_path, **change):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**CONFIRMATION, **change}))
    return load_plan(path)


@pytest.fixture(scope="module")
def runs():
    if not ARCHIVE.exists():
        pytest.skip("the confirmation archive is not in this checkout")
    return find_runs(ARCHIVE)


def test_the_plan_the_runs_followed_has_no_departure(tmp_path, runs):
    plan = _plan(tmp_path)
    assert plan.validation_points == [0, 16]
    assert departures(plan, runs, ROOT) == []


def test_each_departure_is_named(tmp_path, runs):
    plan = _plan(tmp_path, seeds=[11, 12, 13, 14, 15], iterations=20, val_every=10, min_optimizer_steps=40,
                 overrides=[*CONFIRMATION["overrides"][:-3], "rl.optimizer.lr=1e-05",
                            *CONFIRMATION["overrides"][-2:]])
    found = departures(plan, runs, ROOT)
    assert "algo=sampo, seed=15: planned, not (yet) run" in found and "algo=grpo, seed=15: planned, not (yet) run" in found
    assert sum("16 of 20 iterations" in d for d in found) == 8
    assert sum("rl.optimizer.lr=0.0001, the plan 1e-05" in d for d in found) == 8
    assert sum("validations at iterations [0, 16], the plan [0, 10, 20]" in d for d in found) == 8
    # the runs took 36-42 steps: those under 40 are named with their count
    low = [d for d in found if "optimiser steps" in d]
    assert low and all(int(d.split(": ")[1].split()[0]) < 40 for d in low)


def test_a_run_outside_the_plan_and_a_wrong_start_are_departures(tmp_path, runs):
    plan = _plan(tmp_path, seeds=[11, 12, 13], start={"path": START, "sha256": "0" * 64})
    found = departures(plan, runs, ROOT)
    assert sum("seed=14 is not a planned run" in d for d in found) == 2
    assert any(d.startswith(f"the start {START} has sha256 {START_SHA}") for d in found)


def test_a_plan_missing_a_key_or_mistyped_is_refused(tmp_path):
    with pytest.raises(ValueError, match="lacks seeds"):
        load_plan(_write(tmp_path, {k: v for k, v in CONFIRMATION.items() if k != "seeds"}))
    with pytest.raises(ValueError, match="iterations"):
        _plan(tmp_path, iterations=0)
    with pytest.raises(ValueError, match="listed twice"):
        _plan(tmp_path, seeds=[1, 1])
    with pytest.raises(ValueError, match="sha256"):
        _plan(tmp_path, start={"path": START})


def _write(tmp_path, data):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_committed_plans_load_and_export_their_settings():
    for name in ("alfworld_long_runs", "webshop_long_runs"):
        plan = load_plan(ROOT / "docs" / "results" / name / "plan.yaml")
        exports = shell_exports(plan)
        assert f"export SEEDS={','.join(map(str, plan.seeds))}" in exports
        assert f"export ITERS={plan.iterations}" in exports
        assert len(plan.validation_points) >= 6  # the start and five along the run



def test_the_committed_plans_use_fresh_seeds():
    # no run archived by another study used a planned seed (a seed that chose a setting cannot confirm it)
    used = {}
    for config in (ROOT / "docs" / "results").glob("*/runs/*/.hydra/config.yaml"):
        seed = yaml.safe_load(config.read_text()).get("seed")
        used.setdefault(seed, set()).add(config.parents[3].name)
    for name in ("alfworld_long_runs", "webshop_long_runs"):
        plan = load_plan(ROOT / "docs" / "results" / name / "plan.yaml")
        clashes = {s: used[s] - {name} for s in plan.seeds if used.get(s, set()) - {name}}
        assert not clashes, f"{name}: seeds used by other archives: {clashes}"


def test_the_report_prints_the_departures(tmp_path, runs):
    from arl.analysis.report import write_report

    plan = _plan(tmp_path, seeds=[11, 12, 13, 14, 15])
    text = write_report(ARCHIVE, tmp_path / "report", plan=plan).read_text()
    section = text.split("## Departures from the plan", 1)[1].split("\n## ", 1)[0]
    assert "algo=sampo, seed=15: planned, not (yet) run" in section
    assert "seed=14" not in section
