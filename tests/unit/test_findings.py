"""The results page's findings (arl.analysis): a fixture archive of 2 methods x 3 seeds with known
values, the numbers of its findings and threshold tables by hand, the page check, studies of other
envs (math_tool, ALFWorld: their description, a single setting's gain, the per-type and game-by-game
blocks), and the real docs/results.md against the real archives."""

from __future__ import annotations

import math
import re
import statistics
import sys
from pathlib import Path

import pytest
import yaml

from arl_testing import ROOT, write_rl_events

sys.path.insert(0, str(ROOT / "src"))

CONFIG = {
    "seed": 1,
    "model": {"name": "tiny", "init_from": "/checkout/logs/study/bc_start/bc_policy_hf"},
    "env": {"name": "sokoban", "max_turns": 10, "kwargs": {"dim_room": [6, 6], "num_boxes": 1}},
    "rollout": {"temperature": 1.0, "val_temperature": 0.6, "val_top_p": 0.95, "val_top_k": 20, "val_episodes": 16,
                "tasks_per_iteration": 2, "group_size": 4},
    "rl": {"iterations": 2, "val_every": 2, "mini_batches": 8, "optimizer": {"lr": 0.0003}},
    "callbacks": {"collapse": {"kl_threshold": 1.0}},
}

# per seed 1, 2, 3: training success (every iteration), final validation success, peak KL, seconds an iteration
RUNS = {
    "grpo": {"train": [0.5, 0.75, 0.25], "final": [0.5, 0.625, 0.375], "peak": [0.5, 0.95, 0.3], "secs": [10, 10, 10],
             "fired": [False, False, False]},
    "cispo": {"train": [0.25, 0.5, 0.125], "final": [0.25, 0.625, 0.125], "peak": [1.5, 1.05, 1.25], "secs": [5, 6, 4],
              "fired": [True, True, True]},
}

SPEC = """
alpha: 0.05
names: {algo=grpo: GRPO, algo=cispo: CISPO}
studies:
  s1:
    title: "Stage 1: fixture"
    archive: s1/runs
    report: s1/report.md
    command: STAGE=1 bash scripts/arena_study.sh
    family: [algo=cispo - algo=grpo]
    measures: [final, training]
    thresholds: [0.9, 1.0, 1.1]
    collapse_tests: {tolerant: [algo=cispo], baseline: algo=grpo}
findings:
  - id: tolerant
    finding: Tolerant clipping trains worse
    paper: "collapse after ~130 steps"
    study: s1
    contrasts: [algo=cispo - algo=grpo]
    measures: [training, final]
    expect: below
    headline: true
  - id: count
    finding: Tolerant clipping collapses
    paper: "collapse"
    study: s1
    kind: collapse-count
    expect: above
  - id: recorded
    finding: "Ours: a recorded gain"
    paper: "-"
    ours: true
    kind: recorded
    measure: "a gain recorded by hand"
    values: {1: 0.1, 2: 0.2, 3: 0.3}
    source: "recorded, no archive"
    expect: above
    command: bash scripts/default_job.sh
  - id: cost
    finding: "Ours: CISPO is cheaper"
    paper: "-"
    ours: true
    study: s1
    kind: ratio
    contrasts: [algo=cispo / algo=grpo]
    measures: [iteration-seconds]
    expect: below-one
pages:
  ../page.md: [findings, s1-threshold]
"""

PAGE = """# A page

Text before.

<!-- findings:begin -->
<!-- findings:end -->

Between.

<!-- s1-threshold:begin -->
<!-- s1-threshold:end -->

After.
"""



@pytest.fixture
def archive(tmp_path):
    """tmp/results/findings.yaml, tmp/results/s1/runs/<algo=..,seed=..> (6 runs), tmp/page.md."""
    runs = tmp_path / "results" / "s1" / "runs"
    for algo, v in RUNS.items():
        for i, seed in enumerate((1, 2, 3)):
            folder = runs / f"algo={algo},seed={seed}"
            write_rl_events(folder, {
                "rollout/success_rate": [(1, v["train"][i]), (2, v["train"][i])],
                "val/success_rate": [(0, 0.5), (2, v["final"][i])],
                "actor/kl_loss": [(1, 0.1), (2, v["peak"][i])],
                "collapse/events": [(1, 0.0), (2, 1.0 if v["fired"][i] else 0.0)],
                "collapse/kl": [(1, 0.0), (2, 1.0 if v["fired"][i] else 0.0)],
                "rollout/valid_action_ratio": [(1, 0.25 if algo == "cispo" else 0.75), (2, 1.0)],
                "val/valid_action_ratio": [(0, 1.0), (2, 1.0)],
                "perf/iteration_s": [(1, v["secs"][i]), (2, v["secs"][i])],
                "train/optimizer_steps": [(1, 8.0), (2, 16.0)],  # a running count: 16 steps a run
                "rollout/episodes": [(1, 8.0), (2, 8.0)],  # 2 groups x 4 an iteration
            })
            (folder / ".hydra").mkdir()
            (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "seed": seed}))
            (folder / ".hydra" / "overrides.yaml").write_text(f"- algo={algo}\n- seed={seed}\n")
    (tmp_path / "results" / "findings.yaml").write_text(SPEC)
    (tmp_path / "page.md").write_text(PAGE)
    return tmp_path


def _spec(archive):
    from arl.analysis.findings import load_spec

    return load_spec(archive / "results" / "findings.yaml")


def _t_interval(values):
    m = statistics.fmean(values)
    half = {2: 4.303, 1: 12.706}[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half


def _p_df2(t):  # Student's t with 2 degrees of freedom: P(|T| > |t|) = 1 - |t| / sqrt(t^2 + 2)
    return 1 - abs(t) / math.sqrt(t * t + 2)


def test_the_t_distribution_and_holm_by_hand():
    from arl.analysis.contrasts import holm, paired_p, t_p_two_sided

    for t in (0.3, 1.0, 2.5, 12.0):
        assert t_p_two_sided(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), abs=1e-12)  # Cauchy
        assert t_p_two_sided(-t, 2) == pytest.approx(_p_df2(t), abs=1e-12)
    assert t_p_two_sided(3.182, 3) == pytest.approx(0.05, abs=2e-4)  # the tabled 97.5 % quantile
    assert t_p_two_sided(2.086, 20) == pytest.approx(0.05, abs=2e-4)
    # diffs -0.25, -0.25, -0.125: mean -5/24, sd sqrt(3)/24, t = -5 exactly
    assert paired_p([-0.25, -0.25, -0.125]) == pytest.approx(_p_df2(5.0), abs=1e-12)
    assert paired_p([0.5, 0.5]) == 0.0 and paired_p([0.0, 0.0]) == 1.0 and paired_p([0.3]) == 1.0
    # Holm: sorted 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, then 0.04 x 1 held up to 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_fisher_on_the_issue_s_counts():
    """README's p = 0.029 is the per-method test (4/4 against 0/4); the pooled 8/8 against 0/4 is 1/495."""
    from arl.analysis.stats import fisher_exact

    assert fisher_exact(4, 0, 0, 4) == pytest.approx(2 / 70)  # 0.029
    assert fisher_exact(8, 0, 0, 4) == pytest.approx(1 / 495)  # 0.002: only this table is as extreme
    assert fisher_exact(3, 0, 0, 3) == pytest.approx(2 / 20)  # seeds 2-4 only: 0.100
    assert fisher_exact(4, 0, 1, 3) == pytest.approx(10 / 70)  # GRPO 1/4 at KL 0.95: 0.143


