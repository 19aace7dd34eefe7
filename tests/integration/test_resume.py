"""Resume after a SIGKILL continues exactly: 4 iterations straight == 2 + kill + resume to 4
(same final weights, same metrics, continuous TensorBoard curves), on CPU."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import scale_helpers as sh
from arl_testing import ROOT, compose

OVERRIDES = [
    "debug=smoke", "bc.enabled=false", "rl.iterations=4", "rl.val_every=2", "rollout.val_episodes=2",
    "rollout.max_new_tokens=8", "env.max_turns=2", "algo.filter.name=none",
]
EXACT = 1e-6


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of one TensorBoard version folder, as TensorBoard shows it (purges applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "policy_hf" / "model.safetensors"))


def _cli(args: list[str], log_dir: Path, timeout: int = 600, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = sh.subprocess_env()
    return subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), *flags, *OVERRIDES, "task_name=resume", f"paths.log_dir={log_dir}",
         *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_path):
    from arl.run.pipeline import train

    straight_dir = tmp_path_factory.mktemp("straight")
    with sh.one_thread():  # as the subprocesses: the same float arithmetic, bit for bit
        train(compose(OVERRIDES, output_dir=str(straight_dir)))

    log_dir = tmp_path_factory.mktemp("killed")
    killed = _cli(["+callbacks.kill._target_=scale_helpers.KillAt", "+callbacks.kill.iteration=3"], log_dir)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (run_dir,) = (log_dir / "resume" / "runs").iterdir()
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    resumed = _cli(["ckpt_path=last"], log_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return straight_dir, run_dir, ckpt, resumed


def test_checkpoint_holds_everything(runs):
    _, _, ckpt, _ = runs
    assert ckpt["arl"]["iteration"] == 2  # the kill came in iteration 3, before its checkpoint
    assert any(k.startswith("policy.") for k in ckpt["state_dict"])
    assert any(k.startswith("reference.") for k in ckpt["state_dict"])
    assert ckpt["optimizer_states"][0]["state"] and ckpt["lr_schedulers"]
    assert ckpt["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]["completed"] == 2
    dm = ckpt["RolloutDataModule"]  # Lightning called the DataModule's state_dict
    assert dm["iteration"] == 2 and dm["seed"] == 42
    assert len(dm["rng"]) == 1 and {"python", "numpy", "torch"} <= set(dm["rng"][0])


def test_resume_gives_the_straight_run(runs):
    straight_dir, run_dir, _, resumed = runs
    assert "resuming from" in resumed.stdout and str(run_dir) in resumed.stdout
    a, b = _weights(straight_dir), _weights(run_dir)
    diff = max(float((a[k] - b[k]).abs().max()) for k in a)
    print(f"resume: max |weight diff| straight vs kill+resume = {diff:.2e}")
    assert a.keys() == b.keys() and diff <= EXACT


def test_tensorboard_curves_are_continuous(runs):
    straight_dir, run_dir, _, _ = runs
    straight = _scalars(straight_dir / "tensorboard" / "rl")
    resumed = _scalars(run_dir / "tensorboard" / "rl")
    assert straight.keys() == resumed.keys()
    for tag, points in resumed.items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), (tag, steps)  # no duplicated step after the resume
        assert steps == [s for s, _ in straight[tag]], (tag, steps)  # and none missing
    assert [s for s, _ in resumed["actor/pg_loss"]] == [1, 2, 3, 4]
    assert [s for s, _ in resumed["val/success_rate"]] == [0, 2, 4]
    # iteration 3 after the resume rolled out the same tasks with the same samples
    for tag in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "rollout/return_mean", "rollout/response_len_mean", "adv/std"):
        for (s1, v1), (s2, v2) in zip(straight[tag], resumed[tag]):
            assert s1 == s2 and abs(v1 - v2) <= EXACT, (tag, s1, v1, v2)


def test_a_kill_during_a_checkpoint_write_resumes_from_the_last_complete_one(tmp_path):
    """The kill comes while iteration 3's checkpoint is half written: ``last.ckpt`` still holds
    iteration 2 whole, and ``ckpt_path=last`` resumes from it and finishes the run."""
    killed = _cli(["+callbacks.kill._target_=scale_helpers.KillDuringSave", "+callbacks.kill.iteration=3",
                   "rl.val_every=4"], tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (run_dir,) = (tmp_path / "resume" / "runs").iterdir()
    checkpoints = run_dir / "checkpoints"
    partial = checkpoints / "last.ckpt.tmp"
    assert partial.exists(), sorted(p.name for p in checkpoints.iterdir())  # the write the kill cut short
    with pytest.raises(Exception):  # noqa: B017 - a truncated file: what torch raises varies by version
        torch.load(partial, map_location="cpu", weights_only=True)
    ckpt = torch.load(checkpoints / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["arl"]["iteration"] == 2
    resumed = _cli(["ckpt_path=last", "rl.val_every=4"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = torch.load(checkpoints / "last.ckpt", map_location="cpu", weights_only=True)
    assert final["arl"]["iteration"] == 4 and not partial.exists()
    assert (run_dir / "policy_hf" / "model.safetensors").exists()


@pytest.mark.long  # over a minute: make test-long, run by CI after make test
def test_a_multirun_resumes_by_running_the_same_command_again(runs, tmp_path):
    """`ckpt_path=resume` in a multirun with a fixed sweep dir: the killed job continues in its own
    folder when the same command runs again, and ends where the straight run ended."""
    straight_dir = runs[0]
    sweep = tmp_path / "sweep"
    kill = ["+callbacks.kill._target_=scale_helpers.KillAt", "+callbacks.kill.iteration=3"]
    # the kill switch must not name the job's folder, or the second command would get another one
    keys = "hydra.job.config.override_dirname.exclude_keys=[paths.log_dir,ckpt_path,hydra.sweep.dir,callbacks.kill._target_,callbacks.kill.iteration,dry_run]"
    base = ["ckpt_path=resume", f"hydra.sweep.dir={sweep}", keys]
    killed = _cli([*base, *kill], tmp_path / "logs", flags=("-m",))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (job,) = [p for p in sweep.iterdir() if p.is_dir()]
    assert torch.load(job / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["arl"]["iteration"] == 2
    again = _cli(base, tmp_path / "logs", flags=("-m",))
    assert again.returncode == 0, again.stderr[-3000:]
    assert [p for p in sweep.iterdir() if p.is_dir()] == [job]
    a, b = _weights(straight_dir), _weights(job)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= EXACT
    # the finished job, its final checkpoint still there: the same command leaves it as it is (no
    # reload, no new event file, the record untouched)
    record_text = (job / "rl_results.json").read_text()
    record = json.loads(record_text)
    assert record["iterations_done"] == 4 and record["val_after_rl"]["val/success_rate"] >= 0
    events = sorted((job / "tensorboard").rglob("events.*"))
    fourth = _cli(base, tmp_path / "logs", flags=("-m",))
    assert fourth.returncode == 0, fourth.stderr[-3000:]
    assert "finished earlier (4 iterations" in fourth.stdout
    assert sorted((job / "tensorboard").rglob("events.*")) == events
    assert (job / "rl_results.json").read_text() == record_text
    # the finished job without its checkpoints (archived, or carried through git): the same command
    # recognises it by rl_results.json and leaves it as it is instead of training it from the start
    shutil.rmtree(job / "checkpoints")
    third = _cli(base, tmp_path / "logs", flags=("-m",))
    assert third.returncode == 0, third.stderr[-3000:]
    assert "finished earlier (4 iterations" in third.stdout
    assert not (job / "checkpoints").exists() and sorted((job / "tensorboard").rglob("events.*")) == events
    c = _weights(job)
    assert all(torch.equal(b[k], c[k]) for k in b)
    dry = _cli([*base, "dry_run=true"], tmp_path / "logs", flags=("-m",))
    assert dry.returncode == 0 and "finished earlier (rl_results.json); nothing to run" in dry.stdout, dry.stderr[-2000:]


def test_a_finished_run_trained_on_drops_its_old_record(tmp_path, tiny_path):
    """A run folder whose rl_results.json is from an earlier, shorter finish: once the run trains on,
    the record is gone (a kill now must not leave the folder looking finished to ``ckpt_path=resume``
    or to scripts/carry.py), and the run's end writes the new one whole."""
    import lightning as L

    from arl.run.pipeline import train

    out = tmp_path / "run"
    out.mkdir()
    record = out / "rl_results.json"
    record.write_text(json.dumps({"iterations_done": 1}))
    seen: list[bool] = []

    class Look(L.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append(record.exists())

    with sh.one_thread():
        train(compose([*OVERRIDES, "rl.iterations=2", "rl.val_every=2"], output_dir=str(out)), callbacks=[Look()])
    assert seen == [False]
    assert json.loads(record.read_text())["iterations_done"] == 2 and not (out / "rl_results.json.tmp").exists()


def test_a_truncated_checkpoint_is_refused_by_both_clis_in_seconds(tmp_path):
    """``src/train.py ckpt_path=<cut short>`` (dry run: nothing heavy is imported) and
    ``src/eval.py ckpt_path=<cut short>`` stop with exit 2, the file named and the run's newest
    readable checkpoint offered, instead of torch's mmap error."""
    import time

    root = Path(__file__).resolve().parents[2]
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    good, bad = folder / "best-iter1.ckpt", folder / "last.ckpt"
    torch.save({"arl": {"iteration": 1}, "state_dict": {}}, good)
    torch.save({"arl": {"iteration": 2}, "state_dict": {"w": torch.zeros(256)}}, bad)
    bad.write_bytes(bad.read_bytes()[:300])
    for script, extra in (("train.py", ["dry_run=true", "debug=smoke"]), ("eval.py", [])):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(root / "src" / script), f"ckpt_path={bad}", *extra],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 2, (script, proc.stderr[-2000:])
        assert f"{bad} is not a checkpoint" in proc.stderr and f"pass ckpt_path={good}" in proc.stderr, script
        assert "mmap" not in proc.stderr
        print(f"{script}: refused in {time.perf_counter() - t0:.1f} s")
