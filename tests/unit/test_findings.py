"""The results page's findings (arl.analysis): a fixture archive of 2 methods x 3 seeds with known
values, the numbers of its findings and threshold tables by hand, the page check, studies of other
envs (math_tool, ALFWorld: their description, a single setting's gain, the per-type and game-by-game
blocks), and the real docs/results.md against the real archives."""

from __future__ import annotations

import math
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
                "groups_per_step": 2, "group_size": 4},
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
    from arl.utils.stats import fisher_exact

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
    assert train.verdict == "training success: **reproduced**"  # p 0.038 < 0.05, below 0 as expected
    diffs_final = [c - g for c, g in zip(RUNS["cispo"]["final"], RUNS["grpo"]["final"])]  # -0.25, 0, -0.25
    m, lo, hi = _t_interval(diffs_final)
    assert final.ours == f"final success (T 0.6): CISPO - GRPO {m:+.3f} (0/3 above 0)"
    assert final.interval.startswith(f"[{lo:+.3f}, {hi:+.3f}] (t 95 %, 3 paired seeds, uncorrected); "
                                     f"p {_p_df2(2.0):.3f}")  # t = -2 exactly
    assert final.verdict == "final success: **inconclusive**"
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
    assert cost.interval.startswith(f"[{0.5 - 4.303 * 0.1 / math.sqrt(3):.2f}, {0.5 + 4.303 * 0.1 / math.sqrt(3):.2f}]")
    assert f"p {_p_df2(5 * math.sqrt(3)):.3f} against 1" in cost.interval and cost.verdict == "**holds**"

    table = generate(spec, "findings")
    assert table.splitlines()[0].startswith("| finding | the paper | ours")
    assert "| Tolerant clipping trains worse | collapse after ~130 steps | training success (T 1.0): CISPO - GRPO -0.208" in table
    assert "- Stage 1 scale: tiny model, Sokoban 6x6 with 1 box and 10 turns, 2 iterations at lr 0.0003 x 8" in table
    headline = generate(spec, "headline").splitlines()
    assert len(headline) == 3 and "Holm p 0.038" in headline[2]  # only the headline finding


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
    assert f"| CISPO - GRPO | " in text and f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}] (0/2 above 0)" in text
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
    assert row.startswith("| [`s1`](results/s1/report.md) | 6 | 6 | 6 | 0 | 1 |")
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


def _other_study(root, env, types=False):
    """root/results/findings.yaml and root/results/other/runs/<algo>_seed<k>: 2 settings x 2 seeds of
    ``env`` (GAIN_RUNS; with ``types`` the per-type success of TYPES; SAMPO's episodes of GAMES)."""
    import json

    runs = root / "results" / "other" / "runs"
    for algo, v in GAIN_RUNS.items():
        for i, seed in enumerate((1, 2)):
            folder = runs / f"{algo}_seed{seed}"
            scalars = {"val/success_rate": [(0, v["start"][i]), (8, v["final"][i])],
                       "rollout/success_rate": [(k, 0.5) for k in range(1, 9)]}
            if types:
                scalars.update({f"val/success_rate/{t}": [(0, s[i][0]), (8, s[i][1])] for t, s in TYPES[algo].items()})
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
    (root / "results" / "findings.yaml").write_text(OTHER_SPEC)
    return _spec(root)


def test_a_math_study_names_its_templates_and_held_out_problems(tmp_path):
    from arl.analysis.pages import generate

    spec = _other_study(tmp_path, MATH_ENV)
    study = spec.study("other_study")
    setup = generate(spec, "other_study-setup").split("\n\n")[0]
    assert setup == ("4 runs: 2 settings (GRPO, SAMPO) x seeds 1, 2; each 8 iterations of 2 groups x 4 episodes at "
                     "T 1.0 from the BC start `study/bc_start`, lr 0.0003, 8 mini-batches a rollout; math_tool, "
                     "generated problems of templates linear_equation, linear_system, 5 turns; validation every 8 iterations on "
                     "16 held-out problems at T 0.6, top-p 0.95, top-k 20.")
    assert study.scale == ("tiny model, math_tool (generated problems of templates linear_equation, linear_system) "
                           "with 5 turns, 8 iterations at lr 0.0003 x 8 mini-batches a rollout, 2 paired seeds")
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
    p_sampo, p_grpo, p_diff = (1 - 2 / math.pi * math.atan(t) for t in (2, 1, 3))  # Cauchy: t with 1 df
    assert c.p == pytest.approx(p_sampo, abs=1e-12)
    # Holm over the 3: 0.205 x 3 = 0.614, then 0.295 x 2 = 0.590 held up to 0.614, then 0.5 x 1 also
    assert c.p_holm == pytest.approx(3 * p_diff, abs=1e-12) and c.family_size == 3
    m, lo, hi = _t_interval([0.125, 0.375])
    line = finding_row(spec, spec.findings[0]).lines[0]
    assert line.ours == "gain over the start (T 0.6): SAMPO +0.250 (2/2 above 0)"
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


def test_an_alfworld_study_names_its_task_types_and_the_types_block_by_hand(tmp_path):
    from arl.analysis.pages import generate

    spec = _other_study(tmp_path, ALFWORLD_ENV, types=True)
    setup = generate(spec, "other_study-setup")
    assert ("mini-batches a rollout; ALFWorld task types pick_and_place_simple, look_at_obj_in_light, 20 turns; "
            "validation every 8 iterations on 16 held-out games at") in setup
    assert spec.study("other_study").scale.startswith(
        "tiny model, ALFWorld (task types pick_and_place_simple, look_at_obj_in_light) with 20 turns, 8 iterations")
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
    assert rows[0] == "| setting | seeds | problems | won at start | won last | gained | lost | McNemar p |"
    # seed 1: won 2 at the start, 3 last, gained 2, lost 1; seed 2: 1 and 3, gained 2, lost 0.
    # McNemar on 4 gained against 1 lost: 2 x P(X <= 1), X ~ Bin(5, 1/2) = 2 x 6 / 32
    assert rows[2:4] == [f"| SAMPO | 2 | 8 | 3 (0.375) | 6 (0.750) | 4 | 1 | {2 * 6 / 32:.3f} |", ""]  # GRPO: none
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
    results = (ROOT / "docs" / "results.md").read_text().splitlines()
    assert len(results) <= 510  # a results page, not a notebook: findings, then one section per study
    assert any(line.startswith("<!-- findings:begin -->") for line in results[:60])
