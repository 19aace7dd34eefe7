"""The report command on real TensorBoard event files with known values."""

import math

import pytest

from arl.analysis.report import write_report
from arl.analysis.runs import find_runs, parse_overrides
from arl.analysis.tables import group_table, run_table, validation_table
from arl_testing import write_rl_events

_write_run = write_rl_events


@pytest.fixture
def multirun(tmp_path):
    root = tmp_path / "multirun"
    _write_run(root / "experiment=grpo_sokoban,seed=1", {
        "val/success_rate": [(0, 0.2), (5, 0.5), (10, 0.4)],
        "actor/kl_loss": [(1, 0.01), (2, 0.5), (3, 0.02)],
        "actor/grad_norm": [(1, 1.0), (2, 7.5)],
        "actor/clipfrac": [(1, 0.01), (2, 0.03), (3, float("nan"))],  # mean over iterations, NaN left out
        "rollout/valid_action_ratio": [(1, 0.9), (10, 0.8)],
        "collapse/events": [(1, 0.0), (4, 1.0), (6, 2.0)],
        "train/optimizer_steps": [(1, 2.0), (2, 4.0), (3, 4.0)],  # cumulative: iteration 3 made no step
        "train/updates_skipped": [(1, 0.0), (2, 0.0), (3, 1.0)],
    })
    _write_run(root / "experiment=grpo_sokoban,seed=2", {
        "val/success_rate": [(0, 0.3), (10, 0.6)],
        "val/success_rate/easy": [(10, 0.75)],
        "actor/ppo_kl": [(1, 0.003)],
        "actor/grad_norm": [(1, float("nan")), (2, 2.0)],
        "is/tokens_above_pos": [(1, 0.1), (2, 0.2)],
    })
    (root / "multirun.yaml").write_text("not a run\n")
    return root


def test_parse_overrides_keeps_bracketed_commas():
    assert parse_overrides("experiment=sampo_sokoban,seed=1") == {"experiment": "sampo_sokoban", "seed": "1"}
    assert parse_overrides("algo.x=[1,2],+y=3") == {"algo.x": "[1,2]", "y": "3"}
    assert parse_overrides("plain") == {}
    assert parse_overrides("model.init_from=/a/b,seed=2,hydra.sweep.dir=x") == {"seed": "2"}  # paths name no run


def test_run_table_values(multirun):
    runs = find_runs(multirun)
    # the override every run shares is said once, not in every label
    assert [r.label for r in runs] == ["seed=1", "seed=2"] and runs[0].common == {"experiment": "grpo_sokoban"}
    r1, r2 = runs
    assert r1.final("val/success_rate") == pytest.approx(0.4) and r1.best("val/success_rate") == pytest.approx(0.5)
    assert r1.steps_to_collapse() == 4 and r2.steps_to_collapse() is None
    assert r1.peak("actor/kl_loss") == pytest.approx(0.5)
    assert r2.peak("actor/grad_norm") == pytest.approx(2.0)  # NaN is not a peak
    table = run_table(runs).splitlines()
    assert table[0] == ("| run | start success | final success | best success | final easy | steps to collapse | "
                        "peak KL | peak grad norm | clip fraction | valid-action ratio | optimiser steps | skipped updates |")
    assert table[2] == "| `seed=1` | 0.200 | 0.400 | 0.500 | - | 4 | 0.5000 | 7.50 | 0.0200 | 0.800 | 4 | 1 |"
    assert table[3] == "| `seed=2` | 0.300 | 0.600 | 0.600 | 0.750 | - | 0.0030 | 2.00 | - | - | - | - |"
    assert r1.gain() == pytest.approx(0.2) and r2.gain() == pytest.approx(0.3)
    group = group_table(runs).splitlines()
    # mean and 95 % t interval of the final successes 0.4 and 0.6: 0.5 +- 12.706 x std / sqrt(2)
    half = 12.706 * math.sqrt(((0.4 - 0.5) ** 2 + (0.6 - 0.5) ** 2) / 1) / math.sqrt(2)
    gain_half = 12.706 * math.sqrt(((0.2 - 0.25) ** 2 + (0.3 - 0.25) ** 2) / 1) / math.sqrt(2)
    # the bootstrap resamples of (0.4, 0.6) have means 0.4, 0.5, 0.6 with probabilities 1/4, 1/2, 1/4
    assert group[2].startswith(f"| `experiment=grpo_sokoban` | 2 | 0.500 [{0.5 - half:.3f}, {0.5 + half:.3f}] | "
                               f"[0.400, 0.600] | +0.250 [{0.25 - gain_half:+.3f}, {0.25 + gain_half:+.3f}] | 0.550 [")
    assert "| 1/2 (it 4) |" in group[2]  # collapsed runs and the first iteration the detector fired


