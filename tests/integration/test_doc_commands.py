"""Every shell command in README.md and docs/ is composed or executed here, so a doc command that
breaks fails ``make test``.

The commands are the lines of the ``bash`` code blocks (continuation lines joined, comments
dropped). Each gets one of these treatments, chosen by the rules of :func:`plan` (every rule says
why):

* ``dry-run``: ``src/train.py``'s start-up: Hydra composes the config, the validation and the
  machine check run, ``ckpt_path`` is resolved, and nothing is built. Multiruns, resumes and the
  make recipes run the real CLI with ``dry_run=true`` (every job of a sweep; exit 0 required);
  the other single runs do the same steps in this process, with the same overrides as the shell
  would pass them (a subprocess costs 9 s of imports each).
* ``gpu``: commands that need a GPU (the paper-scale experiments, GPU trainers, vLLM) on this
  machine without one: the same dry run must stop at start-up, exit 2, with a message that names
  the GPU and the CPU alternative.
* ``missing``: a documented example path that does not exist here (``/data/checkpoints/...``):
  the dry run must stop at start-up saying the folder does not exist.
* ``run``: ``src/eval.py``, ``src/report.py`` and ``scripts/mutation.py --check`` run for real on
  the fixture run and multirun below (shortened: a few validation episodes).
* ``make``: a make target's recipe (``make -n``) is planned like the commands it runs.
* ``plan``: ``src/plan.py`` runs for real and prints its plan: exit 0 (it fits) or 3 (it does not;
  a plan that says so has done its job).
* ``skip``: installers, servers, benchmarks, the test suite itself, and the commands that only
  show what ``scripts/sokoban_study.sh`` runs (the study is run shortened by its own test).

Placeholders (``<run>``, ``<time>``, ``<bc run>``, ``<same overrides>``) are filled with a real
smoke run made once for the module; ``logs/`` of that run lives in a temporary ``ARL_ROOT``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from arl_testing import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PY = sys.executable

# --------------------------------------------------------------------------- extraction


@dataclass
class DocCommand:
    source: str  # file:line
    text: str  # the command, comments dropped, continuation lines joined


def doc_commands() -> list[DocCommand]:
    """Every command of the docs, once: a command two pages show (a study page repeats its
    command from results.md) is checked at its first place."""
    out = []
    seen: set[str] = set()
    for path in DOCS:
        lines = path.read_text().splitlines()
        in_block = False
        pending, start = "", 0
        for i, line in enumerate(lines, 1):
            fence = line.strip()
            if fence.startswith("```"):
                in_block = not in_block and fence[3:].strip() in ("bash", "sh", "shell")
                continue
            if not in_block:
                continue
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if not pending:
                start = i
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            raw = _drop_comment(pending + stripped)  # the quoting stays as written, for shlex later
            pending = ""
            if raw and raw not in seen:
                seen.add(raw)
                out.append(DocCommand(f"{path.relative_to(ROOT)}:{start}", raw))
    return out


def _drop_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` after white space, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


# --------------------------------------------------------------------------- treatment

GPU_MARKERS = ("trainer=gpu", "trainer=fsdp ", "trainer=fsdp2", "accelerator=gpu", "rollout=vllm")


def _paper_experiment(cmd: str) -> bool:
    """``experiment=<method>_<env>`` (or a BC experiment) at the paper's GPU scale: no debug group."""
    return bool(re.search(r"experiment=(?!glob)\S+", cmd)) and "debug=" not in cmd


# commands that cannot run here, by how they start (or, for a launcher, an override they hold)
SKIPPED = (
    ("bash bench/gpu_check.sh", "the GPU check (its --cpu-dry-run is run by test_gpu_check.py)"),
    ("bash scripts/sokoban_study.sh", "run shortened by test_make_study_runs_shortened_on_a_fresh_tree"),
    ("bash scripts/arena_study.sh", "run shortened by test_arena_study_runs_shortened_and_resumes"),
    ("STAGE=", "the arena script for one stage (run shortened by test_arena_study_runs_shortened_and_resumes)"),
    ("bash scripts/alfworld_study.sh", "run shortened by test_alfworld_study_runs_shortened"),
    ("bash scripts/math_study.sh", "run shortened by test_math_study_runs_shortened_and_archives"),
    ("bash scripts/alfworld_cpu_study.sh", "run shortened by test_alfworld_cpu_study_runs_shortened"),
    ("bash scripts/math_diagnosis_study.sh", "run shortened by test_math_diagnosis_study_runs_shortened_and_archives"),
    ("bash scripts/math_confirmation_study.sh", "math_study.sh with its seeds and start (run shortened by its test)"),
    ("bash scripts/alfworld_confirmation_study.sh", "alfworld_cpu_study.sh with its seeds and start (run shortened by its test)"),
    ("bash scripts/alfworld_strong_study.sh", "run shortened by test_alfworld_strong_study_stages_run_shortened"),
    ("bash scripts/sokoban_rl_study.sh", "run shortened by test_calibration_and_sokoban_study_run_shortened"),
    ("bash scripts/webshop_rl_study.sh", "run shortened by test_webshop_rl_study_runs_shortened"),
    ("bash scripts/staleness_study.sh", "run shortened by test_staleness_study_runs_shortened"),
    ("PLAN=", "a planned study (run shortened by test_planned_study_runs_shortened)"),
    ("START_ONLY=", "a study script's start alone (the scripts run shortened by their tests)"),
    ("ENV=", "a calibration grid (run shortened by test_calibration_and_sokoban_study_run_shortened)"),
    ("ARCHIVE=", "a study script that also archives its runs (the scripts run shortened by their tests)"),
    ("ARM=", "a study script at the setting its calibration chose (the scripts run shortened by their tests)"),
    ("STUDY=", "a study beyond the paper (run shortened by test_beyond_paper_studies_run_shortened)"),
    ("BC=", "a study script started from an earlier BC policy (the scripts run shortened by their tests)"),
    ("OUT=", "a study script writing to a folder of its own (the scripts run shortened by their tests)"),
    ("python src/report.py shopping", "needs a WebShop run (test_shopping_report.py runs it on WebShop episodes)"),
    ("python examples/openenv_guess_number.py", "starts an OpenEnv server (test_openenv.py starts it and plays it by url)"),
    ("torchrun ", "a launch across nodes (the two-node localhost run is test_multinode.py)"),
    ("sbatch ", "submits to a SLURM cluster (none here)"),
    ("hydra/launcher=slurm", "submits to a SLURM cluster (none here); the launcher config composes in test_sweeps.py"),
)