def test_the_findings_table_by_hand(archive):
    from arl.analysis.findings import finding_row
    from arl.analysis.pages import generate

    spec = _spec(archive)
    diffs_train = [c - g for c, g in zip(RUNS["cispo"]["train"], RUNS["grpo"]["train"])]
    m, lo, hi = _t_interval(diffs_train)
    assert (round(m, 3), round(lo, 3), round(hi, 3)) == (-0.208, -0.388, -0.029)
    p = _p_df2(5.0)  # 0.038
    row = finding_row(spec, spec.findings[0])
    train, final = row.lines
    assert train.ours == "training success (T 1.0): CISPO - GRPO -0.208 (0/3 above 0)"
    assert train.interval == (f"[{lo:+.3f}, {hi:+.3f}] (t 95 %, 3 paired seeds, uncorrected); p {p:.3f}, "
                              f"Holm {p:.3f} over 1 contrast")
    # p 0.038 < 0.05, below 0 as expected; a finding of the paper names whose metric each measure is
    assert train.verdict == "training success (ours, not the paper's metric): **reproduced**"
    diffs_final = [c - g for c, g in zip(RUNS["cispo"]["final"], RUNS["grpo"]["final"])]  # -0.25, 0, -0.25
    m, lo, hi = _t_interval(diffs_final)
    assert final.ours == f"final success (T 0.6): CISPO - GRPO {m:+.3f} (0/3 above 0)"
    assert final.interval.startswith(f"[{lo:+.3f}, {hi:+.3f}] (t 95 %, 3 paired seeds, uncorrected); "
                                     f"p {_p_df2(2.0):.3f}")  # t = -2 exactly
    assert final.verdict == "final success (the paper's metric): **inconclusive**"
    assert row.notes == ["at Stage 1 scale"] and row.command == "`STAGE=1 bash scripts/arena_study.sh`"
    assert row.archive == "`s1` (6 runs; no run records, no per-game episodes)"

    count = finding_row(spec, spec.findings[1]).lines[0]
    assert count.ours.endswith("CISPO 3/3, GRPO 0/3")
    assert count.interval.startswith("Fisher exact, two-sided: p 0.100 per method, uncorrected; Holm 0.100")
    assert "**inconclusive** as a count" in count.verdict and "from 0.9500" in count.verdict and "up to 1.0500" in count.verdict

    recorded = finding_row(spec, spec.findings[2]).lines[0]  # 0.1, 0.2, 0.3: t = 2 sqrt(3)
    assert recorded.ours == "a gain recorded by hand: seed 1 +0.100, seed 2 +0.200, seed 3 +0.300; mean +0.200"
    assert recorded.interval.startswith(f"[{0.2 - 4.303 * 0.1 / math.sqrt(3):+.3f}, {0.2 + 4.303 * 0.1 / math.sqrt(3):+.3f}] "
                                        f"(t 95 %, 3 seeds); p {_p_df2(2 * math.sqrt(3)):.3f}")
    assert recorded.verdict == "**inconclusive**"  # p 0.074

    cost = finding_row(spec, spec.findings[3]).lines[0]  # ratios 0.5, 0.6, 0.4: t = -5 sqrt(3)
    assert cost.ours == "seconds an iteration, CISPO / GRPO: 0.50 (3/3 seeds below 1)"
    assert recorded.definite is False and cost.definite is True
    assert cost.interval.startswith(f"[{0.5 - 4.303 * 0.1 / math.sqrt(3):.2f}, {0.5 + 4.303 * 0.1 / math.sqrt(3):.2f}]")
    assert f"p {_p_df2(5 * math.sqrt(3)):.3f} against 1" in cost.interval and cost.verdict == "**holds**"

    table = generate(spec, "findings")
    assert table.splitlines()[0].startswith("| finding | the paper | ours")
    assert "| Tolerant clipping trains worse | collapse after ~130 steps | training success (T 1.0): CISPO - GRPO -0.208" in table
    # the scale: steps and episodes from the event files, the start's spread over the seeds (0.5 each),
    # the runs below their start (CISPO 0.25, 0.625, 0.125 and GRPO 0.5, 0.625, 0.375 against 0.5: 3)
    assert generate(spec, "s1-scale") == (
        "Scale: tiny model; Sokoban 6x6 with 1 box and 10 turns; 2 iterations at lr 0.0003, 16 optimiser steps a "
        "run (`rl.mini_batches` 8 a rollout); training episodes a run: 16 (every run); validation: 16 held-out levels at T 0.6, "
        "top-p 0.95, top-k 20; 3 paired seeds (1, 2, 3); the start policy scored 0.500 at iteration 0 over these "
        "sampling seeds; 3 of 6 runs ended below their start.")
    # README's table: a row per finding, the paper's and ours, whatever its verdict: the environment, the
    # first measure's contrasts with their intervals, the verdict in a word (no section named: no link)
    headline = generate(spec, "headline").split("\n\n")
    rows = headline[0].splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| Tolerant clipping trains worse", "| Tolerant clipping collapses",
                                                 "| Ours: a recorded gain", "| Ours: CISPO is cheaper"]
    m, lo, hi = _t_interval([-0.25, -0.25, -0.125])  # training success, CISPO - GRPO per seed
    assert rows[0].split(" | ")[1:] == ["Sokoban 6x6 with 1 box",
                                        f"training success (T 1.0): CISPO - GRPO {m:+.3f} [{lo:+.3f}, {hi:+.3f}]",
                                        "**reproduced**", "- |"]
    assert rows[2].split(" | ")[3] == "**inconclusive**"  # the recorded gain, p 0.074
    assert headline[1] == ("The verdicts hold at this project's scale only: the tiny model, 2 iterations a run, 16 "
                           "optimiser steps a run, on Sokoban.")


def test_the_threshold_table_by_hand(archive):
    from arl.analysis.pages import generate

    rows = generate(_spec(archive), "s1-threshold").splitlines()
    assert rows[0] == "| KL threshold | CISPO | GRPO | p CISPO vs GRPO | p CISPO pooled |"
    # peaks: CISPO 1.5, 1.05, 1.25; GRPO 0.5, 0.95, 0.3. At 0.9: 3/3 against 1/3, whose tables with the
    # margins have probabilities 0.2, 0.6, 0.2 (x = 1, 2, 3): p = 0.4. At 1.0: 3/3 against 0/3: 2/20.
    # At 1.1: 2/3 against 0/3: probabilities 0.2, 0.6, 0.2 for x = 0, 1, 2: p = 0.4
    assert rows[2] == "| 0.9 | 3/3 | 1/3 | 0.400 | 0.400 |"
    assert rows[3] == "| 1.0 | 3/3 | 0/3 | 0.100 | 0.100 |"
    assert rows[4] == "| 1.1 | 2/3 | 0/3 | 0.400 | 0.400 |"
    assert rows[5] == "| the detector as run (all three rules) | 3/3 | 0/3 | 0.100 | 0.100 |"
    assert "from 0.9500 (GRPO's highest peak) up to 1.0500 (the lowest tolerant peak)" in rows[7]


