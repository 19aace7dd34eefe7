"""Which checkpoint a run resumes from (``ckpt_path=last``)."""

from __future__ import annotations

import os
import time

import pytest

from arl.utils.config import ConfigError


def test_ckpt_path_last_finds_the_newest_run(tmp_path):
    from arl.run.resume import find_last_checkpoint, resolve_ckpt_path

    with pytest.raises(ConfigError, match="no checkpoint of task 'job'"):
        find_last_checkpoint(tmp_path, "job")
    paths = []
    for name in ("2026-01-01_00-00-00", "2026-01-02_00-00-00"):
        ck = tmp_path / "job" / "runs" / name / "checkpoints" / "last.ckpt"
        ck.parent.mkdir(parents=True)
        ck.write_bytes(b"x")
        paths.append(ck)
    now = time.time()
    os.utime(paths[0], (now, now))
    os.utime(paths[1], (now - 100, now - 100))
    assert find_last_checkpoint(tmp_path, "job") == paths[0]
    c = {"ckpt_path": "last", "paths": {"log_dir": str(tmp_path)}, "task_name": "job"}
    assert resolve_ckpt_path(c) == paths[0]
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_ckpt_path({**c, "ckpt_path": str(tmp_path / "nope.ckpt")})


def test_ckpt_path_resume_is_the_run_folders_own_checkpoint_or_a_fresh_start(tmp_path):
    from arl.run.resume import resolve_ckpt_path

    c = {"ckpt_path": "resume", "paths": {"output_dir": str(tmp_path / "job"), "log_dir": str(tmp_path)}, "task_name": "t"}
    assert resolve_ckpt_path(c) is None  # nothing yet: start fresh (no error, unlike `last`)
    ck = tmp_path / "job" / "checkpoints" / "last.ckpt"
    ck.parent.mkdir(parents=True)
    ck.write_bytes(b"x")
    assert resolve_ckpt_path(c) == ck


def test_a_finished_run_returns_its_record_with_or_without_its_checkpoint(tmp_path, caplog):
    """`ckpt_path=resume` on a run folder that holds rl_results.json: the record when the run reached
    rl.iterations, with or without its final last.ckpt (archived or carried by scripts/carry.py); a
    clear error when rl.iterations has since grown and the checkpoint is gone (training on would
    start over); None when training goes on from the checkpoint."""
    import json

    from arl.run.resume import RESULTS_FILE, finished_results

    run = tmp_path / "job"
    c = {"ckpt_path": "resume", "paths": {"output_dir": str(run)}, "rl": {"iterations": 30}}
    assert finished_results(c) is None  # a fresh folder: train
    run.mkdir()
    record = {"iterations_done": 30, "val_after_rl": {"val/success_rate": 0.5}}
    (run / RESULTS_FILE).write_text(json.dumps(record))
    assert finished_results(c) == record
    assert finished_results({**c, "ckpt_path": None}) is None  # only `resume` looks
    assert finished_results({**c, "ckpt_path": "last"}) is None
    with pytest.raises(ConfigError, match="finished at iteration 30 .* rl.iterations is now 40"):
        finished_results({**c, "rl": {"iterations": 40}})
    assert finished_results({**c, "rl": {"iterations": 20}}) == record  # a longer run's record, said so
    assert "finished at iteration 30 (rl_results.json), more than rl.iterations=20" in caplog.text
    import torch

    ck = run / "checkpoints" / "last.ckpt"
    ck.parent.mkdir()
    torch.save({"arl": {"iteration": 30}}, ck)
    assert finished_results(c) == record  # the final checkpoint is there too: still finished, left alone
    assert finished_results({**c, "rl": {"iterations": 40}}) is None  # ... unless it is to go on from it
    torch.save({"arl": {"iteration": 34}}, ck)  # a checkpoint past the record (the run trained on): resume
    assert finished_results(c) is None