def test_confidence_intervals_by_hand():
    from arl.analysis.stats import mean_ci, t975

    assert t975(1) == 12.706 and t975(9) == 2.262 and t975(22) == 2.086 and t975(500) == 1.96
    m, half = mean_ci([1.0, 2.0, 3.0, 4.0])  # std 1.291, t(3) 3.182: 3.182 x 1.291 / 2
    assert m == 2.5 and half == pytest.approx(3.182 * math.sqrt(5 / 3) / 2)
    assert mean_ci([0.7]) == (0.7, 0.0)


def test_labels_keep_what_differs_between_runs(tmp_path):
    root = tmp_path / "m"
    for method in ("grpo", "sampo"):
        for seed in (1, 2):
            _write_run(root / f"debug=cpu_small,experiment={method}_sokoban,seed={seed}", {"val/success_rate": [(0, 0.1)]})
    runs = find_runs(root)
    assert [r.label for r in runs] == [f"experiment={m}_sokoban,seed={s}" for m in ("grpo", "sampo") for s in (1, 2)]
    assert [r.group for r in runs] == ["experiment=grpo_sokoban"] * 2 + ["experiment=sampo_sokoban"] * 2
    assert "Every run shares: `debug=cpu_small`." in write_report(root, tmp_path / "out").read_text()


def test_a_bc_run_reports_its_bc_results(multirun, tmp_path):
    """glob(*_sokoban) also matches bc_sokoban: its row comes from bc_results.json, not from curves."""
    import json

    from torch.utils.tensorboard import SummaryWriter

    bc = multirun / "experiment=bc_sokoban,seed=1"
    writer = SummaryWriter(str(bc / "tensorboard" / "bc"))  # what a BC run logs: SFT losses only
    writer.add_scalar("bc/loss", 2.0, 0)
    writer.close()
    (bc / "bc_results.json").write_text(json.dumps({
        "bc/val_success_untrained": 0.0,
        "val_after_bc": {"val/success_rate": 0.45, "val/success_rate/easy": 0.5, "val/valid_action_ratio": 0.97},
    }))
    runs = find_runs(multirun)
    r = next(r for r in runs if r.bc_only)
    assert r.label == "experiment=bc_sokoban,seed=1"
    assert r.first("val/success_rate") == 0.0 and r.final("val/success_rate") == pytest.approx(0.45)
    assert r.gain() == pytest.approx(0.45)
    row = next(line for line in run_table(runs).splitlines() if "bc_sokoban" in line)
    assert row == "| `experiment=bc_sokoban,seed=1` | 0.000 | 0.450 | 0.450 | 0.500 | - | - | - | - | 0.970 | - | - |"
    assert sum(r.bc_only for r in runs) == 1
    text = write_report(multirun, tmp_path / "out").read_text()
    assert "bc_sokoban" in text


def test_write_report_makes_markdown_and_plots(multirun, tmp_path):
    out = tmp_path / "out"
    path = write_report(multirun, out)
    text = path.read_text()
    assert "## Runs" in text and "![success](success.png)" in text
    assert "![success_by_setting](success_by_setting.png)" in text
    for stem in ("success_by_setting", "success", "kl", "grad_norm", "clip_fractions", "valid_format"):
        assert (out / f"{stem}.png").stat().st_size > 5000
    assert not (out / "masked_seqs.png").exists()  # no run logged it


def test_the_advantage_plot_has_the_step_part_panel_only_where_gigpo_ran(multirun, tmp_path):
    from PIL import Image

    _write_run(multirun / "experiment=grpo_sokoban,seed=1", {"adv/std": [(1, 1.2), (2, 1.1)]})
    write_report(multirun, tmp_path / "grpo")
    one_panel = Image.open(tmp_path / "grpo" / "advantage.png").size
    _write_run(multirun / "experiment=grpo_sokoban,seed=1", {"adv/step_std": [(1, 0.8), (2, 0.7)]})
    text = write_report(multirun, tmp_path / "gigpo").read_text()
    assert "![advantage](advantage.png)" in text
    two_panels = Image.open(tmp_path / "gigpo" / "advantage.png").size
    assert two_panels[0] > 1.5 * one_panel[0]  # adv/std and adv/step_std side by side