def test_without_a_seed_and_the_format_and_collapse_tables(archive):
    from arl.analysis.pages import generate

    spec = _spec(archive)
    text = generate(spec, "s1-without-seed-1")
    # seeds 2 and 3: training diffs -0.25, -0.125; t(1) 12.706
    m, lo, hi = _t_interval([-0.25, -0.125])
    assert "| CISPO - GRPO | " in text and f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}] (0/2 above 0)" in text
    assert "over the 2 paired seeds (2, 3)" in text
    assert text.endswith("CISPO 2/2 against GRPO 0/2: Fisher p 0.333 per method (uncorrected); pooled 2/2: p 0.333.")
    fmt = generate(spec, "s1-format").splitlines()
    assert fmt[2] == "| CISPO | 1.000 / 1.000 | 0.250 | seed 1, iteration 1 | 3 (3) |"
    collapses = generate(spec, "s1-collapses").splitlines()
    assert collapses[2] == "| CISPO seed 1 | 2 | 1 | kl | 1.500 | 0.250 | 0.500 | 0.250 | 0.500 |"
    assert collapses[-1] == ("3 runs had a detector event; 0 of them ended with a higher final success than GRPO's "
                             "run of the same seed.")


def test_a_record_rewritten_by_a_reload_is_named(archive):
    """A run whose record says it resumed, and whose newest event file (by the time in its name, not
    its mtime) holds no rollout: the record of a finished run written again by a reload."""
    import json
    import os

    from torch.utils.tensorboard import SummaryWriter

    from arl.analysis.pages import generate

    run = archive / "results" / "s1" / "runs" / "algo=grpo,seed=3"
    for r in (archive / "results" / "s1" / "runs").iterdir():
        (r / "rl_results.json").write_text(json.dumps({"iterations_done": 2, "val_before_rl": {}}))
    (run / "rl_results.json").write_text(json.dumps({"iterations_done": 2, "resumed_from": "last.ckpt"}))
    writer = SummaryWriter(str(run / "tensorboard" / "rl"))  # the reload: a file and nothing in it
    writer.close()
    newest = max((run / "tensorboard" / "rl").glob("events.out.tfevents.*"), key=os.path.getmtime)
    newest.rename(newest.with_name("events.out.tfevents.9999999999.host.1.0"))
    for old in (run / "tensorboard" / "rl").glob("events.out.tfevents.1*"):
        os.utime(old, (2e9, 2e9))  # a checkout's mtimes say nothing of the order
    row = generate(_spec(archive), "archives").splitlines()[2]
    assert row.startswith("| [`s1`](s1/report.md) | 6 | 6 | 6 | 0 | 1 |")  # linked from the archives' index
    assert "1 record written by a run resumed from its checkpoint holds no `val_before_rl`" in row
    assert "the record of GRPO seed 3 was rewritten by a reload of the already finished run" in row


def test_a_folder_name_reused_by_another_archive_is_named_only_for_a_run_of_the_same_overrides(archive):
    """Short run folder names (``<algo>_seed<k>``) repeat across archives by design; the archives block
    names a reused one only where the other archive's run has the same overrides and another start:
    there neither the name nor the label tells the two apart."""
    import shutil

    from arl.analysis.findings import load_spec
    from arl.analysis.pages import generate

    results = archive / "results"
    shutil.copytree(results / "s1" / "runs", results / "s2" / "runs")
    for run in (results / "s2" / "runs").iterdir():
        config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        config["model"]["init_from"] = "/checkout/logs/study/bc_start_weak/bc_policy_hf"
        (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
        if run.name.startswith("algo=cispo"):  # another setting under the same name
            with (run / ".hydra" / "overrides.yaml").open("a") as f:
                f.write("- rl.iterations=2\n")
    spec_text = SPEC.replace("findings:\n", "  s2:\n    title: \"Stage 2: fixture\"\n    archive: s2/runs\n"
                             "    command: STAGE=2 bash scripts/arena_study.sh\nfindings:\n", 1)
    (results / "findings.yaml").write_text(spec_text)
    rows = generate(load_spec(results / "findings.yaml"), "archives").splitlines()[2:]
    s1, s2 = (next(r for r in rows if r.startswith(f"| [`{k}`]")) for k in ("s1", "s2"))
    assert "reuse the names" not in s1
    assert "3 run folders reuse the names of `s1`'s runs for runs from another start (`model.init_from`)" in s2


def test_a_repeated_step_takes_the_value_of_the_file_written_last_whatever_the_mtimes(tmp_path):
    """A resumed run logs into a new event file; after a copy or a checkout the files' mtimes no
    longer say which came last, the creation time in their names does (arl.analysis.runs.event_files)."""
    import os

    from arl.analysis.runs import event_files, read_scalars

    run = tmp_path / "run"
    for value in (0.25, 0.75):  # the first process, then the resumed one, both logging step 3
        write_rl_events(run, {"val/success_rate": [(3, value)]})
    first, second = sorted((run / "tensorboard" / "rl").glob("events.out.tfevents.*"), key=os.path.getmtime)
    first = first.rename(first.with_name("events.out.tfevents.1700000000.host.1.0"))
    second = second.rename(second.with_name("events.out.tfevents.1700000100.host.2.0"))
    os.utime(first, (2e9, 2e9))  # the older file now looks newer
    assert event_files(run / "tensorboard" / "rl") == [first, second]
    assert read_scalars(run)["val/success_rate"] == [(3, 0.75)]


def test_the_page_check_names_every_number_that_differs(archive, capsys):
    from arl.analysis.pages import check_pages, write_pages
    from report import main

    spec = _spec(archive)
    page = archive / "page.md"
    assert len(check_pages(spec)) > 0  # empty blocks: every line missing
    assert [p.name for p in write_pages(spec)] == ["page.md"]
    assert check_pages(spec) == []
    text = page.read_text()
    assert text.startswith("# A page\n\nText before.\n\n<!-- findings:begin -->\n| finding |") and text.endswith("\nAfter.\n")
    assert write_pages(spec) == []  # up to date: nothing written

    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("| Tolerant clipping trains worse"))
    lines[row] = lines[row].replace("CISPO - GRPO -0.208", "CISPO - GRPO -0.300", 1)
    t_row = next(i for i, line in enumerate(lines) if line.startswith("| 0.9 |"))
    lines[t_row] = "| 0.9 | 2/3 | 1/3 | 0.400 | 0.400 |"
    page.write_text("\n".join(lines) + "\n")
    problems = check_pages(spec)
    assert len(problems) == 2, problems
    assert problems[0].endswith(f"page.md:{row + 1}: [findings] row 'Tolerant clipping trains worse', column "
                                "'ours (measure: contrast, mean)': the page has -0.300, the archive gives -0.208")
    assert problems[1].endswith(f"page.md:{t_row + 1}: [s1-threshold] row '0.9', column 'CISPO': the page has 2, "
                                "the archive gives 3")
    assert main(["findings", str(spec.path), "--check"]) == 1
    out = capsys.readouterr()
    assert "the page has -0.300, the archive gives -0.208" in out.out and "2 difference(s)" in out.err
    assert main(["findings", str(spec.path), "--write"]) == 0
    assert main(["findings", str(spec.path), "--check"]) == 0
    assert page.read_text() == text  # regenerated: the page the archive gives

    page.write_text(text.replace("<!-- s1-threshold:begin -->", "").replace("<!-- s1-threshold:end -->", ""))
    assert any("no generated block 's1-threshold'" in p for p in check_pages(spec))
    assert main(["findings", str(archive / "nope.yaml")]) == 2


