"""scripts/rename_runs.py: a runs archive's folders renamed to what varies between its runs."""

from __future__ import annotations

import importlib.util

import pytest

from arl_testing import ROOT

spec = importlib.util.spec_from_file_location("rename_runs", ROOT / "scripts" / "rename_runs.py")
rename_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rename_runs)

SHARED = ["experiment=sokoban", "debug=cpu_small", "model.init_from='/work/logs/bc start/bc_policy_hf'",
          "env.kwargs.dim_room=[7,7]", "ckpt_path=resume"]


def _archive(root, runs: dict[str, list[str]]):
    """root/runs/<folder>/.hydra/overrides.yaml for each folder -> its overrides (nothing else)."""
    for folder, overrides in runs.items():
        hydra = root / "runs" / folder / ".hydra"
        hydra.mkdir(parents=True)
        (hydra / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return root / "runs"


def _hydra_name(overrides: list[str]) -> str:
    """The folder name a Hydra multirun gives: the sorted overrides, path keys left out."""
    return ",".join(sorted(o for o in overrides if not o.startswith(("model.init_from", "ckpt_path"))))


def _listing(runs):
    return sorted(p.name for p in runs.iterdir())


def test_algo_and_seed_varying_give_algo_seed(tmp_path, capsys):
    overrides = [[*SHARED, f"seed={seed}", f"algo={algo}", "rl.iterations=60"]
                 for algo in ("grpo", "dapo_gigpo") for seed in (1, 2)]
    runs = _archive(tmp_path, {_hydra_name(o): o for o in overrides})
    (runs / "notes").mkdir()  # not a run folder: left alone
    before = _listing(runs)
    assert rename_runs.main([str(runs), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert _listing(runs) == before  # a dry run renames nothing
    assert f"{_hydra_name(overrides[0])} -> grpo_seed1" in out and "would rename 4 run folders" in out
    assert rename_runs.main([str(runs)]) == 0
    assert _listing(runs) == ["dapo_gigpo_seed1", "dapo_gigpo_seed2", "grpo_seed1", "grpo_seed2", "notes"]
    # the contents move with their folder
    assert "- algo=dapo_gigpo\n" in (runs / "dapo_gigpo_seed2" / ".hydra" / "overrides.yaml").read_text()
    assert "- seed=2\n" in (runs / "dapo_gigpo_seed2" / ".hydra" / "overrides.yaml").read_text()


def test_other_varying_keys_are_named_short_and_filesystem_safe(tmp_path):
    overrides = [["algo=grpo", "seed=1", f"rl.optimizer.lr={lr}", f"rl.mini_batches={mb}",
                  f"env.kwargs.dim_room={room}", *SHARED[:3]]
                 for lr in ("0.0003", "0.001") for mb in (8, 16) for room in ("[6,6]", "[7,7]")]
    runs = _archive(tmp_path, {_hydra_name(o): o for o in overrides})
    changed = rename_runs.rename(runs)
    assert len(changed) == 8
    # algo first, then the other varying keys in the overrides' order, seed last (shared: named all the same)
    assert "grpo_lr0.0003_mb8_dr6-6_seed1" in _listing(runs)
    assert "grpo_lr0.001_mb16_dr7-7_seed1" in _listing(runs)
    assert all(len(name) < 40 and "," not in name and "[" not in name for name in _listing(runs))


def test_keys_with_the_same_short_form_are_named_longer():
    assert rename_runs.short_keys(["rl.optimizer.lr", "rl.mini_batches", "env.max_steps"]) == \
        {"rl.optimizer.lr": "lr", "rl.mini_batches": "mb", "env.max_steps": "ms"}
    assert rename_runs.short_keys(["env.max_steps", "env.min_score", "rl.lr", "bc.lr"]) == \
        {"env.max_steps": "max_steps", "env.min_score": "min_score", "rl.lr": "rl.lr", "bc.lr": "bc.lr"}
    assert rename_runs.safe_value("'a b/c'") == "a-b-c" and rename_runs.safe_value("-1e-4") == "-1e-4"


def test_a_second_call_renames_nothing(tmp_path, capsys):
    overrides = [[*SHARED, f"algo={algo}", f"seed={seed}"] for algo in ("grpo", "sampo") for seed in (1, 2, 3)]
    runs = _archive(tmp_path, {_hydra_name(o): o for o in overrides})
    assert len(rename_runs.rename(runs)) == 6
    after = _listing(runs)
    assert rename_runs.rename(runs) == [] and rename_runs.rename(runs, dry_run=True) == []
    assert _listing(runs) == after
    assert rename_runs.main([str(runs)]) == 0 and "nothing to rename" in capsys.readouterr().out


def test_names_swapped_between_runs_go_through_temporary_names(tmp_path):
    runs = _archive(tmp_path, {"grpo_seed1": ["algo=grpo", "seed=2"], "grpo_seed2": ["algo=grpo", "seed=1"]})
    assert sorted(rename_runs.rename(runs)) == [("grpo_seed1", "grpo_seed2"), ("grpo_seed2", "grpo_seed1")]
    assert "- seed=1\n" in (runs / "grpo_seed1" / ".hydra" / "overrides.yaml").read_text()
    assert _listing(runs) == ["grpo_seed1", "grpo_seed2"]


def test_runs_that_differ_only_in_a_path_key_stop_with_the_clash_named(tmp_path, capsys):
    runs = _archive(tmp_path, {
        "a": ["algo=grpo", "seed=1", "model.init_from=/x/bc_long"],
        "b": ["algo=grpo", "seed=1", "model.init_from=/x/bc_weak"],
        "c": ["algo=sampo", "seed=1", "model.init_from=/x/bc_long"],
    })
    with pytest.raises(rename_runs.NameClash, match=r"'grpo_seed1': 'a', 'b'"):
        rename_runs.rename(runs)
    assert rename_runs.main([str(runs)]) == 1
    assert "would share a name; nothing renamed" in capsys.readouterr().err
    assert _listing(runs) == ["a", "b", "c"]  # nothing renamed, not even the run that had no clash


def test_a_new_name_taken_by_another_folder_stops(tmp_path):
    runs = _archive(tmp_path, {"x": ["algo=grpo", "seed=1"], "y": ["algo=grpo", "seed=2"]})
    (runs / "grpo_seed2").mkdir()  # no .hydra: not a run
    with pytest.raises(rename_runs.NameClash, match="'grpo_seed2' already there and not a run folder"):
        rename_runs.rename(runs)
    assert _listing(runs) == ["grpo_seed2", "x", "y"]