def plan(cmd: str) -> tuple[str, str]:
    """(treatment, reason) for one documented command."""
    c = cmd + " "
    if c.startswith("pip install"):
        return "skip", "installs packages (make install and CI install them)"
    if c.startswith(("alfworld-download", "export ")):
        return "skip", "downloads the official ALFWorld games (no network here) / sets a variable for the next line"
    if c.startswith("make "):
        target = cmd.split()[1]
        if target == "test":
            return "skip", "the README's test command: CI runs it, and it runs this test"
        if target == "tb":
            return "skip", "starts a TensorBoard server"
        if target == "bench":
            return "skip", "benchmarks (minutes; they print tables, no pass/fail)"
        if target == "study":
            return "skip", "run shortened by test_make_study_runs_shortened_on_a_fresh_tree"
        if target == "arena":
            return "skip", "run shortened by test_arena_study_runs_shortened_and_resumes"
        if target == "calibrate":
            return "skip", "a calibration grid (run shortened by test_calibration_and_sokoban_study_run_shortened)"
        if target.startswith("study-"):
            return "skip", "a per-env study: its script runs shortened by its test"
        if target == "mutation":
            return "run", "its script with --check: every named mutant still matches the code"
        return "make", f"the train.py commands of make {target}'s recipe, dry-run"
    if "$s" in cmd or "$PWD" in cmd or "$OUT" in cmd:
        return "skip", "holds a shell variable: a line of a study script or a path of this machine (the scripts run shortened by their tests)"
    if "scripts/alfworld_strong_study.sh" in cmd:
        return "skip", "a stage of the ALFWorld strong-start study (run shortened by test_alfworld_strong_study_stages_run_shortened)"
    for marker, reason in SKIPPED:
        if c.startswith(marker) or (marker.startswith("hydra/") and marker in c):
            return "skip", reason
    if "scripts/mutation.py" in cmd:
        return "run", "checks that every named mutant still matches the code (--check)"
    if c.startswith("bash scripts/archive_runs.sh"):
        return "run", "archives the fixture multirun's finished runs into a folder of the test tree"
    if "src/eval.py" in cmd or "src/report.py" in cmd:
        return "run", "runs on the fixture run (a few validation episodes)"
    if c.startswith("python src/compare.py"):
        return "run", "compares the fixture run's start and last validations game by game"
    if c.startswith("python src/view.py"):
        return "run", "writes the episode viewer page of the fixture run's validations"
    if c.startswith("python scripts/carry.py"):
        return "run", "saves the fixture runs into a folder of the test tree and restores them"
    if c.startswith("git "):
        return "skip", "commits in the user's checkout"
    if c.startswith("python src/plan.py"):
        return "plan", "src/plan.py runs for real (no GPU here): exit 0 (fits) or 3 (does not fit, with what to change)"
    if "src/train.py" in cmd:
        if "=/data/" in cmd:
            return "missing", "an example path of the user's data: must stop at start-up saying it does not exist"
        if any(m in c for m in GPU_MARKERS) or _paper_experiment(cmd):
            return "gpu", "needs a GPU (paper scale, a GPU trainer or vLLM): must stop at start-up with the CPU alternative"
        return "dry-run", "composed and validated by train.py's dry run (a hub model is not fetched)"
    raise AssertionError(f"no rule for the documented command {cmd!r}: add one to plan()")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def env_root(tmp_path_factory):
    """A temporary ARL_ROOT with a real smoke run (BC, one RL iteration, checkpoint, exports) of
    task ``train`` (what ``ckpt_path=last`` finds) and a two-job multirun for the report."""
    root = _tree(tmp_path_factory.mktemp("arl_root"))
    env = _env(root)
    small = ["bc.episodes=24", "bc.epochs=1", "rl.iterations=1", "rl.val_every=1", "rollout.val_episodes=2",
             "rollout.tasks_per_iteration=2", "rollout.group_size=2", "rollout.max_new_tokens=12"]
    run = subprocess.run([PY, "src/train.py", "debug=smoke", *small], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    run_dir = max((root / "logs" / "debug" / "runs").iterdir())
    # the same run as task "train" too, the default task name, for the README's ckpt_path=last
    train_run = root / "logs" / "train" / "runs" / run_dir.name
    shutil.copytree(run_dir, train_run, symlinks=True)
    multi = subprocess.run([PY, "src/train.py", "-m", "seed=1,2", "debug=smoke", "bc.enabled=false", *small[2:],
                            f"hydra.sweep.dir={root / 'multirun'}"],
                           cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert multi.returncode == 0, multi.stdout[-2000:] + multi.stderr[-4000:]
    return Fixture(root, train_run, root / "multirun")


@dataclass
class Fixture:
    root: Path
    run: Path  # a finished run: checkpoints/last.ckpt, bc_policy_hf, bc_dataset.jsonl, policy_hf
    multirun: Path  # a finished two-job multirun


def _tree(root: Path) -> Path:
    """``root`` as a checkout to run commands in: configs, src and scripts linked, its own logs/."""
    for name in ("configs", "src", "scripts"):
        (root / name).symlink_to(ROOT / name)
    return root


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA")}
    env.update(ARL_ROOT=str(root), PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env


def fill(cmd: str, fx: Fixture) -> str:
    """The command with its placeholders filled from the fixture run."""
    run, multirun = fx.run, fx.multirun
    out = cmd
    out = out.replace("logs/sampo_sokoban/runs/<time>", str(run)).replace("logs/<task>/runs/<time>", str(run))
    out = out.replace("logs/multiruns/<time>", str(multirun)).replace("logs/study/sokoban_matrix", str(multirun))
    out = re.sub(r"logs/study/stage\w+", lambda _: str(multirun), out).replace("<folder>", str(multirun))
    out = out.replace("logs/alfworld/study/rl", str(multirun))
    if cmd.startswith("python scripts/carry.py"):  # the fixture's logs/ (a BC + RL run) as the study folder
        out = out.replace("logs/alfworld/study", str(fx.root / "logs")).replace("/mnt/keep/", str(fx.root / "keep") + "/")
    if cmd.startswith(("python src/compare.py", "python src/view.py")):  # eval folders: the run's own validations
        out = out.replace("logs/compare/start_s1", f"{run}/val_episodes/iter0.jsonl")
        out = out.replace("logs/compare/rl_s1", f"{run}/val_episodes/iter1.jsonl")
    # an archive (scripts/archive_runs.sh): written into the test tree; read, it is the fixture multirun
    archive = str(fx.root / "archive") if cmd.startswith("bash scripts/archive_runs.sh") else str(multirun)
    out = re.sub(r"docs/results/(<name>|arena_stage\w+)/runs", archive, out)
    out = out.replace("<bc run>", str(run)).replace("<run>", str(run))
    out = out.replace("<same overrides as the run>", "debug=smoke").replace("<same overrides>", "debug=smoke")
    out = out.replace("'<run>/", f"'{run}/")
    assert "<" not in out.replace("<|", ""), f"unfilled placeholder in {out!r}"
    return out


def _run(cmd: str, root: Path, extra: list[str] = (), timeout: int = 600) -> subprocess.CompletedProcess:
    args = shlex.split(cmd)
    if args[0] == "python":
        args[0] = PY
    args += list(extra)
    return subprocess.run(args, cwd=root, env=_env(root), capture_output=True, text=True, timeout=timeout)


def _startup_in_process(cmd: str, root: Path) -> tuple[int, str]:
    """What ``src/train.py <overrides> dry_run=true`` does for a single run, in this process:
    (0, "") or (2, the start-up message)."""
    from arl.run.checks import check_machine, validate_config
    from arl.run.resume import resolve_ckpt_path
    from arl.utils.config import ConfigError
    from arl_testing import compose

    args = shlex.split(cmd)
    overrides = args[args.index("src/train.py") + 1:] + [f"paths.log_dir={root / 'logs'}"]
    # a leading PYTHONPATH=<folders> (examples/ of an algorithm part from outside, which the validation
    # imports) is the checkout's folders on sys.path, as the shell would give the process
    folders = [str(ROOT / folder) for arg in args[:args.index("src/train.py")] if arg.startswith("PYTHONPATH=")
               for folder in arg.split("=", 1)[1].split(os.pathsep)]
    sys.path[:0] = folders
    try:
        cfg = compose(overrides)
        run = validate_config(cfg)
        check_machine(run)
        resolve_ckpt_path(run.ckpt_path, run.paths.log_dir, run.task_name, run.paths.output_dir)
    except ConfigError as err:
        return 2, str(err)
    finally:
        del sys.path[:len(folders)]
    return 0, ""


def _needs_the_cli(cmd: str, make: bool) -> bool:
    args = shlex.split(cmd)
    # an Optuna search needs a metric from every trial, which a dry run does not make: its base
    # config is checked in this process (the sweeper config composes in test_sweeps.py)
    search = "hparams_search=" in cmd and "hparams_search=optuna" not in cmd
    return make or "-m" in args or "--multirun" in args or search or "ckpt_path=" in cmd


def _make_recipe(target: str) -> list[str]:
    """The ``src/train.py`` commands ``make -n <target>`` would run (with ``python`` for the venv's)."""
    # ARGS= and no MAKEFLAGS: the recipe as the README runs it, not with the outer `make test ARGS=...`'s
    # pytest arguments, which a sub-make would inherit
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "-o", ".venv/.smollm2", target, "PY=python", "ARGS="],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cmds = [line.strip() for line in out.stdout.splitlines() if "src/train.py" in line]
    assert cmds, f"make -n {target} runs no src/train.py command:\n{out.stdout}"
    return cmds


# --------------------------------------------------------------------------- the test

COMMANDS = doc_commands()


def test_the_docs_hold_commands():
    counts: dict[str, int] = {}
    for c in COMMANDS:
        counts[plan(c.text)[0]] = counts.get(plan(c.text)[0], 0) + 1
    print(f"{len(COMMANDS)} documented commands: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    assert len(COMMANDS) >= 60 and counts.get("dry-run", 0) >= 20


@pytest.mark.parametrize("doc", COMMANDS, ids=[f"{c.source}" for c in COMMANDS])
def test_documented_command(doc, env_root):
    treatment, reason = plan(doc.text)
    if treatment == "skip":
        pytest.skip(reason)
    if doc.text.startswith("make mutation"):
        commands = ["python scripts/mutation.py"]
    elif treatment == "make":
        commands = _make_recipe(doc.text.split()[1])
    else:
        commands = [doc.text]
    for cmd in commands:
        cmd_treatment = plan(cmd)[0] if treatment == "make" else treatment
        cmd = fill(cmd, env_root)
        root = env_root.root
        if cmd_treatment in ("dry-run", "gpu", "missing"):
            if _needs_the_cli(cmd, treatment == "make"):
                out = _run(cmd, root, ["dry_run=true"])
                code, message = out.returncode, out.stdout + out.stderr
                if code == 0:
                    assert "dry run" in out.stdout
            else:
                code, message = _startup_in_process(cmd, root)
            if cmd_treatment == "dry-run":
                assert code == 0, f"{doc.source}: {cmd}\n{message[-4000:]}"
            elif cmd_treatment == "gpu":
                assert code == 2, f"{doc.source}: {cmd} did not stop at start-up\n{message[-3000:]}"
                assert "GPU" in message and "debug=cpu_small" in message, message[-2000:]
            else:
                assert code == 2 and "does not exist" in message, message[-2000:]
        elif cmd_treatment == "plan":
            out = _run(cmd, root)
            assert out.returncode in (0, 3) and "memory plan: peak" in out.stdout, (
                f"{doc.source}: {cmd}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        elif cmd_treatment == "run":
            extra = []
            if "src/eval.py" in cmd:
                cmd = re.sub(r"rollout\.val_episodes=\d+", "", cmd)
                extra = ["rollout.val_episodes=2"]
            if "scripts/mutation.py" in cmd:
                extra = ["--check"]
            args = shlex.split(cmd)
            if args[1:3] == ["scripts/carry.py", "restore"] and not (root / args[3]).exists():
                # the doc's save line, which may be run after this one: save the destination first
                assert _run(f"python scripts/carry.py save {args[4]} {args[3]}", root).returncode == 0
            out = _run(cmd, root, extra)
            assert out.returncode == 0, f"{doc.source}: {cmd}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        else:
            raise AssertionError(f"{doc.source}: the recipe of {doc.text!r} holds {cmd!r} ({cmd_treatment})")


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_make_study_runs_shortened_on_a_fresh_tree(tmp_path):
    """``make study`` on a tree without logs/: the script makes its folders, runs BC for two seeds,
    a matrix of two methods for each and the report (budgets cut by environment variables)."""
    out = tmp_path / "study"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "ITERS": "1", "VAL_EVERY": "1", "VAL_EPISODES": "2",
           "METHODS": "grpo,sampo",
           "EXTRA": "bc.episodes=24 bc.epochs=1 bc.bootstrap.episodes=4 bc.val_untrained=false rollout.tasks_per_iteration=2 "
                    "rollout.group_size=2 rollout.max_new_tokens=12"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "sokoban_study.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert (out / "sokoban_matrix" / "report" / "report.md").exists()
    report = (out / "sokoban_matrix" / "report" / "report.md").read_text()
    assert "grpo" in report and "sampo" in report


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_arena_study_runs_shortened_and_resumes(tmp_path):
    """``make arena``'s stage 1 on a fresh tree, shortened: the BC start, two methods x two paired
    seeds two at a time (joblib), the report; run again, every job is found finished and left alone."""
    out = tmp_path / "arena"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "STAGE": "1", "ITERS": "1", "SEEDS": "1,2", "METHODS": "grpo,sampo",
           "VAL_EVERY": "1", "VAL_EPISODES": "2",
           "EXTRA": "bc.episodes=24 bc.epochs=1 rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=12"}
    for attempt in ("first", "again"):
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "arena_study.sh")], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, attempt + proc.stdout[-2000:] + proc.stderr[-3000:]
    jobs = sorted(p.name for p in (out / "stage1").iterdir() if p.is_dir() and p.name != "report")
    assert len(jobs) == 4 and all((out / "stage1" / j / "checkpoints" / "last.ckpt").exists() for j in jobs)
    again = (out / "stage1.out").read_text()  # the second command's log
    assert again.count("finished earlier") == 4 and "resuming from" not in again  # all four left as they were
    report = (out / "stage1" / "report" / "report.md").read_text()
    assert "algo=grpo" in report and "algo=sampo" in report


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_arena_stage_2_runs_shortened_on_the_long_sokoban(tmp_path):
    """Stage 2's commands, shortened: its own BC start on the 7x7, two-box, 20-turn Sokoban, then
    two of its methods (the stage-aware filter among them), one seed, the report with its contrasts;
    in a folder whose name Hydra would misread unquoted (',', '=' and brackets)."""
    out = tmp_path / "arena,x=[1]"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "STAGE": "2", "ITERS2": "1", "SEEDS": "1",
           "METHODS2": "grpo,stage_aware_gigpo", "VAL_EVERY2": "1", "VAL_EPISODES2": "2",
           "EXTRA": "bc.episodes=24 bc.epochs=1 rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=12"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "arena_study.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert not (out / "bc_start").exists()  # stage 1's start is not built for stage 2 alone
    import yaml

    (job,) = [p for p in (out / "stage2").iterdir() if p.is_dir() and "stage_aware_gigpo" in p.name]
    cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
    assert cfg["env"]["max_turns"] == 20 and cfg["env"]["kwargs"]["num_boxes"] == 2
    assert cfg["env"]["kwargs"]["dim_room"] == [7, 7] and cfg["algo"]["filter"]["name"] == "stage_aware"
    assert cfg["model"]["init_from"] == str((out / "bc_start_long" / "bc_policy_hf").resolve())
    report = (out / "stage2" / "report" / "report.md").read_text()
    assert "`algo=gigpo - algo=grpo` | 0 | no setting named 'algo=gigpo'" in report  # not among the two run


@pytest.mark.parametrize("stage, var", [("1", "BC"), ("2", "BC2"), ("2b", "BC2B")])
def test_arena_study_refuses_a_missing_start(tmp_path, stage, var):
    """A mistyped start folder stops the arena script at once (exit 2, the folder named): it trains
    no BC start in its place and runs no RL."""
    out = tmp_path / "arena"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "STAGE": stage, var: str(tmp_path / "no_such_bc")}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "arena_study.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and f"{var}={tmp_path / 'no_such_bc'}: no such folder" in proc.stderr, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == []  # nothing built, nothing run


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_arena_stage_2b_starts_from_a_barely_cloned_policy(tmp_path):
    """Stage 2b, shortened: a BC start from WEAK_BC expert episodes and one epoch on the long
    Sokoban, DAPO-GiGPO against the stage-aware filter from it, one seed, the report's contrast."""
    import yaml

    out = tmp_path / "arena"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "STAGE": "2b", "ITERS2": "1", "SEEDS": "1", "WEAK_BC": "8",
           "VAL_EVERY2": "1", "VAL_EPISODES2": "2",  # hydra.launcher.* reaches the multirun, not the BC start
           "EXTRA": "rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=12 hydra.launcher.n_jobs=1"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "arena_study.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert not (out / "bc_start").exists() and not (out / "bc_start_long").exists()
    bc_cfg = yaml.safe_load((out / "bc_start_weak" / ".hydra" / "config.yaml").read_text())
    assert bc_cfg["threads"] == 1  # one thread: the start rebuilds bit for bit
    assert (out / "bc_start_weak.sha256").read_text().split()[0] == hashlib.sha256(
        (out / "bc_start_weak" / "bc_policy_hf" / "model.safetensors").read_bytes()).hexdigest()
    bc = bc_cfg["bc"]
    assert bc["episodes"] == 8 and bc["epochs"] == 1 and not bc["bootstrap"]["enabled"]
    jobs = {p.name.split(",")[0]: p for p in (out / "stage2b").iterdir() if p.is_dir() and p.name != "report"}
    assert set(jobs) == {"algo=dapo_gigpo", "algo=stage_aware_gigpo"}
    cfg = yaml.safe_load((jobs["algo=stage_aware_gigpo"] / ".hydra" / "config.yaml").read_text())
    assert cfg["env"]["max_turns"] == 20 and cfg["algo"]["filter"]["name"] == "stage_aware"
    assert cfg["model"]["init_from"] == str((out / "bc_start_weak" / "bc_policy_hf").resolve())
    assert yaml.safe_load((out / "stage2b" / "multirun.yaml").read_text())["hydra"]["launcher"]["n_jobs"] == 1
    failed = subprocess.run(["bash", str(ROOT / "scripts" / "arena_study.sh")], cwd=ROOT, capture_output=True, text=True,
                            env={**env, "OUT": str(tmp_path / "failed"), "EXTRA": "bc.no_such_key=1"}, timeout=120)
    assert failed.returncode == 1 and "the BC start bc_start_weak failed" in failed.stderr, failed.stderr
    assert not (tmp_path / "failed" / "stage2b").exists()  # a BC start that failed starts no RL
    broken = subprocess.run(["bash", str(ROOT / "scripts" / "arena_study.sh")], cwd=ROOT, capture_output=True, text=True,
                            env={**env, "OUT": str(tmp_path / "broken"), "EXTRA": "rl.no_such_key=1",
                                 "BC2B": str(out / "bc_start_weak" / "bc_policy_hf"),  # its own hash: passes
                                 "BC2B_SHA256": (out / "bc_start_weak.sha256").read_text().split()[0]}, timeout=120)
    assert broken.returncode == 1 and "the multirun stage2b failed: see" in broken.stderr, broken.stderr
    assert not (tmp_path / "broken" / "stage2b" / "report").exists()  # no report of a failed multirun
    other = subprocess.run(["bash", str(ROOT / "scripts" / "arena_study.sh")], cwd=ROOT, capture_output=True, text=True,
                           env={**env, "BC2B_SHA256": "0" * 64}, timeout=120)  # not the start the runs came from
    assert other.returncode == 1 and f"the BC start bc_start_weak differs from BC2B_SHA256={'0' * 64}" in other.stderr
    report = (out / "stage2b" / "report" / "report.md").read_text()
    assert "`algo=stage_aware_gigpo - algo=dapo_gigpo` | 1 |" in report


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_alfworld_study_runs_shortened(tmp_path):
    """``scripts/alfworld_study.sh`` on a fresh tree, shortened, on the real alfworld engine: the BC start
    with the cpu_small recipe (notes, the 20000-game pool), SAMPO and GRPO from it on one seed, the
    report with the per-type table and the SAMPO - GRPO contrast."""
    import importlib.util

    import yaml

    if importlib.util.find_spec("alfworld") is None:  # not imported: importing alfworld sets $ALFWORLD_DATA
        pytest.skip("needs the alfworld package (pip install 'arl[alfworld]')")

    out = tmp_path / "alfworld"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "SEEDS": "1", "ITERS": "1", "VAL_EVERY": "1", "VAL_EPISODES": "4",
           # the expert needs up to ~25 turns to win its games; everything else as small as it goes
           # hydra.launcher.* reaches the RL multirun only (the BC run, a single run, has no launcher)
           "EXTRA": "bc.episodes=4 bc.epochs=1 rollout.val_episodes=4 env.max_turns=25 rollout.tasks_per_iteration=2 "
                    "rollout.group_size=2 rollout.max_new_tokens=12 hydra.launcher.n_jobs=1"}
    env.pop("ALFWORLD_DATA", None)  # generated games (an earlier import of alfworld in this session may have set it)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_study.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    bc = yaml.safe_load((out / "bc" / ".hydra" / "config.yaml").read_text())
    assert bc["env"]["kwargs"]["notes"] and bc["env"]["kwargs"]["num_games"] == {"train": 20000}
    assert not bc["bc"]["bootstrap"]["enabled"] and not bc["bc"]["dagger"]["enabled"]
    assert bc["threads"] == 1  # BC_THREADS: a start that can be rebuilt bit for bit
    digest = hashlib.sha256((out / "bc" / "bc_policy_hf" / "model.safetensors").read_bytes()).hexdigest()
    assert (out / "bc.sha256").read_text().split()[0] == digest
    jobs = {p.name: p for p in (out / "rl").iterdir() if p.is_dir() and p.name != "report"}
    assert set(jobs) == {"sampo_seed1", "grpo_seed1"}  # the run folders say what varies, not every override
    cfg = yaml.safe_load((jobs["grpo_seed1"] / ".hydra" / "config.yaml").read_text())
    assert cfg["model"]["init_from"] == str((out / "bc" / "bc_policy_hf").resolve())
    assert cfg["rollout"]["val_episodes"] == 4 and cfg["env"]["kwargs"]["notes"]
    assert sorted(p.name for p in (jobs["grpo_seed1"] / "val_episodes").iterdir()) == ["iter0.jsonl", "iter1.jsonl"]
    report = (out / "rl" / "report" / "report.md").read_text()
    assert "`algo=sampo - algo=grpo` | 1 |" in report
    assert "## Success per task type" in report  # four held-out games of several types
    assert "| `algo=grpo` | 1 | 4 |" in report  # game by game: the start against iteration 1, on the 4 games
    missing = subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_study.sh")], cwd=ROOT,
                             env={**env, "BC": str(tmp_path / "no_such_bc")}, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no such folder" in missing.stderr  # a mistyped BC= trains nothing
    assert yaml.safe_load((out / "rl" / "multirun.yaml").read_text())["hydra"]["launcher"]["n_jobs"] == 1
    failed = subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_study.sh")], cwd=ROOT, capture_output=True, text=True,
                            env={**env, "OUT": str(tmp_path / "failed"), "EXTRA": "bc.no_such_key=1"}, timeout=120)
    assert failed.returncode == 1 and "the BC run failed" in failed.stderr, failed.stderr
    assert not (tmp_path / "failed" / "rl").exists()  # a BC start that failed starts no RL
    broken = subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_study.sh")], cwd=ROOT, capture_output=True, text=True,
                            env={**env, "OUT": str(tmp_path / "broken"), "EXTRA": "rl.no_such_key=1",
                                 "BC": str(out / "bc" / "bc_policy_hf")}, timeout=120)
    assert broken.returncode == 1 and "the RL multirun failed: see" in broken.stderr, broken.stderr
    assert not (tmp_path / "broken" / "rl" / "report").exists()  # no report of a failed multirun
    again = subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_study.sh")], cwd=ROOT, capture_output=True, text=True,
                           env={**env, "BC_SHA256": digest}, timeout=300)  # its own start: the finished runs stop at once
    assert again.returncode == 0, again.stderr[-3000:]
    other = subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_study.sh")], cwd=ROOT, capture_output=True, text=True,
                           env={**env, "BC_SHA256": "0" * 64}, timeout=60)  # not the start the runs came from
    assert other.returncode == 1 and f"differs from BC_SHA256={'0' * 64}" in other.stderr, other.stderr


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_math_study_runs_shortened_and_archives(tmp_path):
    """``scripts/math_study.sh`` shortened: the BC start on every template without its bootstrap round, SAMPO and
    GRPO from it on the algebra templates, the report, and the archive (runs without checkpoints, the BC
    start's record and hash, the report) that ``ARCHIVE`` asks for."""
    import yaml

    out, archive, start = tmp_path / "math", tmp_path / "archive", tmp_path / "committed" / "bc_policy_hf"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "ARCHIVE": str(archive), "START": str(start), "SEEDS": "1", "ITERS": "1",
           "VAL_EVERY": "1", "VAL_EPISODES": "4", "N_JOBS": "1", "BC_EPOCHS": "1",
           "EXTRA": "bc.episodes=8 rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=16"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "math_study.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    bc = yaml.safe_load((out / "bc" / ".hydra" / "config.yaml").read_text())
    assert bc["env"]["kwargs"]["templates"] is None and not bc["bc"]["bootstrap"]["enabled"]
    assert bc["bc"]["epochs"] == 1 and bc["threads"] == 1
    rl = yaml.safe_load((out / "rl" / "grpo_seed1" / ".hydra" / "config.yaml").read_text())
    assert rl["env"]["kwargs"]["templates"] == ["linear_equation", "linear_system"]
    assert rl["model"]["init_from"] == str((out / "bc" / "bc_policy_hf").resolve()) and rl["threads"] == 1
    assert rl["rl"]["optimizer"]["lr"] == 1e-5  # debug=cpu_small's math recipe
    # the start is kept to be committed (START), and a later study starts from those bytes without a BC run
    assert (start / "model.safetensors").read_bytes() == (out / "bc" / "bc_policy_hf" / "model.safetensors").read_bytes()
    again = subprocess.run(["bash", str(ROOT / "scripts" / "math_study.sh")], cwd=ROOT, capture_output=True, text=True,
                           env={**env, "OUT": str(tmp_path / "again"), "ARCHIVE": "", "METHODS": "grpo"}, timeout=900)
    assert again.returncode == 0 and "the committed BC start" in again.stdout, again.stderr[-3000:]
    assert not (tmp_path / "again" / "bc").exists()
    again_cfg = yaml.safe_load((tmp_path / "again" / "rl" / "grpo_seed1" / ".hydra" / "config.yaml").read_text())
    assert again_cfg["model"]["init_from"] == str(start.resolve())
    runs = sorted(p.name for p in (archive / "runs").iterdir())
    assert runs == ["grpo_seed1", "sampo_seed1"]
    assert not (archive / "runs" / "grpo_seed1" / "checkpoints").exists()
    assert sorted(p.name for p in (archive / "runs" / "grpo_seed1" / "val_episodes").iterdir()) == ["iter0.jsonl", "iter1.jsonl"]
    assert (archive / "bc_start" / "bc_results.json").exists()
    assert (archive / "bc_start" / "bc.sha256").read_text() == (out / "bc.sha256").read_text()
    report = (archive / "report.md").read_text()
    assert "`algo=sampo - algo=grpo` | 1 |" in report and "gain over the start" in report
    assert "| `algo=sampo` | 1 |" in report and "| `algo=grpo` | 1 |" in report  # each method's own values per seed
    # a later session on a fresh tree: the archived runs are restored, not run again
    resumed = tmp_path / "resumed"
    later = subprocess.run(["bash", str(ROOT / "scripts" / "math_study.sh")], cwd=ROOT, capture_output=True, text=True,
                           env={**env, "OUT": str(resumed)}, timeout=900)
    assert later.returncode == 0 and "study: 2 finished runs restored from" in later.stdout, later.stderr[-3000:]
    assert (resumed / "rl.out").read_text().count("finished earlier") == 2
    assert not (resumed / "rl" / "grpo_seed1" / "checkpoints").exists()  # nothing trained again


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_math_diagnosis_study_runs_shortened_and_archives(tmp_path):
    """``scripts/math_diagnosis_study.sh`` shortened: one BC start, the three GRPO arms (base, lr 1e-5, T 0.6)
    from it, each arm's settings in its runs' configs, the report's contrasts between the arms, and the archive
    of all of them."""
    import yaml

    root, archive = tmp_path / "diag", tmp_path / "archive"
    env = {**_env(tmp_path), "PY": PY, "ROOT": str(root), "ARCHIVE": str(archive), "SEEDS": "1", "ITERS": "1",
           "VAL_EVERY": "1", "VAL_EPISODES": "4", "N_JOBS": "1", "BC_EPOCHS": "1", "BC_SHA256": "",
           "START": str(tmp_path / "no_committed_start"),
           "EXTRA": "bc.episodes=8 rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=16"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "math_diagnosis_study.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    arms = {"base_seed1": (1e-4, 1.0), "lr1e-5_seed1": (1e-5, 1.0), "temp0.6_seed1": (1e-4, 0.6)}
    start = str((root / "lr" / "bc" / "bc_policy_hf").resolve())
    for run, (lr, temperature) in arms.items():
        cfg = yaml.safe_load((archive / "runs" / run / ".hydra" / "config.yaml").read_text())
        assert (cfg["rl"]["optimizer"]["lr"], cfg["rollout"]["temperature"]) == (lr, temperature)
        assert cfg["model"]["init_from"] == start and cfg["algo"]["name"] == "grpo"
    assert not (root / "base" / "bc").exists() and not (root / "temp" / "bc").exists()  # one start for the arms
    report = (archive / "report.md").read_text()
    diff = "`rl.optimizer.lr=1e-05,rollout.temperature=1.0 - rl.optimizer.lr=0.0001,rollout.temperature=1.0` | 1 |"
    assert diff in report and "no setting named" not in report


@pytest.mark.long  # a study script run shortened (minutes): make test-long, run by CI after make test
def test_calibration_and_sokoban_study_run_shortened(tmp_path):
    """``scripts/calibrate.sh`` on Sokoban shortened: a BC start (copied to a temporary START), a grid of two lrs
    x two penalties on one selection seed from it, run folders named by the grid's keys, the calibration table
    with one row per setting naming the best, and its archive."""
    import yaml

    out, archive, start = tmp_path / "cal", tmp_path / "archive", tmp_path / "committed" / "bc_policy_hf"
    env = {**_env(tmp_path), "PY": PY, "ENV": "sokoban", "OUT": str(out), "ARCHIVE": str(archive), "START": str(start),
           "SEEDS": "1", "ITERS": "1", "VAL_EVERY": "1", "VAL_EPISODES": "4", "N_JOBS": "2",
           "GRID": "rl.optimizer.lr=1e-4,1e-5 algo.advantage.invalid_penalty=-0.1,0",
           "EXTRA": "bc.episodes=8 bc.epochs=1 bc.bootstrap.enabled=false rollout.tasks_per_iteration=2 "
                    "rollout.group_size=2"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "calibrate.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = sorted(p.name for p in (out / "rl").iterdir() if p.is_dir())
    assert runs == ["sampo_lr0.0001_invalid_penalty-0.1_seed1", "sampo_lr0.0001_invalid_penalty0_seed1",
                    "sampo_lr1e-05_invalid_penalty-0.1_seed1", "sampo_lr1e-05_invalid_penalty0_seed1"], runs
    cfg = yaml.safe_load((out / "rl" / runs[-1] / ".hydra" / "config.yaml").read_text())
    assert cfg["rl"]["optimizer"]["lr"] == 1e-5 and cfg["algo"]["advantage"]["invalid_penalty"] == 0
    assert cfg["model"]["init_from"] == str((out / "bc" / "bc_policy_hf").resolve()) and (start / "model.safetensors").exists()
    table = (archive / "calibration.md").read_text()
    assert table.count("| `rl.optimizer.lr=") == 4 and "best setting: `" in table
    assert "| `rl.optimizer.lr=1e-05,algo.advantage.invalid_penalty=0` | 1 |" in table
    assert sorted(p.name for p in (archive / "runs").iterdir()) == runs
    bad = subprocess.run(["bash", str(ROOT / "scripts" / "calibrate.sh")], cwd=ROOT, capture_output=True, text=True,
                         env={**env, "ENV": "frozenlake"}, timeout=60)
    assert bad.returncode == 2 and "no study to calibrate from" in bad.stderr


@pytest.mark.slow  # the sokoban calibration test runs the same rl_study in the default suite
def test_staleness_study_runs_shortened(tmp_path):
    """``scripts/staleness_study.sh`` shortened: the committed Sokoban start, the grid of three staleness bounds x
    the correction off and on, one seed, one iteration each, run folders named by the grid, the report of the
    planned contrasts and the archive."""
    out, archive = tmp_path / "stale", tmp_path / "archive"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "ARCHIVE": str(archive), "SEEDS": "1", "ITERS": "1",
           "VAL_EVERY": "1", "VAL_EPISODES": "4", "EXTRA": "rollout.tasks_per_iteration=2 rollout.group_size=2"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "staleness_study.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = sorted(p.name for p in (out / "rl").iterdir() if p.is_dir() and p.name != "report")
    assert runs == [f"sampo_k{k}_is{c}_seed1" for k in (0, 2, 4) for c in ("False", "True")], runs
    report = (archive / "report.md").read_text()  # the planned contrasts, paired by seed
    for contrast in ("rl.max_staleness=2,algo.rollout_correction.enabled=False - rl.max_staleness=0,algo.rollout_correction.enabled=False",
                     "rl.max_staleness=4,algo.rollout_correction.enabled=True - rl.max_staleness=4,algo.rollout_correction.enabled=False"):
        assert f"`{contrast}` | 1 |" in report, report[:3000]
    assert sorted(p.name for p in (archive / "runs").iterdir()) == runs


@pytest.mark.slow  # the sokoban calibration test runs the same rl_study in the default suite
@pytest.mark.parametrize("study", ["adaptive_clip", "outlier_ratio", "curriculum"])
def test_beyond_paper_studies_run_shortened(tmp_path, study):
    """``scripts/beyond_paper_study.sh`` shortened, each study: its two arms on one seed, one iteration each, run
    folders named by the arm, the report of the planned contrasts and the archive; the curriculum's start is cloned
    on both Sokoban levels first and kept where the study's START says."""
    out, archive, start = tmp_path / "logs", tmp_path / "archive", tmp_path / "start"
    extra = "rollout.tasks_per_iteration=2 rollout.group_size=2 bc.episodes=24 bc.epochs=1 bc.bootstrap.enabled=false"
    env = {**_env(tmp_path), "PY": PY, "STUDY": study, "OUT": str(out), "ARCHIVE": str(archive), "SEEDS": "1",
           "ITERS": "1", "VAL_EVERY": "1", "VAL_EPISODES": "4", "EXTRA": extra}
    if study == "curriculum":  # a start of its own (not the committed one's bytes: its hash check is off)
        env.update(START=str(start), BC_SHA256="")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "beyond_paper_study.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    arms = {"adaptive_clip": (["sampo_clip_adaptive_seed1", "sampo_clip_fixed_seed1"],
                              "algo.clip_control.mode=adaptive - algo.clip_control.mode=fixed"),
            "outlier_ratio": (["gspo_geometric_seed1", "gspo_outlier_weighted_seed1"],
                              "algo.loss.seq_ratio=outlier_weighted - algo.loss.seq_ratio=geometric"),
            "curriculum": (["sampo_curriculum_sokoban_control_seed1", "sampo_curriculum_sokoban_seed1"],
                           "experiment=curriculum_sokoban - experiment=curriculum_sokoban_control")}
    runs, contrast = arms[study]
    assert sorted(p.name for p in (out / "rl").iterdir() if p.is_dir() and p.name != "report") == runs
    assert f"`{contrast}` | 1 |" in (archive / "report.md").read_text()
    assert sorted(p.name for p in (archive / "runs").iterdir()) == runs
    if study == "curriculum":
        assert (start / "model.safetensors").exists()


