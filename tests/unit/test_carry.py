"""scripts/carry.py: what a study carries to the next machine through lasting storage, and back."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from arl_testing import ROOT

spec = importlib.util.spec_from_file_location("carry", ROOT / "scripts" / "carry.py")
carry = importlib.util.module_from_spec(spec)
spec.loader.exec_module(carry)


def _file(path, data: bytes | str = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)


def _study(root):
    """A study folder as the scripts leave it: a BC start, a multirun with one finished and one
    unfinished run, the multirun's log."""
    bc = root / "bc"
    _file(bc / ".hydra" / "config.yaml", "seed: 1\n")
    _file(bc / "bc_policy_hf" / "model.safetensors", b"w" * 100)
    _file(bc / "bc_dataset.jsonl", "{}\n")
    _file(bc / "bc_results.json", "{}\n")
    done = root / "rl" / "algo=sampo,seed=1"
    _file(done / ".hydra" / "config.yaml", "seed: 1\n")
    _file(done / "tensorboard" / "rl" / "events.out.tfevents.1", b"e")
    _file(done / "val_episodes" / "iter30.jsonl", "{}\n")
    _file(done / "checkpoints" / "last.ckpt", b"c" * 50)
    _file(done / "checkpoints" / "best-iter15.ckpt", b"c" * 50)
    _file(done / "policy_hf" / "model.safetensors", b"w")
    _file(done / "rl_results.json", json.dumps({"iterations_done": 30}))
    going = root / "rl" / "algo=grpo,seed=1"
    _file(going / ".hydra" / "config.yaml", "seed: 1\n")
    _file(going / "tensorboard" / "rl" / "events.out.tfevents.2", b"e")
    _file(going / "checkpoints" / "last.ckpt", b"c" * 50)
    _file(going / "checkpoints" / "last.ckpt.tmp", b"c")
    _file(going / "checkpoints" / "best-iter0.ckpt", b"c")
    _file(root / "rl.out", "it 1 ...\n")
    sharded = root / "rl" / "algo=gspo,seed=1"  # an FSDP run: checkpoints are folders of shards
    _file(sharded / ".hydra" / "config.yaml", "seed: 1\n")
    _file(sharded / "checkpoints" / "last.ckpt" / "meta.pt", b"m")
    _file(sharded / "checkpoints" / "last.ckpt" / "__0_0.distcp", b"s" * 20)
    _file(sharded / "checkpoints" / "best-iter10.ckpt" / "meta.pt", b"m")
    return done, going


def test_save_keeps_what_resuming_and_the_report_need(tmp_path):
    src, dest = tmp_path / "study", tmp_path / "carry" / "study"
    _study(src)
    keep, left = carry.save(src, dest)
    kept = {str(p) for p in keep}
    assert kept == {
        "bc/.hydra/config.yaml", "bc/bc_policy_hf/model.safetensors", "bc/bc_results.json",
        "rl/algo=sampo,seed=1/.hydra/config.yaml", "rl/algo=sampo,seed=1/tensorboard/rl/events.out.tfevents.1",
        "rl/algo=sampo,seed=1/val_episodes/iter30.jsonl", "rl/algo=sampo,seed=1/rl_results.json",
        "rl/algo=grpo,seed=1/.hydra/config.yaml", "rl/algo=grpo,seed=1/tensorboard/rl/events.out.tfevents.2",
        "rl/algo=grpo,seed=1/checkpoints/last.ckpt",  # unfinished: the state it goes on from
        "rl.out",
        "rl/algo=gspo,seed=1/.hydra/config.yaml",  # a sharded last.ckpt is carried whole
        "rl/algo=gspo,seed=1/checkpoints/last.ckpt/meta.pt", "rl/algo=gspo,seed=1/checkpoints/last.ckpt/__0_0.distcp",
    }
    why = {str(p): reason for p, reason in left}
    assert "finished run" in why["rl/algo=sampo,seed=1/checkpoints/last.ckpt"]
    assert "--policies" in why["rl/algo=sampo,seed=1/policy_hf/model.safetensors"]
    assert "partial" in why["rl/algo=grpo,seed=1/checkpoints/last.ckpt.tmp"]
    assert "rebuilt" in why["bc/bc_dataset.jsonl"]
    assert (dest / "rl" / "algo=sampo,seed=1" / "best_checkpoint.txt").read_text() == "best-iter15.ckpt\n"
    assert (dest / "rl" / "algo=grpo,seed=1" / "best_checkpoint.txt").read_text() == "best-iter0.ckpt\n"
    assert (dest / "rl" / "algo=gspo,seed=1" / "best_checkpoint.txt").read_text() == "best-iter10.ckpt\n"
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == sorted(
        kept | {f"rl/algo={a},seed=1/best_checkpoint.txt" for a in ("sampo", "grpo", "gspo")} | {".carried.json"})
    # --policies keeps the final policy
    keep, _ = carry.save(src, dest, policies=True)
    assert "rl/algo=sampo,seed=1/policy_hf/model.safetensors" in {str(p) for p in keep}
    # --max-mb leaves out other large files, never a part of a policy or of a checkpoint to resume from
    _file(src / "rl" / "algo=grpo,seed=1" / "grpo.log", b"l" * 100)
    keep, left = carry.save(src, dest, policies=False, max_mb=60 / 2**20)
    kept = {str(p) for p in keep}
    assert {"bc/bc_policy_hf/model.safetensors", "rl/algo=grpo,seed=1/checkpoints/last.ckpt"} <= kept
    assert "> --max-mb" in {str(p): r for p, r in left}["rl/algo=grpo,seed=1/grpo.log"]
    assert not (dest / "rl" / "algo=sampo,seed=1" / "policy_hf").exists()  # save replaced the carried folder
    assert not dest.with_name("study.partial").exists() and not dest.with_name("study.previous").exists()