# ----------------------------------------------------------------- studies of other envs

MATH_ENV = {"name": "math_tool", "max_turns": 5,
            "kwargs": {"max_turns": 5, "templates": ["linear_equation", "linear_system"], "data_path": None}}
WEBSHOP_ENV = {"name": "webshop", "max_turns": 15,
               "kwargs": {"data_dir": "${oc.env:WEBSHOP_DATA,null}", "products_path": None, "n_products": 1000,
                          "goals_per_product": 10}}
ALFWORLD_ENV = {"name": "alfworld", "max_turns": 20,
                "kwargs": {"task_types": ["pick_and_place_simple", "look_at_obj_in_light"], "max_steps": 20}}

# per seed 1, 2: validation success at iteration 0 and at iteration 8 (the last)
GAIN_RUNS = {"sampo": {"start": [0.5, 0.25], "final": [0.625, 0.625]},  # gains +0.125, +0.375
             "grpo": {"start": [0.5, 0.25], "final": [0.5, 0.375]}}  # gains 0, +0.125
# per seed 1, 2, of the task type: (start, final)
TYPES = {"sampo": {"pick_and_place_simple": [(0.5, 0.75), (0.25, 0.75)], "look_at_obj_in_light": [(0.0, 0.5), (0.5, 0.5)]},
         "grpo": {"pick_and_place_simple": [(0.5, 0.5), (0.25, 0.5)], "look_at_obj_in_light": [(0.0, 0.25), (0.5, 0.0)]}}
# SAMPO's episodes per seed: task seed -> (won at iteration 0, won at iteration 8); GRPO has none
GAMES = {1: {100: (0, 1), 101: (0, 1), 102: (1, 1), 103: (1, 0)}, 2: {100: (0, 1), 101: (1, 1), 102: (0, 1), 103: (0, 0)}}

OTHER_SPEC = """
names: {algo=grpo: GRPO, algo=sampo: SAMPO}
studies:
  other_study:
    title: "Other: a study of another env"
    archive: other/runs
    command: bash scripts/other_study.sh
    family: [algo=sampo - algo=grpo, algo=sampo, algo=grpo]
    measures: [final, gain]
findings:
  - id: sampo-gain
    finding: "Ours: SAMPO improves on its start"
    paper: "-"
    ours: true
    study: other_study
    contrasts: [algo=sampo]
    measures: [gain]
    expect: above
pages:
  ../other.md: [other_study-types, other_study-games]
"""