@pytest.mark.slow  # the sokoban calibration test runs the same rl_study in the default suite
def test_planned_study_runs_shortened(tmp_path):
    """``scripts/planned_study.sh`` on a plan of its own (the committed Sokoban start, SAMPO and GRPO, one seed,
    two iterations): the runs are the plan's, the methods of one seed side by side, and the report says
    that nothing departs from the plan; a run the plan does not name would be listed."""
    import yaml

    plan = tmp_path / "study" / "plan.yaml"
    plan.parent.mkdir()
    plan.write_text(yaml.safe_dump({
        "name": "tiny_plan", "experiment": "sokoban",
        "start": {"path": "docs/results/sokoban_rl_study/bc_start/bc_policy_hf",
                  "sha256": "ad73dda7de2b69788d9c5b60b7eb27bb13ddabbc3eb36cb574d57d00c7aff709"},
        "methods": ["sampo", "grpo"], "seeds": [3], "iterations": 2, "val_every": 1, "val_episodes": 4,
        "min_optimizer_steps": 4,
        "overrides": ["debug=cpu_small", "rollout.tasks_per_iteration=2", "rollout.group_size=2"]}))
    out, archive = tmp_path / "logs", tmp_path / "archive"
    env = {**_env(tmp_path), "PY": PY, "PLAN": str(plan), "OUT": str(out), "ARCHIVE": str(archive)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "planned_study.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    jobs = re.findall(r"#\d+ : .*", (out / "rl.out").read_text())
    assert [("seed=3" in j, "algo=sampo" in j) for j in jobs] == [(True, True), (True, False)]  # one seed, both methods
    assert sorted(p.name for p in (archive / "runs").iterdir()) == ["grpo_seed3", "sampo_seed3"]
    report = (archive / "report.md").read_text()
    assert "## Departures from the plan" in report and "None: every planned run is here, as planned." in report


@pytest.mark.slow  # the sokoban calibration test runs the same rl_study in the default suite
def test_webshop_rl_study_runs_shortened(tmp_path):
    """``scripts/webshop_rl_study.sh`` shortened: the start with debug=cpu_small's WebShop recipe (the product
    clicks and searches repeated), copied to a temporary START, SAMPO and GRPO from it on one seed, the report and archive
    with the WebShop score beside success."""
    import yaml

    out, archive, start = tmp_path / "ws", tmp_path / "archive", tmp_path / "committed" / "bc_policy_hf"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "ARCHIVE": str(archive), "START": str(start),
           "SEEDS": "1", "ITERS": "1", "VAL_EVERY": "1", "VAL_EPISODES": "4", "N_JOBS": "2",
           "BC_SHA256": "",  # a start of its own, not the committed one the script checks by default
           "EXTRA": "bc.episodes=8 rollout.tasks_per_iteration=2 rollout.group_size=2 env.max_turns=4"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "webshop_rl_study.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "each trained 3 times an epoch" in (out / "bc.out").read_text()  # the budget's recipe
    assert (start / "model.safetensors").exists()
    assert sorted(p.name for p in (archive / "runs").iterdir()) == ["grpo_seed1", "sampo_seed1"]
    for run in ("grpo_seed1", "sampo_seed1"):
        record = json.loads((archive / "runs" / run / "rl_results.json").read_text())
        assert "val/score" in record["val_after_rl"] and "val/success_rate" in record["val_after_rl"]
        cfg = yaml.safe_load((archive / "runs" / run / ".hydra" / "config.yaml").read_text())
        assert cfg["env"]["name"] == "webshop" and cfg["model"]["init_from"] == str((out / "bc" / "bc_policy_hf").resolve())
    assert (archive / "report.md").exists()


@pytest.mark.slow  # test_alfworld_study_runs_shortened runs the same rl_study on the real engine in the default suite
def test_alfworld_cpu_study_runs_shortened(tmp_path):
    """``scripts/alfworld_cpu_study.sh`` shortened, on the real alfworld engine: BC and RL on the study's two task
    types and its turn limit, the report per task type."""
    import importlib.util

    import yaml

    if importlib.util.find_spec("alfworld") is None:  # not imported: importing alfworld sets $ALFWORLD_DATA
        pytest.skip("needs the alfworld package (pip install 'arl[alfworld]')")
    out = tmp_path / "alfworld"
    env = {**_env(tmp_path), "PY": PY, "OUT": str(out), "SEEDS": "1", "ITERS": "1", "VAL_EVERY": "1",
           "VAL_EPISODES": "4", "N_JOBS": "1", "BC_EPISODES": "4", "BC_EPOCHS": "1",
           "EXTRA": "rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=12"}
    env.pop("ALFWORLD_DATA", None)  # generated games
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_cpu_study.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for cfg_path in (out / "bc" / ".hydra" / "config.yaml", out / "rl" / "sampo_seed1" / ".hydra" / "config.yaml"):
        cfg = yaml.safe_load(cfg_path.read_text())
        assert cfg["env"]["kwargs"]["task_types"] == ["pick_and_place_simple", "look_at_obj_in_light"]
        assert cfg["env"]["max_turns"] == cfg["env"]["kwargs"]["max_steps"]
    report = (out / "rl" / "report" / "report.md").read_text()
    assert "`algo=sampo - algo=grpo` | 1 |" in report


@pytest.mark.slow  # four stages of BC and RL runs on the real engine (about 4 minutes)
def test_alfworld_strong_study_stages_run_shortened(tmp_path):
    """``scripts/alfworld_strong_study.sh`` shortened, on the real alfworld engine: the cloned policy (kept where BASE
    says), the DAgger measurement (three policies validated alike, the errors table; the DAgger policy kept as the RL
    START), a calibration grid archived,
    then run again on a fresh folder: the archived runs count as done and nothing trains again; the confirmation
    refuses to start without the calibration's choice."""
    import importlib.util

    if importlib.util.find_spec("alfworld") is None:
        pytest.skip("needs the alfworld package (pip install 'arl[alfworld]')")
    base, start = tmp_path / "committed" / "bc_policy_hf", tmp_path / "committed_dagger" / "bc_policy_hf"
    small = "rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=12"
    env = {**_env(tmp_path), "PY": PY, "BASE": str(base), "START": str(start), "BC_SHA256": "", "SEEDS": "1", "ITERS": "1", "VAL_EPISODES": "4",
           "N_JOBS": "2", "BC_EPISODES": "4", "BC_EPOCHS": "1", "EXTRA": small}
    env.pop("ALFWORLD_DATA", None)

    def stage(name: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(ROOT / "scripts" / "alfworld_strong_study.sh")], cwd=ROOT, text=True,
                              env={**env, "STAGE": name, **more}, capture_output=True, timeout=900)

    built = stage("start", OUT=str(tmp_path / "strong"))
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    assert (base / "model.safetensors").exists() and (base.parent / ".hydra" / "config.yaml").exists()
    dagger = stage("dagger", OUT=str(tmp_path / "dagger"), BC_DATASET=str(tmp_path / "strong" / "bc" / "bc_dataset.jsonl"),
                   EXTRA=f"{small} bc.dagger.episodes=2")
    assert dagger.returncode == 0, dagger.stdout[-2000:] + dagger.stderr[-3000:]
    table = (tmp_path / "dagger" / "errors.md").read_text()
    assert "| | start | DAgger round | one more epoch |" in table and "| episodes | 4 | 4 | 4 |" in table
    assert (start / "model.safetensors").exists() and (start.parent / "bc.sha256").exists()  # the RL start
    grid, archive = "rl.optimizer.lr=1e-4 algo.advantage.penalty_only_groups=normalise,center", tmp_path / "archive"
    cal = stage("calibrate", OUT=str(tmp_path / "cal"), GRID=grid, METHODS="grpo", ARCHIVE=str(archive))
    assert cal.returncode == 0, cal.stdout[-2000:] + cal.stderr[-3000:]
    runs = sorted(p.name for p in (archive / "runs").iterdir())
    assert runs == ["grpo_lr0.0001_penalty_only_groupscenter_seed1", "grpo_lr0.0001_penalty_only_groupsnormalise_seed1"]
    again = stage("calibrate", OUT=str(tmp_path / "cal_again"), GRID=grid, METHODS="grpo", ARCHIVE=str(archive))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "study: 2 finished runs restored from" in again.stdout
    for name in runs:  # left as they were: no checkpoint, the archived record
        assert not (tmp_path / "cal_again" / "rl" / name / "checkpoints").exists()
    refused = stage("confirm", OUT=str(tmp_path / "conf"))
    assert refused.returncode != 0 and "ARM=" in refused.stderr


def test_train_py_stops_a_gpu_run_and_a_missing_folder_at_start_up(tmp_path):
    """The CLI itself (what the in-process checks above stand for): exit 2 and the message, in seconds."""
    _tree(tmp_path)
    gpu = _run("python src/train.py experiment=sampo_alfworld", tmp_path, ["dry_run=true"], timeout=120)
    if "needs a GPU" not in gpu.stderr and gpu.returncode == 0:
        pytest.skip("this machine has a GPU")
    assert gpu.returncode == 2 and "debug=cpu_small" in gpu.stderr, gpu.stderr[-2000:]
    missing = _run("python src/train.py model=hf model.path=/data/checkpoints/my_sft", tmp_path, ["dry_run=true"], timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr, missing.stderr[-2000:]