def test_the_report_says_the_validation_size_and_the_best_checkpoint_and_skips_off_features(multirun, tmp_path):
    for run, episodes in (("experiment=grpo_sokoban,seed=1", 128), ("experiment=grpo_sokoban,seed=2", 128)):
        (multirun / run / ".hydra").mkdir()
        (multirun / run / ".hydra" / "config.yaml").write_text(f"rollout:\n  val_episodes: {episodes}\n")
    (multirun / "experiment=grpo_sokoban,seed=1" / "checkpoints").mkdir()
    (multirun / "experiment=grpo_sokoban,seed=1" / "checkpoints" / "best-iter5.ckpt").write_bytes(b"x")
    _write_run(multirun / "experiment=grpo_sokoban,seed=1", {"actor/masked_seqs": [(1, 0.0), (2, 0.0)]})  # masking off
    text = write_report(multirun, tmp_path / "out").read_text()
    assert "Validation: 128 episodes per validation." in text
    assert "`seed=1`: `best-iter5.ckpt`" in text
    assert "95 % confidence interval" in text
    assert not (tmp_path / "out" / "masked_seqs.png").exists()  # a feature that was off has no panel


def test_cli_errors_are_clear(tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from report import main

    assert main([str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2


def test_fisher_exact_by_hand():
    from arl.analysis.stats import fisher_exact

    # 4/4 collapsed against 0/4: only the table itself and its mirror are as extreme,
    # each with probability 1 / C(8, 4) = 1/70
    assert fisher_exact(4, 0, 0, 4) == pytest.approx(2 / 70)
    # 3/4 against 1/4: tables with x = 0, 1, 3, 4 are no more likely than x = 3 (p 16/70):
    # (1 + 16 + 16 + 1) / 70
    assert fisher_exact(3, 1, 1, 3) == pytest.approx(34 / 70)
    assert fisher_exact(2, 2, 2, 2) == pytest.approx(1.0)
    assert fisher_exact(0, 5, 0, 5) == 1.0


def test_the_report_tests_collapse_counts_between_settings(tmp_path):
    from arl.analysis.tables import collapse_tests

    root = tmp_path / "m"
    for method, collapsed in (("cispo", 4), ("cispo_seqmask", 0)):
        for seed in range(1, 5):
            events = [(1, 0.0), (3, 1.0)] if seed <= collapsed else [(1, 0.0)]
            _write_run(root / f"algo={method},seed={seed}", {"val/success_rate": [(0, 0.1)], "collapse/events": events})
    table = collapse_tests(find_runs(root)).splitlines()
    assert table[2] == f"| `algo=cispo` | 4/4 | `algo=cispo_seqmask` | 0/4 | {2 / 70:.3f} |"
    assert "Fisher" in write_report(root, tmp_path / "out").read_text()


def test_a_best_checkpoint_worse_than_the_start_is_flagged():
    from arl.analysis.report import validation_line
    from arl.analysis.runs import Run

    fell = Run("a", {"algo": "cispo"}, {"val/success_rate": [(0, 0.281), (10, 0.031), (20, 0.078)]},
               best_checkpoint="best-iter20.ckpt")
    rose = Run("b", {"algo": "gspo"}, {"val/success_rate": [(0, 0.281), (10, 0.312)]}, best_checkpoint="best-iter10.ckpt")
    assert fell.start_was_best() and not rose.start_was_best()
    assert not Run("c", {}, {"val/success_rate": [(0, 0.3)]}).start_was_best()  # nothing after the start
    line = validation_line([fell, rose])
    assert "`algo=cispo`: `best-iter20.ckpt` (the start scored higher)" in line
    assert "`algo=gspo`: `best-iter10.ckpt`;" not in line and "`algo=gspo`: `best-iter10.ckpt`." in line


def test_paired_contrasts_over_shared_seeds(tmp_path):
    from arl.analysis.tables import contrast_table, default_contrasts
    from report import main

    root = tmp_path / "m"
    finals = {"grpo": [0.20, 0.30, 0.25], "sampo": [0.30, 0.35, 0.25], "gigpo": [0.22, 0.31]}  # gigpo lacks seed 3
    for method, values in finals.items():
        for seed, v in enumerate(values, start=1):
            _write_run(root / f"algo={method},seed={seed}", {"val/success_rate": [(0, 0.1), (10, v)]})
    runs = find_runs(root)
    assert default_contrasts(runs) == ["algo=gigpo - algo=grpo", "algo=sampo - algo=grpo"]
    lines = contrast_table(runs, ["algo=sampo - algo=grpo", "algo=gigpo - algo=grpo",
                                  "algo=sampo - algo=gigpo - algo=grpo + algo=grpo"]).splitlines()
    # sampo - grpo per seed: +0.10, +0.05, 0.00: mean +0.05, std 0.05, t(2) 4.303 -> +-0.124
    half = 4.303 * 0.05 / math.sqrt(3)
    assert lines[2].startswith(f"| `algo=sampo - algo=grpo` | 3 | +0.050 [{0.05 - half:+.3f}, {0.05 + half:+.3f}] | ")
    assert lines[2].endswith("| 2 / 0 | 1: +0.100, 2: +0.050, 3: +0.000 |")
    # bootstrap over (0.10, 0.05, 0.00): the lowest resample mean 0 has probability 1/27 >= 2.5 %
    assert "| [+0.000, +0.100] |" in lines[2]
    assert lines[3].startswith("| `algo=gigpo - algo=grpo` | 2 | ")  # only the seeds both ran
    assert "1: +0.020, 2: +0.010" in lines[3]
    assert "1: +0.080, 2: +0.040 |" in lines[4]  # a four-term contrast over the seeds all four have
    missing = contrast_table(runs, ["algo=nope - algo=grpo"]).splitlines()[2]
    assert missing.startswith("| `algo=nope - algo=grpo` | 0 | no setting named 'algo=nope'; settings: algo=gigpo, ")
    text = write_report(root, tmp_path / "out").read_text()
    assert "## Paired comparisons: final validation success" in text and "`algo=sampo - algo=grpo`" in text
    assert "mean training success" not in text  # these runs logged no rollout/success_rate
    # the mean over iterations of the training success, paired the same way
    for method, values in {"grpo": [0.1, 0.3], "sampo": [0.2, 0.6]}.items():
        _write_run(root / f"algo={method},seed=9", {"val/success_rate": [(0, 0.1)],
                                                    "rollout/success_rate": list(enumerate(values, start=1))})
    line = contrast_table(find_runs(root), ["algo=sampo - algo=grpo"], "mean training success over the run").splitlines()[2]
    assert line.endswith("| 1 / 0 | 9: +0.200 |")  # mean(0.2, 0.6) - mean(0.1, 0.3)
    assert "## Paired comparisons: mean training success over the run" in write_report(root, tmp_path / "o3").read_text()
    for method, values in {"dapo_gigpo": [0.2, 0.4, 0.6], "stage_aware_gigpo": [0.5, 0.9, 1.0]}.items():
        _write_run(root / f"algo={method},seed=9", {"val/success_rate": [(0, 0.1)],
                                                    "rollout/valid_action_ratio": list(enumerate(values, start=1))})
    line = contrast_table(find_runs(root), ["algo=stage_aware_gigpo - algo=dapo_gigpo"],
                          "mean training valid-action ratio over the run").splitlines()[2]
    assert line.endswith("| 1 / 0 | 9: +0.400 |")  # mean(0.5, 0.9, 1.0) - mean(0.2, 0.4, 0.6)
    assert main([str(root), "--out", str(tmp_path / "o2"), "--contrast", "algo=sampo - - algo=grpo"]) == 2


def test_a_setting_is_named_by_any_of_its_overrides_when_one_setting_has_them(tmp_path):
    """A folder of one method's runs labels its setting with every override the runs share; a
    contrast may name it by one of them ("algo=grpo", the gain of study_lib.sh's one-method study)."""
    from arl.analysis.tables import contrast_table

    root = tmp_path / "one"
    for seed, final in ((1, 0.3), (2, 0.5)):
        _write_run(root / f"algo=grpo,lr=1e-5,x=[1,2],seed={seed}", {"val/success_rate": [(0, 0.2), (10, final)]})
    line = contrast_table(find_runs(root), ["algo=grpo"], "gain over the start").splitlines()[2]
    assert line.startswith("| `algo=grpo` | 2 | +0.200 [") and line.endswith("| 1: +0.100, 2: +0.300 |")
    assert "| 2 |" in contrast_table(find_runs(root), ["lr=1e-5,x=[1,2]"], "gain over the start").splitlines()[2]
    # a name two settings have is not resolved
    _write_run(root / "algo=grpo,lr=1e-4,x=[1,2],seed=1", {"val/success_rate": [(0, 0.2), (10, 0.1)]})
    assert "no setting named 'algo=grpo'" in contrast_table(find_runs(root), ["algo=grpo"], "gain over the start")


def test_an_archived_run_reports_like_the_original(tmp_path):
    """scripts/archive_runs.sh keeps the finished runs' events, config and best checkpoint name."""
    import subprocess

    from arl_testing import ROOT

    src = tmp_path / "sweep"
    for seed, finished in ((1, True), (2, False), (3, True)):
        run = src / f"algo=grpo,seed={seed}"
        _write_run(run, {"val/success_rate": [(0, 0.25), (10, 0.5), (20, 0.375)]})
        (run / ".hydra").mkdir()
        (run / ".hydra" / "overrides.yaml").write_text(f"- algo=grpo\n- seed={seed}\n")
        (run / "checkpoints").mkdir()
        if seed == 3:  # a sharded (FSDP) best checkpoint: a folder of shards
            (run / "checkpoints" / "best-iter20.ckpt").mkdir()
            (run / "checkpoints" / "best-iter20.ckpt" / "__0_0.distcp").write_bytes(b"shard")
        else:
            (run / "checkpoints" / "best-iter10.ckpt").write_bytes(b"weights")
        (run / "policy_hf").mkdir()  # seed 2 finished once and is training on: its old policy is still there
        if finished:
            (run / "rl_results.json").write_text('{"iterations_done": 20}\n')
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "archive_runs.sh"), str(src), str(tmp_path / "kept")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "archived 2 finished runs" in proc.stdout, proc.stderr
    assert "(0 archived before and unchanged, 1 not finished, left out)" in proc.stdout
    kept = {r.name: r for r in find_runs(tmp_path / "kept")}
    assert sorted(kept) == ["algo=grpo,seed=1", "algo=grpo,seed=3"]
    original = {r.name: r for r in find_runs(src)}
    assert kept["algo=grpo,seed=1"].best_checkpoint == original["algo=grpo,seed=1"].best_checkpoint == "best-iter10.ckpt"
    assert kept["algo=grpo,seed=3"].best_checkpoint == "best-iter20.ckpt"
    assert kept["algo=grpo,seed=1"].scalars == original["algo=grpo,seed=1"].scalars
    for name in kept:
        assert not (tmp_path / "kept" / name / "checkpoints").exists()  # no weights in the archive
        assert (tmp_path / "kept" / name / "rl_results.json").exists()
    # archived again after a new machine copied the runs back and resumed the multirun (which rewrote
    # seed 1's launcher settings): the unchanged record leaves the archive as it was; seed 3 trained on
    (src / "algo=grpo,seed=1" / ".hydra" / "overrides.yaml").write_text("- algo=grpo\n- seed=1\n- hydra.launcher.n_jobs=2\n")
    (src / "algo=grpo,seed=3" / "rl_results.json").write_text('{"iterations_done": 30}\n')
    again = subprocess.run(["bash", str(ROOT / "scripts" / "archive_runs.sh"), str(src), str(tmp_path / "kept")],
                           capture_output=True, text=True)
    assert again.returncode == 0 and "archived 1 finished runs" in again.stdout, again.stderr
    assert "(1 archived before and unchanged, 1 not finished, left out)" in again.stdout
    assert "n_jobs" not in (tmp_path / "kept" / "algo=grpo,seed=1" / ".hydra" / "overrides.yaml").read_text()
    assert "30" in (tmp_path / "kept" / "algo=grpo,seed=3" / "rl_results.json").read_text()


def test_smoothing_is_a_centred_moving_average():
    from arl.analysis.plots import smooth

    series = [(1, 0.0), (2, 1.0), (3, 0.0), (4, 1.0), (5, float("nan"))]
    assert smooth(series, 3) == [(1, 0.5), (2, pytest.approx(1 / 3)), (3, pytest.approx(2 / 3)), (4, 0.5), (5, 1.0)]
    assert smooth(series, 1) == series and smooth([], 5) == []


def test_success_per_task_type_from_start_to_final(tmp_path):
    from arl.analysis.tables import type_table

    root = tmp_path / "m"
    for seed, (heat, look) in enumerate([((0.5, 0.75), (0.2, 0.2)), ((0.5, 0.25), (0.4, 0.6))], start=1):
        _write_run(root / f"algo=sampo,seed={seed}", {
            "val/success_rate": [(0, 0.4), (30, 0.5)],
            "val/success_rate/heat": [(0, heat[0]), (30, heat[1])],
            "val/success_rate/look": [(0, look[0]), (30, look[1])],
        })
    _write_run(root / "algo=grpo,seed=1", {"val/success_rate": [(0, 0.4), (30, 0.3)]})  # no per-type tags
    lines = type_table(find_runs(root)).splitlines()
    assert lines[0] == "| setting | seeds | heat | look |"
    # heat: start 0.5, finals 0.75 and 0.25 (mean 0.5, std 0.354, t(1) 12.706 -> +-3.177), gains +0.25, -0.25
    half = 12.706 * math.sqrt(0.125) / math.sqrt(2)
    assert lines[2] == "| `algo=grpo` | 1 | - | - |"  # runs sort by name
    row = lines[3]
    assert row.startswith(f"| `algo=sampo` | 2 | 0.500 -> 0.500 [{0.5 - half:.3f}, {0.5 + half:.3f}] (gain +0.000 [")
    assert "| 0.300 -> 0.400 [" in row and "(gain +0.100 [" in row  # look: starts 0.2, 0.4; finals 0.2, 0.6
    text = write_report(root, tmp_path / "out").read_text()
    assert "## Success per task type" in text and "![success_by_type](success_by_type.png)" in text
    assert (tmp_path / "out" / "success_by_type.png").stat().st_size > 0
    _write_run(tmp_path / "n" / "algo=grpo,seed=1", {"val/success_rate": [(0, 0.4)]})
    assert type_table(find_runs(tmp_path / "n")) == ""
    assert "## Success per task type" not in write_report(tmp_path / "n", tmp_path / "out2").read_text()
    assert not (tmp_path / "out2" / "success_by_type.png").exists()


def test_mcnemar_exact_by_hand():
    from arl.analysis.stats import mcnemar_exact

    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # both tails of Bin(5, 1/2): 2 x 1/32
    assert mcnemar_exact(1, 7) == pytest.approx(2 * (1 + 8) / 256)  # P(X <= 1), X ~ Bin(8, 1/2), twice
    assert mcnemar_exact(7, 1) == mcnemar_exact(1, 7)


def test_game_by_game_pairs_the_first_and_last_validation(tmp_path):
    import json

    from arl.analysis.games import games_table, paired_games

    root = tmp_path / "m"
    outcomes = {  # seed -> (won at iteration 0, won at iteration 30) per task seed
        1: {100: (0, 1), 101: (0, 1), 102: (1, 1), 103: (1, 0)},
        2: {100: (0, 1), 101: (0, 0), 102: (0, 1), 104: (1, 1)},
    }
    for seed, games in outcomes.items():
        run = root / f"algo=sampo,seed={seed}"
        _write_run(run, {"val/success_rate": [(0, 0.5), (30, 0.75)]})
        (run / "val_episodes").mkdir()
        for step, col in ((0, 0), (15, None), (30, 1)):
            rows = [{"seed": s, "task_type": "heat", "won": bool(w[col] if col is not None else 0)} for s, w in games.items()]
            (run / "val_episodes" / f"iter{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _write_run(root / "algo=grpo,seed=1", {"val/success_rate": [(0, 0.5), (30, 0.5)]})  # no episodes: no row
    late = root / "algo=grpo,seed=2"  # episodes from iteration 15 on only (a resumed run): no start to pair with
    _write_run(late, {"val/success_rate": [(0, 0.5), (30, 0.5)]})
    (late / "val_episodes").mkdir()
    for step in (15, 30):
        (late / "val_episodes" / f"iter{step}.jsonl").write_text(json.dumps({"seed": 100, "won": True}) + "\n")
    runs = find_runs(root)
    by_seed = {r.overrides.get("seed"): paired_games(r) for r in runs if r.group == "algo=sampo"}
    assert by_seed == {"1": (4, 2, 3, 2, 1), "2": (4, 1, 3, 2, 0)}  # iteration 15 is neither first nor last
    lines = games_table(runs).splitlines()
    assert len(lines) == 3  # grpo has no start episodes
    # game by game over the seeds (won last minus won at the start): 100 +2, 101 +1, 102 +1, 103 -1, 104 0:
    # 3 games up, 1 down; the sign test, 2 x P(X <= 1) for X ~ Bin(4, 1/2) = 2 x 5 / 16
    assert lines[2] == f"| `algo=sampo` | 2 | 8 | 3 (0.375) | 6 (0.750) | 4 | 1 | 3 / 1 | {2 * 5 / 16:.3g} |"
    assert "## Game by game" in write_report(root, tmp_path / "out").read_text()


# ----------------------------------------------------------------- two policies game by game
def _episodes(path, won, types="aabbcc", extra=()):
    """An episodes file as src/eval.py writes it: task seeds 1..len(won), plus ``extra`` rows."""
    import json

    rows = [{"seed": i + 1, "task_type": f"type_{types[i]}", "won": bool(w), "turns": []} for i, w in enumerate(won)]
    rows += list(extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_report_names_its_runs_relative_to_the_repository(tmp_path, monkeypatch):
    """The header of report.md names the multirun folder from the repository that holds it (the nearest
    folder with a ``.git``), never the path of the machine's checkout; outside any repository, from the
    working folder."""
    from arl.analysis.report import shown_path

    repo = tmp_path / "clone"
    (repo / ".git").mkdir(parents=True)  # a clone; a worktree's .git is a file, which counts too
    runs = repo / "docs" / "results" / "study" / "runs"
    _write_run(runs / "algo=grpo,seed=1", {"val/success_rate": [(0, 0.5), (30, 0.75)]})
    text = write_report(runs, tmp_path / "out").read_text()
    assert "1 runs from `docs/results/study/runs`." in text and str(tmp_path) not in text
    (repo / ".git").rmdir()
    (repo / ".git").write_text("gitdir: elsewhere\n")
    assert shown_path(runs) == "docs/results/study/runs"
    (repo / ".git").unlink()
    monkeypatch.chdir(repo)
    assert shown_path(runs) == "docs/results/study/runs"  # no repository: from the working folder


def test_compare_table_by_hand(tmp_path):
    from arl.analysis.games import compare_table

    # pair 1: seeds 2 and 4 gained, 3 lost (4 - 3 won: gain 1/6); a game only one side played and an
    # episode that ended with an environment error are left out. Pair 2: all six lost.
    b1 = _episodes(tmp_path / "start_s1" / "val_episodes.jsonl", [1, 0, 1, 0, 0, 1],
                   extra=[{"seed": 9, "task_type": "type_a", "won": False, "env_error": True}])
    a1 = _episodes(tmp_path / "rl_s1.jsonl", [1, 1, 0, 1, 0, 1], extra=[{"seed": 7, "task_type": "type_a", "won": True}])
    b2 = _episodes(tmp_path / "start_s2.jsonl", [1] * 6)
    a2 = _episodes(tmp_path / "rl_s2.jsonl", [0] * 6)
    table = compare_table([(b1.parent, a1), (b2, a2)])
    assert "| 6 | 3 (0.500) | 4 (0.667) | 2 | 1 | 1 | +0.167 |" in table  # McNemar(2, 1): p = 2 x 4/8, capped at 1
    assert "| 6 | 6 (1.000) | 0 (0.000) | 0 | 6 | 0.0312 | -1.000 |" in table  # 2 x (1/2)^6
    # mean of +1/6 and -1: -0.4167; half-width t(1) 12.706 x (7/6 / sqrt 2) / sqrt 2 = 7.4118: [-7.8285, +6.9952]
    assert "Gain over 2 pair(s), mean and 95 % t interval: -0.417 [-7.828, +6.995]" in table
    # over the games, the pairs pooled (after minus before): game 1 -1, 2 0, 3 -2, 4 0, 5 -1, 6 -1: none up,
    # 4 down; the sign test 2 x (1/2)^4 (McNemar on the 2 gained and 7 lost would count each game twice)
    assert ("pooled games gained 2, lost 7; over the games (each one unit, the pairs pooled) 0 up, 4 down, "
            "sign test p 0.125.") in table
    assert "| type_a | 4 | 0.750 | 0.500 |" in table and "| type_b | 4 | 0.750 | 0.250 |" in table
    assert "| type_c | 4 | 0.750 | 0.250 |" in table


def test_compare_cli_refuses_odd_arguments_and_games_in_common(tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from compare import main

    a = _episodes(tmp_path / "a.jsonl", [1, 0])
    assert main([str(a)]) == 2 and "in pairs" in capsys.readouterr().err
    other = tmp_path / "b.jsonl"
    other.write_text('{"seed": 40, "task_type": "x", "won": true}\n')
    assert main([str(a), str(other)]) == 2 and "share no held-out game" in capsys.readouterr().err
    assert main([str(a), str(tmp_path / "missing")]) == 2 and "no episodes file" in capsys.readouterr().err
    assert main([str(a), str(a), "--out", str(tmp_path / "t.md")]) == 0
    assert "| 2 | 1 (0.500) | 1 (0.500) | 0 | 0 | 1 | +0.000 |" in (tmp_path / "t.md").read_text()


def test_validation_at_each_check_by_hand(tmp_path):
    root = tmp_path / "m"
    _write_run(root / "algo=grpo,seed=1", {"val/success_rate": [(0, 0.2), (20, 0.1), (40, 0.3)]})
    _write_run(root / "algo=grpo,seed=2", {"val/success_rate": [(0, 0.4), (20, 0.3)]})  # not yet at 40
    _write_run(root / "algo=gigpo,seed=1", {"val/success_rate": [(0, 0.2), (20, 0.25), (40, 0.5)]})
    runs = find_runs(root)
    lines = validation_table(runs).splitlines()
    assert lines[0] == "| run | it 0 | it 20 | it 40 |"
    assert "| `algo=grpo,seed=1` | 0.200 | 0.100 | 0.300 |" in lines
    assert "| `algo=grpo,seed=2` | 0.400 | 0.300 | - |" in lines
    assert "| `algo=gigpo,seed=1` | 0.200 | 0.250 | 0.500 |" in lines
    # the mean over the seeds that reached each check: (0.2 + 0.4) / 2, (0.1 + 0.3) / 2, 0.3 alone
    assert "| mean of `algo=grpo` (2 seeds) | 0.300 | 0.200 | 0.300 |" in lines
    assert "| mean of `algo=gigpo` (1 seed) | 0.200 | 0.250 | 0.500 |" in lines
    assert len(lines) == 2 + 3 + 2
    assert "## Validation success at each check" in write_report(root, tmp_path / "out").read_text()
    # one check says nothing over time; more columns than fit are left to the curves
    one = tmp_path / "one"
    _write_run(one / "seed=1", {"val/success_rate": [(0, 0.2)]})
    assert validation_table(find_runs(one)) == ""
    wide = tmp_path / "wide"
    _write_run(wide / "seed=1", {"val/success_rate": [(i, 0.1) for i in range(13)]})
    assert validation_table(find_runs(wide)) == ""


def test_the_stability_table_by_hand(tmp_path):
    from arl.analysis.runs import find_runs
    from arl.analysis.tables import stability_table

    # two seeds of one setting: KL 0.1, 0.3 (mean 0.2, peak 0.3) and 0.2, 0.6 (mean 0.4, peak 0.6); tokens past the
    # binding clip 0.01 + 0.02 and 0.03 + 0.04; the sequence ratio's p95 - p05 0.2 and 0.4; entropy 1.0 -> 0.5, 0.8 -> 0.7
    for seed, (kl, above, below, p95, ent) in {1: ([0.1, 0.3], 0.01, 0.02, 1.1, [1.0, 0.5]),
                                              2: ([0.2, 0.6], 0.03, 0.04, 1.3, [0.8, 0.7])}.items():
        _write_run(tmp_path / f"algo=sampo,seed={seed}", {
            "actor/kl_loss": [(1, kl[0]), (2, kl[1])], "is/tokens_above_pos": [(1, above), (2, above)],
            "is/tokens_below_neg": [(1, below), (2, below)], "is/seq_ratio_p95": [(1, p95), (2, p95)],
            "is/seq_ratio_p05": [(1, 0.9), (2, 0.9)], "actor/entropy": [(1, ent[0]), (2, ent[1])],
            "val/success_rate": [(0, 0.5), (2, 0.6)]})
    table = stability_table(find_runs(tmp_path)).splitlines()
    cells = [c.strip() for c in table[2].split("|")[1:-1]]
    half = 12.706 * (0.2 / math.sqrt(2)) / math.sqrt(2)  # t(1) x sd / sqrt(2) over the KL means 0.2, 0.4 (sd 0.2 / sqrt 2)
    assert cells[:3] == ["`algo=sampo`", "2", f"0.300 [{0.3 - half:.3f}, {0.3 + half:.3f}]"]
    assert cells[3].startswith("0.450 [")  # peak KL 0.3, 0.6
    assert cells[5].startswith("0.050 [")  # tokens past the clip: 0.03 and 0.07
    assert cells[6].startswith("0.300 [")  # p95 - p05: 0.2 and 0.4
    assert cells[7].startswith("0.900 [") and cells[8].startswith("0.600 [")  # entropy first 1.0, 0.8; last 0.5, 0.7
    assert cells[-1] == "0/2"
    assert stability_table([]) == ""
