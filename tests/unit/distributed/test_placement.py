"""Where a process runs, from the launcher's variables (:mod:`arl.distributed.placement`): by hand for
each launcher, and the cases where guessing would put several ranks on one GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from arl.distributed.placement import Placement, PlacementError, export_placement, resolve_placement

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
    from arl.distributed.placement import trainer_processes

    assert trainer_processes({"devices": 2, "num_nodes": 3}) == 6
    assert trainer_processes({"devices": [0, 2], "accelerator": "gpu"}) == 2  # a list of device indices
    assert trainer_processes({"devices": -1, "accelerator": "gpu"}, cuda_count=8) == 8  # every visible GPU
    assert trainer_processes({"devices": "auto", "accelerator": "gpu", "num_nodes": 2}, cuda_count=4) == 8
    assert trainer_processes({"devices": "auto", "accelerator": "cpu"}, cuda_count=8) == 1  # one CPU process
    assert trainer_processes({"devices": -1, "accelerator": "gpu"}, cuda_count=0) == 1
    assert trainer_processes({}) == 1


# --------------------------------------------------------------------------- one run folder


def test_the_run_folder_is_named_by_an_id_every_rank_reads_alike():
    from arl.distributed.placement import run_stamp, shared_run_id

    srun = {**SRUN, "SLURM_JOB_ID": "4711", "SLURM_STEP_ID": "0"}
    assert shared_run_id(srun) == run_stamp(srun) == "slurm-4711.0"
    torchrun = {"LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "8c1f"}
    assert run_stamp(torchrun) == "torchrun-8c1f"
    # no shared id: one process, torchrun without a rendezvous id, an srun job without its id
    for env in ({}, {**torchrun, "TORCHELASTIC_RUN_ID": "none"}, {**SRUN}, {"SLURM_JOB_ID": "4711"}):
        assert shared_run_id(env) is None
        stamp = run_stamp(env)
        assert len(stamp) == 19 and stamp[4] == "-" and stamp[10] == "_", stamp  # %Y-%m-%d_%H-%M-%S


def test_ranks_that_could_name_different_folders_are_refused():
    from arl.distributed.placement import run_folder_problem

    torchrun = {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none", "GROUP_RANK": "0"}
    p = resolve_placement(torchrun, cuda_count=2)
    stamped = "logs/train/runs/2026-12-05_02-30-59"
    problem = run_folder_problem(stamped, p, torchrun)
    assert problem and "hydra.run.dir=" in problem and "--rdzv-id" in problem
    assert run_folder_problem("logs/train/runs/exp1", p, torchrun) is None  # named by the user
    assert run_folder_problem(stamped, p, {**torchrun, "TORCHELASTIC_RUN_ID": "abc"}) is None  # a shared id
    lightning = {"LOCAL_RANK": "1", "WORLD_SIZE": "2", "NODE_RANK": "0"}  # its spawner passes its folder on
    assert run_folder_problem(stamped, resolve_placement(lightning, cuda_count=0), lightning) is None
    assert run_folder_problem(stamped, resolve_placement({}, cuda_count=0), {}) is None
    srun = {**SRUN}
    assert "SLURM_JOB_ID" in run_folder_problem(stamped, resolve_placement(srun, cuda_count=8), srun)


def test_train_refuses_a_torchrun_launch_without_a_shared_run_folder(tmp_path):
    """src/train.py as torchrun would start rank 0 of 2 without --rdzv-id: exit 2 naming hydra.run.dir."""
    from arl_testing import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    env.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="2", GROUP_RANK="0", TORCHELASTIC_RUN_ID="none",
               PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "debug=smoke", "dry_run=true",
                           "trainer=ddp", f"paths.log_dir={tmp_path}"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "config error: hydra.run.dir: 2 processes started by torchrun" in proc.stderr


def test_a_listed_trainer_device_is_the_ranks_device():
    """trainer.devices=[4,5,6,7]: local rank i runs on device 4+i, as Lightning places it, so the
    rollout engines share the trainer's GPU (they took cuda:<local rank> before)."""
    from arl.distributed.placement import export_trainer_devices

    env = {"LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "x"}
    export_trainer_devices({"devices": [4, 5, 6, 7]}, env)
    assert env["ARL_TRAINER_DEVICES"] == "4,5,6,7"
    assert resolve_placement(env, cuda_count=8) == Placement("torchrun", 1, 1, 4, "cuda:5")
    assert resolve_placement({"ARL_TRAINER_DEVICES": "3"}, cuda_count=8).device == "cuda:3"  # one process
    assert resolve_placement(env, cuda_count=0).device == "cpu"
    with pytest.raises(PlacementError, match="no listed device"):
        resolve_placement({**env, "ARL_TRAINER_DEVICES": "4"}, cuda_count=8)  # rank 1 of a one-device list
    with pytest.raises(PlacementError, match="no listed device"):
        resolve_placement(env, cuda_count=4)  # device 5 is not visible
    export_trainer_devices({"devices": "auto"}, env)
    assert "ARL_TRAINER_DEVICES" not in env
