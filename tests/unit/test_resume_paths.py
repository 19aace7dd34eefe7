"""Which checkpoint a run resumes from (``ckpt_path=last``)."""

from __future__ import annotations

import os
import time

import pytest

from arl.utils.config import ConfigError


def _save(path, iteration: int) -> None:
    import torch

    torch.save({"arl": {"iteration": iteration}, "state_dict": {"w": torch.zeros(64)}}, path)



def _resolve(c: dict):
    """resolve_ckpt_path of a config's ckpt_path, paths and task_name."""
    from arl.run.resume import resolve_ckpt_path

    paths = c["paths"]
    return resolve_ckpt_path(c["ckpt_path"], paths.get("log_dir", ""), c.get("task_name", ""), paths.get("output_dir", ""))


def _finished(c: dict):
    """finished_results of a config's ckpt_path, paths.output_dir and rl.iterations."""
    from arl.run.resume import finished_results

    return finished_results(c["ckpt_path"], c["paths"]["output_dir"], c["rl"]["iterations"])

def test_ckpt_path_last_finds_the_newest_run(tmp_path):
    from arl.run.resume import find_last_checkpoint

    with pytest.raises(ConfigError, match="no checkpoint of task 'job'"):
        find_last_checkpoint(tmp_path, "job")
    paths = []
    for name in ("2026-01-01_00-00-00", "2026-01-02_00-00-00"):
        ck = tmp_path / "job" / "runs" / name / "checkpoints" / "last.ckpt"
        ck.parent.mkdir(parents=True)
        _save(ck, 1)
        paths.append(ck)
    now = time.time()
    os.utime(paths[0], (now, now))
    os.utime(paths[1], (now - 100, now - 100))
    assert find_last_checkpoint(tmp_path, "job") == paths[0]
    c = {"ckpt_path": "last", "paths": {"log_dir": str(tmp_path)}, "task_name": "job"}
    assert _resolve(c) == paths[0]
    with pytest.raises(ConfigError, match="does not exist"):
        _resolve({**c, "ckpt_path": str(tmp_path / "nope.ckpt")})


def test_ckpt_path_resume_is_the_run_folders_own_checkpoint_or_a_fresh_start(tmp_path):

    c = {"ckpt_path": "resume", "paths": {"output_dir": str(tmp_path / "job"), "log_dir": str(tmp_path)}, "task_name": "t"}
    assert _resolve(c) is None  # nothing yet: start fresh (no error, unlike `last`)
    ck = tmp_path / "job" / "checkpoints" / "last.ckpt"
    ck.parent.mkdir(parents=True)
    _save(ck, 1)
    assert _resolve(c) == ck


def test_a_finished_run_returns_its_record_with_or_without_its_checkpoint(tmp_path, caplog):
    """`ckpt_path=resume` on a run folder that holds rl_results.json: the record when the run reached
    rl.iterations, with or without its final last.ckpt (archived or carried by scripts/carry.py); a
    clear error when rl.iterations has since grown and the checkpoint is gone (training on would
    start over); None when training goes on from the checkpoint."""
    import json

    from arl.run.resume import RESULTS_FILE

    run = tmp_path / "job"
    c = {"ckpt_path": "resume", "paths": {"output_dir": str(run)}, "rl": {"iterations": 30}}
    assert _finished(c) is None  # a fresh folder: train
    run.mkdir()
    record = {"iterations_done": 30, "val_after_rl": {"val/success_rate": 0.5}}
    (run / RESULTS_FILE).write_text(json.dumps(record))
    assert _finished(c) == record
    assert _finished({**c, "ckpt_path": None}) is None  # only `resume` looks
    assert _finished({**c, "ckpt_path": "last"}) is None
    with pytest.raises(ConfigError, match="finished at iteration 30 .* rl.iterations is now 40"):
        _finished({**c, "rl": {"iterations": 40}})
    assert _finished({**c, "rl": {"iterations": 20}}) == record  # a longer run's record, said so
    assert "finished at iteration 30 (rl_results.json), more than rl.iterations=20" in caplog.text
    import torch

    ck = run / "checkpoints" / "last.ckpt"
    ck.parent.mkdir()
    torch.save({"arl": {"iteration": 30}}, ck)
    assert _finished(c) == record  # the final checkpoint is there too: still finished, left alone
    assert _finished({**c, "rl": {"iterations": 40}}) is None  # ... unless it is to go on from it
    torch.save({"arl": {"iteration": 34}}, ck)  # a checkpoint past the record (the run trained on): resume
    assert _finished(c) is None