def test_a_run_resumed_for_more_iterations_is_not_finished(tmp_path):
    src, dest = tmp_path / "study", tmp_path / "carry"
    done, _ = _study(src)
    (done / ".hydra" / "config.yaml").write_text("rl:\n  iterations: 60\n")  # rl_results.json says 30
    keep, _ = carry.save(src, dest)
    assert "rl/algo=sampo,seed=1/checkpoints/last.ckpt" in {str(p) for p in keep}
    (done / ".hydra" / "config.yaml").write_text("rl:\n  iterations: 30\n")
    keep, _ = carry.save(src, dest)
    assert "rl/algo=sampo,seed=1/checkpoints/last.ckpt" not in {str(p) for p in keep}


def test_save_refuses_to_replace_what_it_did_not_write(tmp_path):
    import pytest

    src = tmp_path / "study"
    _study(src)
    with pytest.raises(carry.CarryError, match="overlap"):
        carry.save(src, src)
    with pytest.raises(carry.CarryError, match="overlap"):
        carry.save(src, src / "rl")
    other = tmp_path / "other_study"  # a live folder typed where the carried copy goes
    _file(other / "rl" / "last.ckpt", b"precious")
    with pytest.raises(carry.CarryError, match="did you mean `restore`"):
        carry.save(src, other)
    assert (other / "rl" / "last.ckpt").read_bytes() == b"precious"


def test_an_interrupted_save_or_restore_loses_nothing(tmp_path, monkeypatch):
    import pytest

    src, dest = tmp_path / "study", tmp_path / "keep" / "study"
    _, going = _study(src)
    carry.save(src, dest)
    first = sorted(p.relative_to(dest) for p in dest.rglob("*"))
    real_copy = carry.shutil.copy2

    def dies_halfway(a, b, *args, **kwargs):  # the machine goes away during the copy of a checkpoint
        if Path(a).name == "last.ckpt":
            Path(b).write_bytes(Path(a).read_bytes()[:3])
            raise OSError("the machine went away")
        return real_copy(a, b, *args, **kwargs)

    monkeypatch.setattr(carry.shutil, "copy2", dies_halfway)
    (going / "checkpoints" / "last.ckpt").write_bytes(b"d" * 50)  # the run went on
    with pytest.raises(OSError):
        carry.save(src, dest)
    assert sorted(p.relative_to(dest) for p in dest.rglob("*")) == first  # the previous copy is whole
    with pytest.raises(carry.CarryError, match="not a complete"):
        carry.restore(dest.with_name("study.partial"), tmp_path / "fresh")
    fresh = tmp_path / "fresh"
    with pytest.raises(OSError):
        carry.restore(dest, fresh)
    assert not list(fresh.rglob("last.ckpt"))  # no truncated checkpoint under its real name
    monkeypatch.setattr(carry.shutil, "copy2", real_copy)
    assert carry.restore(dest, fresh)[0] > 0
    assert (fresh / "rl" / "algo=grpo,seed=1" / "checkpoints" / "last.ckpt").read_bytes() == b"c" * 50
    carry.save(src, dest)  # the interrupted save's leftover is replaced
    assert (dest / "rl" / "algo=grpo,seed=1" / "checkpoints" / "last.ckpt").read_bytes() == b"d" * 50
    assert not dest.with_name("study.partial").exists()


def test_restore_copies_back_and_never_replaces_a_file(tmp_path):
    src, dest = tmp_path / "study", tmp_path / "carry"
    _study(src)
    carry.save(src, dest)
    fresh = tmp_path / "fresh"  # a new machine: nothing under logs/
    assert carry.restore(dest, fresh) == (17, 0, [])
    ckpt = fresh / "rl" / "algo=grpo,seed=1" / "checkpoints" / "last.ckpt"
    assert ckpt.read_bytes() == b"c" * 50
    ckpt.write_bytes(b"newer")  # the run went on here: a second restore leaves its state alone
    assert carry.restore(dest, fresh) == (0, 17, [ckpt.relative_to(fresh)])
    assert ckpt.read_bytes() == b"newer"


def test_the_command_line(tmp_path, capsys):
    src, dest = tmp_path / "study", tmp_path / "carry"
    _study(src)
    assert carry.main(["save", str(src), str(dest)]) == 0
    out = capsys.readouterr().out
    assert "carried 14 files" in out and "finished run: rl_results.json marks it done" in out
    assert carry.main(["restore", str(dest), str(tmp_path / "back")]) == 0
    assert "restored 17 files" in capsys.readouterr().out
    assert carry.main(["save", str(tmp_path / "nope"), str(dest)]) == 2
    # a new machine that rebuilt its own start before restoring: the restore says so
    (tmp_path / "back" / "bc" / "bc_policy_hf" / "model.safetensors").write_bytes(b"v" * 100)
    assert carry.main(["restore", str(dest), str(tmp_path / "back")]) == 0
    out, err = capsys.readouterr()
    assert "1 of them differ" in out and "differs, kept: bc/bc_policy_hf/model.safetensors" in out
    assert "another policy than the carried one in bc/bc_policy_hf" in err
    assert carry.main(["save", str(src), str(tmp_path / "back")]) == 2  # not a carried folder
    assert "did you mean `restore`" in capsys.readouterr().err
