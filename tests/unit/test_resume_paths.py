"""Which checkpoint a run resumes from (``ckpt_path=last``)."""

from __future__ import annotations

import os
import time

import pytest

from arl.utils.config import ConfigError


def test_ckpt_path_last_finds_the_newest_run(tmp_path):
    from arl.resume import find_last_checkpoint, resolve_ckpt_path

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
    from arl.resume import resolve_ckpt_path

    c = {"ckpt_path": "resume", "paths": {"output_dir": str(tmp_path / "job"), "log_dir": str(tmp_path)}, "task_name": "t"}
    assert resolve_ckpt_path(c) is None  # nothing yet: start fresh (no error, unlike `last`)
    ck = tmp_path / "job" / "checkpoints" / "last.ckpt"
    ck.parent.mkdir(parents=True)
    ck.write_bytes(b"x")
    assert resolve_ckpt_path(c) == ck
