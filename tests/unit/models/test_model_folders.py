"""save_folder_atomically: a model folder appears whole or not at all."""

import json

import pytest

from arl.models.folders import save_folder_atomically


def test_writes_model_tokenizer_and_sidecar_replacing_an_old_folder(tiny, tmp_path):
    model, tok = tiny
    out = tmp_path / "models" / "m"
    out.mkdir(parents=True)
    (out / "stale.txt").write_text("from an older build")
    assert save_folder_atomically(out, model, tok, "meta.json", {"k": 1}, prefix=".tmp-") == out
    assert {"config.json", "model.safetensors", "tokenizer.json", "meta.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "stale.txt").exists() and json.loads((out / "meta.json").read_text()) == {"k": 1}
    assert [p.name for p in out.parent.iterdir()] == ["m"]  # no temporary folder left


class _FullDisk:
    """A tokenizer whose save fails (what a full disk does half-way through a build)."""

    def save_pretrained(self, folder):
        (folder / "tokenizer.json").write_text("{")
        raise OSError("No space left on device")


def test_a_failed_save_leaves_the_old_folder_and_no_temporary_one(tiny, tmp_path):
    model, _ = tiny
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").write_text("old")
    with pytest.raises(OSError, match="No space left"):
        save_folder_atomically(out, model, _FullDisk(), "meta.json", {}, prefix=".tmp-")
    assert (out / "config.json").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["m"]


def _race_builder(out: str, log: str, barrier_dir: str) -> None:
    """A process asking for the cached folder ``out`` (run by multiprocessing)."""
    import os
    import time
    from pathlib import Path

    from arl.models.folders import build_once

    Path(barrier_dir, str(os.getpid())).touch()
    while len(os.listdir(barrier_dir)) < 4:  # all four ask at once
        time.sleep(0.01)

    def build():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # a slow build: the others arrive while it runs
        Path(out).mkdir()
        Path(out, "done").write_text("x")
        return Path(out)

    assert build_once(Path(out), lambda f: (f / "done").exists(), build) == Path(out)
    assert Path(out, "done").read_text() == "x"


def test_processes_asking_at_once_build_the_folder_once(tmp_path):
    import multiprocessing as mp

    (tmp_path / "barrier").mkdir()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_race_builder, args=(str(tmp_path / "model"), str(tmp_path / "log"),
                                                     str(tmp_path / "barrier"))) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert len((tmp_path / "log").read_text().split()) == 1  # one process built it, three reused it
