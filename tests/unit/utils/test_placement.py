"""Where a process runs, from the launcher's variables (:mod:`arl.utils.placement`): by hand for
each launcher, and the cases where guessing would put several ranks on one GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from arl.utils.placement import Placement, PlacementError, export_placement, resolve_placement

SRUN = {"SLURM_NTASKS": "16", "SLURM_PROCID": "11", "SLURM_LOCALID": "3", "SLURM_NTASKS_PER_NODE": "8",
        "SLURM_JOB_NAME": "arl", "SLURM_NODEID": "1"}


def test_srun_without_local_rank_places_each_task_on_its_slurm_localid():
    """Lightning's SLURMEnvironment reads SLURM_LOCALID but exports no LOCAL_RANK: vLLM and the HF
    engine used to take cuda:0 on every rank."""
    p = resolve_placement(SRUN, cuda_count=8, group=None)
    assert p == Placement("srun", 11, 3, 16, "cuda:3")
    assert p.device_index == 3


def test_srun_with_one_gpu_bound_per_task_uses_that_gpu():
    assert resolve_placement(SRUN, cuda_count=1).device == "cuda:0"  # --gpus-per-task=1


def test_srun_interactive_job_is_not_a_launch():
    """Lightning's rule: a job named bash/interactive is an salloc shell, not an srun launch."""
    p = resolve_placement({**SRUN, "SLURM_JOB_NAME": "interactive"}, cuda_count=8)
    assert p == Placement("single", 0, 0, 1, "cuda:0")


def test_torchrun_variables_win_over_slurm_ones():
    env = {**SRUN, "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",  # srun: one task a node
           "LOCAL_RANK": "5", "RANK": "13", "WORLD_SIZE": "16", "TORCHELASTIC_RUN_ID": "x", "GROUP_RANK": "1"}
    assert resolve_placement(env, cuda_count=8) == Placement("torchrun", 13, 5, 16, "cuda:5")


def test_lightning_spawner_sets_no_rank_on_the_first_node():
    env = {"LOCAL_RANK": "1", "WORLD_SIZE": "2", "NODE_RANK": "0"}
    assert resolve_placement(env, cuda_count=0) == Placement("lightning", 1, 1, 2, "cpu")
    with pytest.raises(PlacementError, match="RANK is not"):
        resolve_placement({"LOCAL_RANK": "1", "WORLD_SIZE": "4", "NODE_RANK": "1"}, cuda_count=2)


def test_one_process_and_the_refusals_to_guess():
    assert resolve_placement({}, cuda_count=0) == Placement("single", 0, 0, 1, "cpu")
    assert resolve_placement({}, cuda_count=4).device == "cuda:0"
    with pytest.raises(PlacementError, match="WORLD_SIZE=4 but neither"):
        resolve_placement({"WORLD_SIZE": "4"}, cuda_count=4)
    with pytest.raises(PlacementError, match="no launcher variable"):
        resolve_placement({}, cuda_count=4, group=(1, 2))  # a group of 2 ranks, no variable: which GPU?
    with pytest.raises(PlacementError, match="process group says rank 0 of 2"):
        resolve_placement({"LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2"}, cuda_count=2, group=(0, 2))
    with pytest.raises(PlacementError, match="only 2 GPUs"):
        resolve_placement({**SRUN}, cuda_count=2)  # local rank 3 on a node with 2 GPUs
    with pytest.raises(PlacementError, match="not an integer"):
        resolve_placement({"LOCAL_RANK": "a"}, cuda_count=0)


def test_export_writes_the_device_index_as_local_rank(monkeypatch):
    """vLLM's external launcher puts its worker on cuda:$LOCAL_RANK: with one GPU bound to the task
    that is cuda:0 whatever SLURM_LOCALID says."""
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        # setenv, not delenv: delenv(raising=False) of an unset variable records nothing to undo, and
        # the exported rank then leaked into later tests (a DDP subprocess test, seeing LOCAL_RANK=1
        # and WORLD_SIZE=2, waited forever for a rank 0 nobody launched)
        monkeypatch.setenv(key, "0")
    export_placement(Placement("srun", 11, 3, 16, "cuda:0"))
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"]) == ("11", "0", "16")
    export_placement(Placement("lightning", 1, 1, 2, "cpu"))
    assert os.environ["LOCAL_RANK"] == "1"


def test_plan_and_train_refuse_a_launch_that_does_not_say_where_it_runs(tmp_path):
    """The start-up check of src/train.py reports a placement it cannot resolve, in seconds."""
    from arl_testing import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK")}
    env.update(WORLD_SIZE="4", PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "debug=smoke", "dry_run=true",
                           f"paths.log_dir={tmp_path}"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "placement: WORLD_SIZE=4 but neither LOCAL_RANK" in proc.stderr


def test_trainer_processes_counts_devices_and_nodes_by_hand():
    from arl.utils.placement import trainer_processes

    assert trainer_processes({"devices": 2, "num_nodes": 3}) == 6
    assert trainer_processes({"devices": [0, 2], "accelerator": "gpu"}) == 2  # a list of device indices
    assert trainer_processes({"devices": -1, "accelerator": "gpu"}, cuda_count=8) == 8  # every visible GPU
    assert trainer_processes({"devices": "auto", "accelerator": "gpu", "num_nodes": 2}, cuda_count=4) == 8
    assert trainer_processes({"devices": "auto", "accelerator": "cpu"}, cuda_count=8) == 1  # one CPU process
    assert trainer_processes({"devices": -1, "accelerator": "gpu"}, cuda_count=0) == 1
    assert trainer_processes({}) == 1