def _other_study(root, env, types=False, scores=None, spec_text=None):
    """root/results/findings.yaml and root/results/other/runs/<algo>_seed<k>: 2 settings x 2 seeds of
    ``env`` (GAIN_RUNS; with ``types`` the per-type success of TYPES; with ``scores`` (algo -> [(start,
    final) per seed]) a WebShop-like ``val/score``; SAMPO's episodes of GAMES)."""
    import json

    runs = root / "results" / "other" / "runs"
    for algo, v in GAIN_RUNS.items():
        for i, seed in enumerate((1, 2)):
            folder = runs / f"{algo}_seed{seed}"
            scalars = {"val/success_rate": [(0, v["start"][i]), (8, v["final"][i])],
                       "rollout/success_rate": [(k, 0.5) for k in range(1, 9)]}
            if types:
                scalars.update({f"val/success_rate/{t}": [(0, s[i][0]), (8, s[i][1])] for t, s in TYPES[algo].items()})
            if scores:
                scalars["val/score"] = [(0, scores[algo][i][0]), (8, scores[algo][i][1])]
            write_rl_events(folder, scalars)
            (folder / ".hydra").mkdir()
            config = {**CONFIG, "seed": seed, "env": env, "rl": {**CONFIG["rl"], "iterations": 8, "val_every": 8}}
            (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
            (folder / ".hydra" / "overrides.yaml").write_text(f"- experiment=other\n- algo={algo}\n- seed={seed}\n")
            if algo == "sampo":
                (folder / "val_episodes").mkdir()
                for step, col in ((0, 0), (8, 1)):
                    rows = [{"seed": s, "task_type": "algebra", "won": bool(w[col])} for s, w in GAMES[seed].items()]
                    text = "".join(json.dumps(r) + "\n" for r in rows)
                    (folder / "val_episodes" / f"iter{step}.jsonl").write_text(text)
    (root / "results" / "findings.yaml").write_text(spec_text or OTHER_SPEC)
    return _spec(root)


def test_a_math_study_names_its_templates_and_held_out_problems(tmp_path):
    from arl.analysis.pages import generate

    spec = _other_study(tmp_path, MATH_ENV)
    study = spec.study("other_study")
    setup = generate(spec, "other_study-setup").split("\n\n")[0]
    assert setup == ("4 runs: 2 settings (GRPO, SAMPO) x seeds 1, 2; each 8 iterations of 2 groups x 4 episodes at "
                     "T 1.0 from the BC start `study/bc_start`, lr 0.0003, optimiser steps not logged "
                     "(`rl.mini_batches` 8 a rollout); math_tool, "
                     "generated problems of templates linear_equation, linear_system, 5 turns; validation every 8 iterations on "
                     "16 held-out problems at T 0.6, top-p 0.95, top-k 20.")
    # no optimiser steps or episodes logged here; starts 0.5 and 0.25 (seeds 1, 2); no run ended below
    # its start (GRPO seed 1 ended equal to it)
    assert study.scale == ("tiny model; math_tool (generated problems of templates linear_equation, linear_system) "
                           "with 5 turns; 8 iterations at lr 0.0003, optimiser steps not logged (`rl.mini_batches` 8 "
                           "a rollout); "
                           "training episodes a run: not logged; validation: 16 held-out problems at T 0.6, top-p 0.95, "
                           "top-k 20; 2 paired seeds (1, 2); the start policy scored 0.250-0.500 at iteration 0 over "
                           "these sampling seeds; 0 of 4 runs ended below their start")
    assert "the same 16 held-out problems sampled at T 0.6" in generate(spec, "findings")
    every = {**MATH_ENV, "kwargs": {**MATH_ENV["kwargs"], "templates": None}}
    assert "math_tool, generated problems of every template, 5 turns;" in generate(
        _other_study(tmp_path / "all", every), "other_study-setup")
    # one task type (algebra): no per-type scalars, and the block says so
    assert generate(spec, "other_study-types").startswith("No success per task type: the runs logged no")


def test_the_gain_of_a_single_setting_against_zero_by_hand(tmp_path):
    from arl.analysis.findings import finding_row
    from arl.analysis.pages import generate

    spec = _other_study(tmp_path, MATH_ENV)
    study = spec.study("other_study")
    c = study.contrast("algo=sampo", "gain")
    assert c.per_seed == {"1": 0.125, "2": 0.375} and c.name == "SAMPO"
    assert study.contrast("algo=grpo", "gain").per_seed == {"1": 0.0, "2": 0.125}
    # t against 0: SAMPO mean 0.25, se 0.125, t 2; GRPO 0.0625 / 0.0625 = 1; SAMPO - GRPO 0.1875 / 0.0625 = 3
    p_sampo, _p_grpo, p_diff = (1 - 2 / math.pi * math.atan(t) for t in (2, 1, 3))  # Cauchy: t with 1 df
    assert c.p == pytest.approx(p_sampo, abs=1e-12)
    # Holm over the 3: 0.205 x 3 = 0.614, then 0.295 x 2 = 0.590 held up to 0.614, then 0.5 x 1 also
    assert c.p_holm == pytest.approx(3 * p_diff, abs=1e-12) and c.family_size == 3
    m, lo, hi = _t_interval([0.125, 0.375])
    line = finding_row(spec, spec.findings[0]).lines[0]
    # beside a gain, the start's spread over the sampling seeds (0.5 and 0.25 at iteration 0)
    assert line.ours == "gain over the start (T 0.6): SAMPO +0.250 (2/2 above 0); the start 0.250-0.500 over seeds 1, 2"
    assert line.ours_short == "gain over the start (T 0.6): SAMPO +0.250; the start 0.250-0.500"
    assert line.interval == (f"[{lo:+.3f}, {hi:+.3f}] (t 95 %, 2 seeds, uncorrected); p {p_sampo:.3f}, "
                             f"Holm {3 * p_diff:.3f} over 3 contrasts")
    assert line.verdict == "gain over the start: **inconclusive**"
    block = generate(spec, "other_study-contrasts").splitlines()
    assert block[0] == "| contrast | final success (T 0.6) | gain over the start (T 0.6) |"
    assert block[3].startswith("| SAMPO | ") and block[3].endswith(
        f"| {m:+.3f} [{lo:+.3f}, {hi:+.3f}] (2/2 above 0), p {p_sampo:.3f}, Holm {3 * p_diff:.3f} |")
    assert block[3].startswith("| SAMPO | - | ")  # a success rate against 0 means nothing: no cell
    assert "Holm: p adjusted over the contrasts (1, 3 in the columns' order) of the column" in block[-1]
    assert "A row of one setting (SAMPO, GRPO) is that setting's gain over the start per seed" in block[-1]
    final = study.contrast("algo=sampo - algo=grpo", "final")
    assert final.family_size == 1  # the final-success family holds the one difference of two settings
    # a finding with a setting's own value and a difference on gain and final success: the final
    # line has only the difference (a success rate against 0 means nothing)
    mixed = {**spec.findings[0], "contrasts": ["algo=sampo", "algo=sampo - algo=grpo"], "measures": ["gain", "final"]}
    gain_line, final_line = finding_row(spec, mixed).lines
    assert gain_line.ours.startswith("gain over the start (T 0.6): SAMPO +0.250 (2/2 above 0), SAMPO - GRPO ")
    assert final_line.ours.startswith("final success (T 0.6): SAMPO - GRPO ") and "SAMPO +" not in final_line.ours


def test_a_webshop_study_names_its_shop_and_held_out_tasks(tmp_path):
    from arl.analysis.pages import generate

    spec = _other_study(tmp_path / "generated", WEBSHOP_ENV)
    setup = generate(spec, "other_study-setup").split("\n\n")[0]
    # the run config keeps WEBSHOP_DATA's interpolation unresolved: unset, so the generated shop
    assert "; WebShop, a generated shop of 1000 products, 10 goals a product, 15 turns; validation" in setup
    assert "16 held-out tasks at T 0.6" in setup
    files = {**WEBSHOP_ENV, "kwargs": {**WEBSHOP_ENV["kwargs"], "data_dir": "/data/webshop"}}
    scale = _other_study(tmp_path / "files", files).study("other_study").scale
    assert "WebShop (WebShop's products and goals) with 15 turns" in scale


def test_the_score_gain_reads_val_score_on_successs_scale_by_hand(tmp_path):
    """WebShop's second metric: the gain of `val/score` (the mean final reward x 100) / 100, with the start's
    spread beside it on that scale, not success's."""
    from arl.analysis.findings import finding_row

    scores = {"sampo": [(50.0, 62.5), (40.0, 55.0)], "grpo": [(50.0, 50.0), (40.0, 45.0)]}
    text = OTHER_SPEC.replace("measures: [final, gain]", "measures: [final, gain, score-gain]").replace(
        "    measures: [gain]\n", "    measures: [score-gain]\n")
    spec = _other_study(tmp_path, MATH_ENV, scores=scores, spec_text=text)
    study = spec.study("other_study")
    c = study.contrast("algo=sampo", "score-gain")
    assert c.per_seed == pytest.approx({"1": 0.125, "2": 0.15})
    assert study.contrast("algo=grpo", "score-gain").per_seed == pytest.approx({"1": 0.0, "2": 0.05})
    assert study.contrast("algo=sampo - algo=grpo", "score-gain").per_seed == pytest.approx({"1": 0.125, "2": 0.1})
    line = finding_row(spec, spec.findings[0]).lines[0]
    # the start's scores 50 and 40 over the two sampling seeds, / 100; success's start was 0.250-0.500
    assert line.ours == ("score gain over the start (T 0.6): SAMPO +0.138 (2/2 above 0); the start 0.400-0.500 "
                         "over seeds 1, 2")


def test_an_alfworld_study_names_its_task_types_and_the_types_block_by_hand(tmp_path):
    from arl.analysis.pages import generate

    spec = _other_study(tmp_path, ALFWORLD_ENV, types=True)
    setup = generate(spec, "other_study-setup")
    assert ("a rollout); ALFWorld task types pick_and_place_simple, look_at_obj_in_light, 20 turns; "
            "validation every 8 iterations on 16 held-out games at") in setup
    assert spec.study("other_study").scale.startswith(
        "tiny model; ALFWorld (task types pick_and_place_simple, look_at_obj_in_light) with 20 turns; 8 iterations")
    rows = generate(spec, "other_study-types").splitlines()
    assert rows[0] == "| setting | seeds | look_at_obj_in_light | pick_and_place_simple |"
    # GRPO look: starts 0, 0.5 (mean 0.25), finals 0.25, 0 (mean 0.125 +- 12.706 x 0.125), gains +0.25, -0.5
    m, lo, hi = _t_interval([0.25, 0.0])
    g, glo, ghi = _t_interval([0.25, -0.5])
    assert rows[2].startswith(f"| GRPO | 2 | 0.250 -> {m:.3f} [{lo:.3f}, {hi:.3f}] "
                              f"(gain {g:+.3f} [{glo:+.3f}, {ghi:+.3f}]) |")
    # SAMPO pick: starts 0.5, 0.25 (mean 0.375), finals 0.75, 0.75 (no spread), gains +0.25, +0.5
    g, glo, ghi = _t_interval([0.25, 0.5])
    assert rows[3].endswith(f"| 0.375 -> 0.750 [0.750, 0.750] (gain {g:+.3f} [{glo:+.3f}, {ghi:+.3f}]) |")
    assert rows[-1].startswith("Each cell: the task type's validation success (`val/success_rate/<type>`, of the 16 "
                               "held-out games at T 0.6")
    every = {**ALFWORLD_ENV, "kwargs": {"task_types": None}}
    setup = generate(_other_study(tmp_path / "all", every), "other_study-setup")
    assert "; ALFWorld, all six task types, 20 turns;" in setup


def test_the_games_block_pools_the_seeds_by_hand(tmp_path):
    from arl.analysis.pages import generate

    rows = generate(_other_study(tmp_path, MATH_ENV), "other_study-games").splitlines()
    assert rows[0] == ("| setting | seeds | problems x seeds | won at start | won last | gained | lost | problems up / down "
                       "| sign test p |")
    # seed 1: won 2 at the start, 3 last, gained 2, lost 1; seed 2: 1 and 3, gained 2, lost 0. Problem by
    # problem over the two seeds (won last minus won at the start): 100 +2, 101 +1, 102 +1, 103 -1, so
    # 3 up and 1 down; the sign test: 2 x P(X <= 1), X ~ Bin(4, 1/2) = 2 x 5 / 16 (McNemar on the 4
    # gained and 1 lost pairs would give 2 x 6 / 32, counting a problem's two seeds as two units)
    assert rows[2:4] == [f"| SAMPO | 2 | 8 | 3 (0.375) | 6 (0.750) | 4 | 1 | 3 / 1 | {2 * 5 / 16:.3f} |", ""]  # GRPO: none
    assert rows[4].startswith("The start (iteration 0) against the last validation (iteration 8) on the same held-out "
                              "problems at T 0.6")


def test_a_study_key_with_an_underscore_has_its_blocks_written_and_checked(tmp_path):
    """``math_study-games``: the page markers take the study keys of the spec, underscores and all."""
    from arl.analysis.pages import check_pages, write_pages

    spec = _other_study(tmp_path, MATH_ENV)
    page = tmp_path / "other.md"
    page.write_text("".join(f"<!-- other_study-{k}:begin -->\n<!-- other_study-{k}:end -->\n"
                            for k in ("types", "games")))
    problems = check_pages(spec)  # the empty blocks: every line missing
    assert problems and all("[other_study-types]" in p or "[other_study-games]" in p for p in problems)
    assert any("[other_study-games]" in p and "| SAMPO | 2 | 8 |" in p for p in problems)
    write_pages(spec)
    assert check_pages(spec) == [] and "| SAMPO | 2 | 8 | 3 (0.375) |" in page.read_text()


@pytest.mark.timeout(120)
def test_the_real_results_page_says_what_the_archives_give():
    """docs/results.md and README.md against docs/results/*/runs (about 5 s: every event file read once)."""
    from arl.analysis.findings import load_spec
    from arl.analysis.pages import check_pages, generate

    spec = load_spec(ROOT / "docs" / "results" / "findings.yaml")
    assert check_pages(spec) == []
    # the issue's facts, from the archived event files: the count hangs on the threshold
    rows = {line.split(" | ")[0].strip("| "): line for line in generate(spec, "stage1-threshold").splitlines()}
    assert rows["0.95"].startswith("| 0.95 | 4/4 | 1/4 | 1/4 |") and "| 0.143 | 0.143 |" in rows["0.95"]
    assert "| 0.429 | 0.143 |" in rows["1.3"]  # CISPO 2/4 at 1.3
    assert rows["1.0"].endswith("| 0.029 | 0.029 | 0.002 |")
    assert "Fisher p 0.100, 0.100 per method" in generate(spec, "stage1-without-seed-1")
    # the reviewer's numbers, from the event files and episodes (read independently when the page was written)
    from arl.analysis.values import inline_value

    lr4, t6 = '"rl.optimizer.lr=0.0001,rollout.temperature=1.0"', '"rl.optimizer.lr=0.0001,rollout.temperature=0.6"'
    facts = {"stage1 range start algo=grpo": "0.281-0.344", "stage1 range final algo=grpo": "0.141-0.312",
             "stage1 lower peak-kl algo=cispo_seqmask algo=cispo": "3 of 4 seeds (not seed 4: 1.237 -> 1.509)",
             "alfworld_cpu_study mean training-first": "0.198", "alfworld_confirmation mean training-first": "0.062",
             "alfworld_cpu_study mean episodes-first": "32",
             "alfworld_cpu_study,alfworld_calibration,alfworld_confirmation range start": "0.125-0.229",
             "sokoban_rl_study range start": "0.432-0.473", "math_confirmation range start": "0.682-0.697",
             f"math_diagnosis mean training-won {t6}": "922", f"math_diagnosis mean training-won {lr4}": "339",
             f"math_diagnosis mean training-first {t6}": "0.676", f"math_diagnosis mean training-first {lr4}": "0.195",
             f"math_study,math_diagnosis range peak-kl algo=sampo algo=grpo {t6} {lr4}": "0.065-0.437"}
    assert {k: inline_value(spec, k) for k in facts} == facts
    assert inline_value(spec, "alfworld_confirmation games algo=grpo").startswith("29 gained, 16 lost")
    steps = {k: sorted(set(spec.study(k).optimizer_steps().values())) for k in
             ("stage1", "sokoban_rl_study", "math_study", "alfworld_cpu_study", "alfworld_confirmation",
              "alfworld_calibration")}
    assert steps["stage1"] == [320] and steps["sokoban_rl_study"] == steps["math_study"] == [60]
    alfworld = steps["alfworld_cpu_study"] + steps["alfworld_confirmation"] + steps["alfworld_calibration"]
    assert (min(alfworld), max(alfworld)) == (28, 36)
    results = (ROOT / "docs" / "results.md").read_text().splitlines()
    # a results page, not a notebook: findings, then one section per study (its scale line, its blocks,
    # prose whose numbers are generated values: their comments make the source longer than it reads)
    assert len(results) <= 650
    assert any(line.startswith("<!-- findings:begin -->") for line in results[:60])


# ----------------------------------------------------------------- the prose: inline values, recorded spans

PROSE_PAGE = """# A page

## Results

CISPO trained below GRPO: <!-- value s1 contrast "algo=cispo - algo=grpo" training -->?<!-- /value -->.
Its final success: <!-- value s1 mean final algo=cispo -->?<!-- /value -->; peak KL
<!-- value s1 range peak-kl -->?<!-- /value -->; below GRPO's final in
<!-- value s1 lower final algo=cispo algo=grpo -->?<!-- /value -->; <!-- value s1 below -->?<!-- /value --> runs
ended below their start; p < <!-- value alpha -->?<!-- /value -->.
Names are no numbers: Stage 1, seeds 1-3, seeds 1 and 2, iterations 0, 15 and 30, seed-1, iteration-0,
T 0.6, lr 3e-4, top-p 0.95, t 95 %, 6x6, Qwen3-4B, `a command 12`, [a link](runs/seed3.md).
The paper: <!-- recorded: the paper -->collapse after about 130 steps<!-- /recorded -->.

## Other

A number outside the checked section: 7.
"""


def test_inline_values_and_the_prose_check_by_hand(archive, capsys):
    """Values written from the fixture archive, each by hand; a wrong value and a number typed into the
    prose are named by the check, the names, code, links and recorded spans are not."""
    from arl.analysis.pages import check_pages, write_pages
    from report import main

    spec_text = SPEC.replace("pages:\n  ../page.md: [findings, s1-threshold]\n", "pages:\n  ../page.md: []\n"
                             "prose:\n  ../page.md: \"## Results\"\n")
    (archive / "results" / "findings.yaml").write_text(spec_text)
    page = archive / "page.md"
    page.write_text(PROSE_PAGE)
    spec = _spec(archive)
    assert [p.name for p in write_pages(spec)] == ["page.md"]
    text = page.read_text()
    # training diffs -0.25, -0.25, -0.125 (test_the_findings_table_by_hand): -5/24, t = -5 with 2 df; a family of 1
    m, lo, hi = _t_interval([-0.25, -0.25, -0.125])
    assert f' training -->{m:+.3f} [{lo:+.3f}, {hi:+.3f}] (0/3 above 0), Holm {_p_df2(5.0):.3f}<!--' in text
    assert "algo=cispo -->0.333<!--" in text  # (0.25 + 0.625 + 0.125) / 3
    assert "range peak-kl -->0.300-1.500<!--" in text  # GRPO's 0.3 to CISPO's 1.5
    assert "algo=grpo -->2 of 3 seeds (not seed 2: 0.625 -> 0.625)<!--" in text  # seed 2: equal, not below
    assert "s1 below -->3 of 6<!--" in text  # CISPO 0.25, 0.125 and GRPO 0.375 below their start of 0.5
    assert "value alpha -->0.05<!--" in text
    assert check_pages(spec) == []

    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if "s1 mean final" in line)
    lines[row] = lines[row].replace("-->0.333<!--", "-->0.433<!--")
    typed = next(i for i, line in enumerate(lines) if line.startswith("The paper:"))
    lines[typed] += " CISPO won 0.42 of its games."
    page.write_text("\n".join(lines) + "\n")
    problems = check_pages(spec)
    assert problems == [
        (f"{page.relative_to(Path.cwd()) if page.is_relative_to(Path.cwd()) else page}:{row + 1}: "
         "[value s1 mean final algo=cispo] the page has 0.433, the archive gives 0.333"),
        (f"{page.relative_to(Path.cwd()) if page.is_relative_to(Path.cwd()) else page}:{typed + 1}: a number in the "
         f"prose that no archive checks: 0.42 in {lines[typed][:120]!r} (generate it, `<!-- value ... -->`, or mark "
         "it `<!-- recorded: SOURCE -->`)")], problems
    assert main(["findings", str(spec.path), "--check"]) == 1
    out = capsys.readouterr().out
    assert "the page has 0.433, the archive gives 0.333" in out and "no archive checks: 0.42 in" in out
    assert main(["findings", str(spec.path), "--write"]) == 0  # the value rewritten; the typed number stays
    left = check_pages(spec)
    assert len(left) == 1 and "a number in the prose that no archive checks: 0.42 in" in left[0]


