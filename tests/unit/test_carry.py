"""scripts/carry.py: what a study carries to the next machine through git, and back."""

from __future__ import annotations

import importlib.util
import json

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
        kept | {f"rl/algo={a},seed=1/best_checkpoint.txt" for a in ("sampo", "grpo", "gspo")})
    # --policies keeps the final policy; --max-mb leaves out what is too large for a commit
    keep, _ = carry.save(src, dest, policies=True)
    assert "rl/algo=sampo,seed=1/policy_hf/model.safetensors" in {str(p) for p in keep}
    keep, left = carry.save(src, dest, max_mb=60 / 2**20)
    assert "bc/bc_policy_hf/model.safetensors" not in {str(p) for p in keep}
    assert "> --max-mb" in dict((str(p), r) for p, r in left)["bc/bc_policy_hf/model.safetensors"]
    assert not (dest / "bc" / "bc_policy_hf").exists()  # save replaces the carried folder


def test_restore_copies_back_and_never_replaces_a_file(tmp_path):
    src, dest = tmp_path / "study", tmp_path / "carry"
    _, going = _study(src)
    carry.save(src, dest)
    fresh = tmp_path / "fresh"  # a new machine: nothing under logs/
    assert carry.restore(dest, fresh) == (17, 0)
    ckpt = fresh / "rl" / "algo=grpo,seed=1" / "checkpoints" / "last.ckpt"
    assert ckpt.read_bytes() == b"c" * 50
    ckpt.write_bytes(b"newer")  # the run went on here: a second restore leaves its state alone
    assert carry.restore(dest, fresh) == (0, 17)
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
