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