def test_which_numbers_of_the_prose_are_names():
    from arl.analysis.pages import prose_numbers

    names = ("Stage 2b and stage 1, seeds 5-8, seeds 1 and 2, seeds 1, 2 and 3, seed 4, iterations 0, 15 and 30, "
             "iteration 12, seed-1, iteration-0 validation, T 0.6, lr 1e-4, top-p 0.95, top-k 20, t 95 %, 6x6, "
             "Qwen3-4B, SmolLM2-135M, `python a.py 12`, [page](results/stage1/x.md), <!-- 5 -->.")
    assert prose_numbers(names) == []
    typed = "lr 3e-4 with 8 mini-batches; about 2.5 h; +0.048 [+0.018, +0.077]; a 2-core machine; 3 of 4 seeds."
    assert [n for _, n, _ in prose_numbers(typed)] == ["8", "2.5", "+0.048", "+0.018", "+0.077", "2", "3", "4"]
    blocks = "<!-- x-y:begin -->\n| 0.5 |\n<!-- x-y:end -->\n```\npython 1.0\n```\nthen 9\n"
    assert prose_numbers(blocks) == [(7, "9", "then 9")]
    section = "# T\n\n1 here\n\n## Results\n\n2 here\n\n### Sub\n\n3 here\n\n## Next\n\n4 here\n"
    assert [n for _, n, _ in prose_numbers(section, "## Results")] == ["2", "3"]


