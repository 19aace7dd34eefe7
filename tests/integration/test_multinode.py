"""Two "nodes" on this machine: ``torchrun --nnodes 2 --nproc-per-node 1`` twice, rendezvous on
127.0.0.1, one CPU process each (gloo), ``trainer=ddp trainer.num_nodes=2 trainer.devices=1``:
the multi-node launch of docs/training.md, for two iterations. Lightning reads the ranks from
torchrun's variables; each node rolls out its share of the groups and rank 0 writes the run."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

import scale_helpers as sh
from arl_testing import ROOT

OVERRIDES = [
    "trainer=ddp", "trainer.num_nodes=2", "trainer.devices=1", "debug=smoke", "bc.enabled=false", "rl.iterations=2",
    "rl.val_every=2", "rollout.tasks_per_iteration=2", "rollout.group_size=2", "rollout.val_episodes=4",
    "rollout.max_new_tokens=8", "env.max_turns=2", "algo.filter.name=none", "task_name=nodes",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.long  # over half a minute of a worker: make test-long, run by CI after make test
def test_two_nodes_on_localhost_train_two_iterations(tmp_path, tiny_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    port, run_dir = _free_port(), tmp_path / "run"
    torchrun = Path(sys.executable).with_name("torchrun")
    procs = [
        subprocess.Popen(
            [str(torchrun), "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node), "--master-addr", "127.0.0.1",
             "--master-port", str(port), str(ROOT / "src" / "train.py"), *OVERRIDES, f"hydra.run.dir={run_dir}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sh.subprocess_env(),
        )
        for node in (0, 1)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for node, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"node {node}:\n{out[-2000:]}\n{err[-4000:]}"
    acc = EventAccumulator(str(run_dir / "tensorboard" / "rl"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("actor/pg_loss")] == [1, 2]
    assert [e.value for e in acc.Scalars("rollout/episodes")] == [4.0, 4.0]  # 2 groups x 2 episodes over both nodes
    assert acc.Scalars("train/optimizer_steps")[-1].value >= 1
    assert (run_dir / "policy_hf" / "config.json").exists() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert sum(o.count("ARL run summary") for o, _ in outs) == 1  # the global rank 0 alone reports