def test_a_checkpoint_that_cannot_be_read_is_refused_with_the_newest_readable_one(tmp_path):
    """A truncated checkpoint, another kind of file, a zip that is not torch's, a folder without
    meta.pt: refused at once, the file named, and the run's newest readable checkpoint offered
    (torch's 'mmap can only be used with files saved with ...' never reaches the user)."""
    from arl.run.resume import checkpoint_iteration, checkpoint_problem

    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    best, last = folder / "best-iter2.ckpt", folder / "last.ckpt"
    _save(best, 2)
    _save(last, 4)
    assert checkpoint_problem(last) is None and checkpoint_iteration(last) == 4
    now = time.time()
    os.utime(best, (now - 50, now - 50))
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # a copy cut short
    c = {"ckpt_path": str(last), "paths": {"output_dir": str(tmp_path / "run"), "log_dir": str(tmp_path)}, "task_name": "t"}
    with pytest.raises(ConfigError, match=f"ckpt_path={last}: {last} is not a checkpoint .*truncated.*"
                                          f"newest readable checkpoint of this run is {best}: pass ckpt_path={best}"):
        _resolve(c)
    with pytest.raises(ConfigError, match="newest readable checkpoint of this run is .*best-iter2.ckpt"):
        _resolve({**c, "ckpt_path": "resume"})  # the run folder's own last.ckpt is the broken one
    notes = folder / "notes.ckpt"
    notes.write_text("not a checkpoint at all")
    assert "not a checkpoint" in checkpoint_problem(notes)
    import zipfile

    with zipfile.ZipFile(folder / "other.ckpt", "w") as archive:
        archive.writestr("hello.txt", "hi")
    assert "not a torch.save checkpoint" in checkpoint_problem(folder / "other.ckpt")
    sharded = folder / "sharded.ckpt"
    sharded.mkdir()
    assert "without meta.pt" in checkpoint_problem(sharded)
    _save(sharded / "meta.pt", 3)
    assert checkpoint_problem(sharded) is None
    best.unlink()  # now the newest readable one is the sharded folder
    with pytest.raises(ConfigError, match="newest readable checkpoint of this run is .*sharded.ckpt"):
        _resolve(c)


def test_damaged_archives_dangling_links_and_finished_runs(tmp_path, caplog):
    """Bytes flipped inside the archive's directory are a clear problem, never a traceback; a
    dangling ``*.ckpt`` link is no candidate; a finished run whose last.ckpt cannot be read is
    left as it is (its record returned, a warning said)."""
    import json

    from arl.run.resume import RESULTS_FILE, checkpoint_problem, newest_valid_checkpoint

    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    good = folder / "best-iter1.ckpt"
    _save(good, 1)
    data = bytearray(good.read_bytes())
    damaged = folder / "damaged.ckpt"
    for offset in range(1, 200, 7):  # the directory sits at the end: flip bytes there, one place at a time
        copy = bytearray(data)
        copy[-offset] ^= 0xFF
        damaged.write_bytes(bytes(copy))
        problem = checkpoint_problem(damaged)
        assert problem is None or "damaged.ckpt" in problem
    damaged.unlink()
    (folder / "gone.ckpt").symlink_to(folder / "nowhere.ckpt")
    assert newest_valid_checkpoint(folder) == good
    run = tmp_path / "run"
    (run / RESULTS_FILE).write_text(json.dumps({"iterations_done": 3}))
    (folder / "last.ckpt").write_bytes(b"cut")
    c = {"ckpt_path": "resume", "paths": {"output_dir": str(run)}, "rl": {"iterations": 3}}
    assert _finished(c) == {"iterations_done": 3}
    assert "cannot be read" in caplog.text