def test_a_finding_not_run_and_recorded_values_that_cannot_test_a_finding(archive):
    """The verdict a recorded finding's spec gives replaces the test's, with its reason; a finding of
    the paper that no run tested says so; README's table holds both (findings of the paper)."""
    from arl.analysis.findings import finding_row, headline_rows

    spec = _spec(archive)
    bc = {"id": "bc", "finding": "Cloning gives a start", "paper": "+20.71 %", "kind": "recorded", "measure": "success",
          "values": {1: 0.5, 2: 0.25}, "source": "recorded", "expect": "above", "command": "x",
          "verdict": "not comparable", "why": "an untrained model starts at 0"}
    line = finding_row(spec, bc).lines[0]
    assert line.verdict == "**not comparable**: an untrained model starts at 0" and not line.definite
    webshop = {"id": "w", "finding": "SAMPO beats GRPO on WebShop", "paper": "77.73 %", "kind": "not-run",
               "why": "it does not fit this machine", "where": "WebShop: not run", "command": "y"}
    row = finding_row(spec, webshop)
    assert row.cells(["ours", "interval", "verdict", "archive", "where"]) == [
        "not run: it does not fit this machine", "-", "**not tested**", "none (not run)", "WebShop: not run"]
    spec.data["findings"] += [bc, webshop]
    assert [r.finding for r in headline_rows(spec)] == ["Tolerant clipping trains worse", "Tolerant clipping collapses",
                                                        "Ours: a recorded gain", "Ours: CISPO is cheaper",
                                                        "Cloning gives a start", "SAMPO beats GRPO on WebShop"]


def test_holm_over_the_measures_of_a_single_comparison_by_hand(tmp_path):
    """A study that plans one comparison and tests it on final and training success corrects the two
    tests together; the gain column keeps its own family of three."""
    import yaml as _yaml

    spec = _other_study(tmp_path, MATH_ENV)
    data = _yaml.safe_load(spec.path.read_text())
    data["studies"]["other_study"].update({"measures": ["final", "gain", "training"],
                                           "holm_over_measures": ["final", "training"]})
    spec.path.write_text(_yaml.safe_dump(data))
    study = _spec(tmp_path).study("other_study")
    # final: SAMPO - GRPO per seed 0.125, 0.25 (t = 3 with 1 df); training: 0.5 - 0.5 in both seeds (p 1)
    p_final = 1 - 2 / math.pi * math.atan(3)
    final, training = (study.contrast("algo=sampo - algo=grpo", m) for m in ("final", "training"))
    assert final.p_holm == pytest.approx(2 * p_final, abs=1e-12) and final.family_size == 2
    assert training.p_holm == 1.0 and training.family_size == 2
    assert study.contrast("algo=sampo - algo=grpo", "gain").family_size == 3
    assert study.family_label("final") == "2 tests (SAMPO - GRPO on final success and training success)"
    assert study.family_label("gain") == "3 contrasts"


def test_parameters_are_counted_in_an_archived_start_of_the_same_model(tmp_path, archive):
    """The safetensors header read by hand: 2 x 3 + 4 parameters; a study without weights takes those of
    another study's archived start of the same model config and env."""
    import json
    import shutil
    import struct

    from arl.analysis.study import _start_name, safetensors_parameters

    header = json.dumps({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                         "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}}).encode()
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(struct.pack("<Q", len(header)) + header + bytes(40))
    assert safetensors_parameters(weights) == 10
    results = archive / "results"
    shutil.copytree(results / "s1" / "runs", results / "s2" / "runs")
    (results / "s2" / "bc_start" / "bc_policy_hf").mkdir(parents=True)
    shutil.copy(weights, results / "s2" / "bc_start" / "bc_policy_hf" / "model.safetensors")
    (results / "findings.yaml").write_text(SPEC.replace("findings:\n", "  s2:\n    title: \"Stage 2: fixture\"\n"
                                                        "    archive: s2/runs\n    command: x\nfindings:\n", 1))
    spec = _spec(archive)
    assert spec.study("s1").parameters == 10 and spec.study("s1").scale.startswith("tiny model (0.00M parameters);")
    # the start's name: no checkout's path, a start committed beside an archive named from the repository
    assert _start_name("/work/a/logs/study/bc_start_long/bc_policy_hf") == "study/bc_start_long"
    assert _start_name("/work/b/docs/results/alfworld_cpu_study/bc_start/bc_policy_hf") == \
        "docs/results/alfworld_cpu_study/bc_start"


def _real_pages_copy(tmp_path):
    """tmp/docs/results.md, tmp/README.md, tmp/docs/results/findings.yaml and the archives' index copied from this
    checkout, the archives linked: the real spec and pages, to plant numbers in."""
    import shutil

    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    for entry in (ROOT / "docs" / "results").iterdir():
        if entry.is_dir():
            (docs / "results" / entry.name).symlink_to(entry)
    shutil.copy(ROOT / "docs" / "results" / "findings.yaml", docs / "results" / "findings.yaml")
    shutil.copy(ROOT / "docs" / "results" / "README.md", docs / "results" / "README.md")
    shutil.copy(ROOT / "docs" / "results.md", docs / "results.md")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return docs


@pytest.mark.timeout(180)
def test_a_wrong_number_planted_in_the_real_pages_prose_fails_the_check(tmp_path, capsys):
    """docs/results.md's prose about the ALFWorld archives, with a generated value changed by hand and a
    number typed in: `findings --check` names both (and nothing else: the rest is the real page)."""
    from report import main

    docs = _real_pages_copy(tmp_path)
    page = docs / "results.md"
    text = page.read_text()
    value = "<!-- value alfworld_confirmation contrast algo=sampo gain -->-0.008 [-0.073, +0.058] (1/4 above 0), Holm 0.981<!-- /value -->"
    assert text.count(value) == 1  # the earlier ALFWorld confirmation's SAMPO gain (seeds 4-7)
    typed = "inconclusive over its seeds;"
    assert text.count(typed) == 1
    text = text.replace(value, value.replace("+0.058", "+0.158")).replace(typed, typed + " GRPO lost 29 games.")
    page.write_text(text)
    lines = text.splitlines()
    at_value = next(i for i, line in enumerate(lines) if "[-0.073, +0.158]" in line) + 1
    at_typed = next(i for i, line in enumerate(lines) if "GRPO lost 29 games" in line) + 1
    assert main(["findings", str(docs / "results" / "findings.yaml"), "--check"]) == 1
    captured = capsys.readouterr()
    found = [line for line in captured.out.splitlines() if line]
    assert len(found) == 2, found
    assert found[0].endswith(f"results.md:{at_value}: [value alfworld_confirmation contrast algo=sampo gain] the "
                             "page has +0.158, the archive gives +0.058")
    assert f"results.md:{at_typed}: a number in the prose that no archive checks: 29 in " in found[1]
    assert "2 difference(s)" in captured.err


# the absolute path of a machine's checkout or run folder: its home, a /work checkout, or any absolute
# path into a run log or a results archive (placeholders such as /data/my_games stay allowed)
MACHINE_PATH = re.compile(r"(?<![\w.~$}/])/(?:work|home|root|Users)/[^\s`'\")]*"
                          r"|(?<![\w.~$}/])/[\w.-]+(?:/[\w.-]+)*/(?:logs|docs/results)/[^\s`'\")]*")


def test_the_machine_path_pattern_by_hand():
    hits = ["8 runs from `/work/main/docs/results/sokoban_rl_study/runs`.",
            "the BC start `/work/alfconf/docs/results/alfworld_cpu_study/bc_start`",
            "hydra.run.dir=/srv/ci/checkout/logs/anchor_probe", "in /home/me/arl"]
    misses = ["8 runs from `docs/results/sokoban_rl_study/runs`.", "model.init_from=$PWD/logs/study/bc",
              "export WEBSHOP_DATA=/data/webshop", "python scripts/carry.py save logs/a /mnt/keep/alfworld_study",
              "hydra.run.dir=logs/anchor_probe", "see docs/results/x/README.md"]
    assert all(MACHINE_PATH.search(h) for h in hits) and not any(MACHINE_PATH.search(m) for m in misses)


def test_no_page_names_a_path_of_the_machine_that_wrote_it():
    """Every markdown page under docs/ and README.md: a reader's clone has none of the writer's paths."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{i}: {m.group(0)}" for p in pages
             for i, line in enumerate(p.read_text().splitlines(), 1) for m in MACHINE_PATH.finditer(line)]
    assert found == []


def test_readme_links_github_anchors():
    from arl.analysis.findings import github_anchor, one_word

    # GitHub's rule: lower case, punctuation dropped (underscores and hyphens kept), spaces to hyphens
    assert github_anchor("## WebShop: RL from a cloned start (`bash scripts/webshop_rl_study.sh`)") == \
        "webshop-rl-from-a-cloned-start-bash-scriptswebshop_rl_studysh"
    assert github_anchor("### Stage 2b: the stage-aware filter") == "stage-2b-the-stage-aware-filter"
    assert one_word(("inconclusive (uncorrected only)", "inconclusive")) == "inconclusive"
    assert one_word(("holds", "inconclusive"), ["SAMPO", "GRPO"]) == "SAMPO: holds; GRPO: inconclusive"
