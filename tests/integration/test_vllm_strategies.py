"""vLLM rollouts under a multi-process trainer (``make test-vllm``): `rollout=vllm` with
`trainer=ddp` and `trainer=fsdp2_cpu` (2 gloo processes) against one process with the same global
batch. Each rank builds its own engine after the process group exists (vLLM's external launcher,
:func:`arl.rollout.vllm_engine.rank_placement`) and seeds every request by what it is
(:func:`arl.rollout.engine.request_seed`), so the ranks together roll out exactly the episodes one
process would, and the update is the same."""

from __future__ import annotations

import pytest

import scale_helpers as sh

pytestmark = pytest.mark.vllm

# full-batch steps (one mini-batch, two epochs): the update does not depend on how the ranks split
# the batch, and the second epoch makes the trainer score the old log-probs, which the engine's
# are compared with
OVERRIDES = [
    "rollout=vllm", "debug=smoke", "bc.enabled=false", "rl.iterations=2", "rl.val_every=2",
    "rollout.tasks_per_iteration=2", "rollout.group_size=2", "rollout.val_episodes=4", "rollout.max_new_tokens=8",
    "env.max_turns=2", "algo.filter.name=none", "rl.mini_batches=1", "rl.ppo_epochs=2",
]


LANES = {  # name -> overrides
    "cpu": ["trainer=cpu"], "ddp": ["trainer=ddp"], "fsdp2_cpu": ["trainer=fsdp2_cpu"],
    # LoRA: the adapters train, the base is frozen; vLLM loads plain weights, so every sync must merge
    # W + scale B A (arl.distributed.lora_stream). Without the merge the sharded lane rolled out the base
    # model: is/rollout_max_abs_diff 0.98 and 0.74.
    "ddp_lora": ["trainer=ddp", "model.lora.enabled=true"],
    "fsdp2_cpu_lora": ["trainer=fsdp2_cpu", "model.lora.enabled=true"],
    # each episode on its own over vLLM's continuous batching (rollout.schedule=episode), two ranks
    "ddp_episode": ["trainer=ddp", "rollout.schedule=episode"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_path):
    pytest.importorskip("vllm")
    out = {}
    for lane, overrides in LANES.items():
        run_dir, _ = sh.train_run([*overrides, *OVERRIDES], tmp_path_factory.mktemp(lane))
        out[lane] = sh.tb_scalars(run_dir / "tensorboard" / "rl")
    return out


@pytest.mark.parametrize("trainer", ["ddp", "fsdp2_cpu"])
def test_two_ranks_roll_out_and_update_as_one_process(runs, trainer):
    one, two = runs["cpu"], runs[trainer]
    # the global batch: 2 groups x 2 episodes, each rank rolling out one group
    assert [v for _, v in two["rollout/episodes"]] == [v for _, v in one["rollout/episodes"]] == [4.0, 4.0]
    # the same episodes (the ranks' shares add up to the one process's rollout)
    for tag in ("rollout/response_len_mean", "rollout/return_mean", "train/samples"):
        assert two[tag] == one[tag], tag
    for tag in ("actor/pg_loss", "actor/grad_norm"):
        a, b = one[tag][0][1], two[tag][0][1]  # the first update
        print(f"{trainer} {tag}: one process {a:.8g}, two ranks {b:.8g}")
        assert abs(a - b) <= 1e-4 * max(abs(a), 1e-8), tag


def test_two_ranks_per_episode_roll_out_what_one_process_does_in_lockstep(runs):
    """The per-episode schedule changes when requests run, not what they sample: two DDP ranks
    rolling out each episode on its own give the one lockstep process's episodes and update."""
    one, two = runs["cpu"], runs["ddp_episode"]
    for tag in ("rollout/episodes", "rollout/response_len_mean", "rollout/return_mean", "train/samples"):
        assert two[tag] == one[tag], tag
    for tag in ("actor/pg_loss", "actor/grad_norm"):
        a, b = one[tag][0][1], two[tag][0][1]
        assert abs(a - b) <= 1e-4 * max(abs(a), 1e-8), tag


@pytest.mark.parametrize("lane", list(LANES))
def test_engine_log_probs_after_each_sync_are_the_trainers(runs, lane):
    """Iteration 1 samples with the weights the engine was built with; iteration 2 with the ones the
    weight sync loaded after the first update (streamed tensor by tensor under FSDP2; LoRA layers
    merged on the way)."""
    gap = runs[lane]["is/rollout_max_abs_diff"]
    print(f"{lane}: max |engine - trainer| log-prob per iteration {gap}")
    assert [s for s, _ in gap] == [1, 2]
    assert all(v <= 1e-5 for _, v in gap)


def test_lora_lanes_train_the_adapters(runs):
    """The LoRA runs did update (a zero-update run would pass the sync check trivially)."""
    for lane in ("ddp_lora", "fsdp2_cpu_lora"):
        assert runs[lane]["actor/grad_norm"][0][1] > 0, lane
        assert runs[lane]["train/optimizer_steps"][-1][1] >= 2, lane


# --- the engine before the first Trainer: behaviour cloning's untrained validation, 2 ranks ---------
BC_OVERRIDES = [
    "rollout=vllm", "trainer=ddp", "debug=smoke", "bc.enabled=true", "bc.val_untrained=true", "bc.episodes=4",
    "bc.epochs=1", "bc.batch_size=2", "rl.iterations=1", "rl.val_every=1", "rollout.tasks_per_iteration=2",
    "rollout.group_size=2", "rollout.val_episodes=2", "rollout.max_new_tokens=8", "env.max_turns=2",
    "algo.filter.name=none", "task_name=early",
]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bc_run_ok(procs, run_dir):
    import json

    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out[-2000:] + err[-4000:]
    results = json.loads((run_dir / "rl_results.json").read_text())
    assert 0.0 <= results["bc/val_success_untrained"] <= 1.0
    gap = sh.tb_scalars(run_dir / "tensorboard" / "rl")["is/rollout_max_abs_diff"]
    assert all(v <= 1e-5 for _, v in gap), gap
    return outs


@pytest.mark.parametrize("trainer", ["ddp", "fsdp2_cpu"])
def test_untrained_validation_under_torchrun_builds_vllm_inside_the_group(tmp_path, tiny_path, trainer):
    """bc.val_untrained needs the engine before any Trainer: the placement starts the process group
    from torchrun's variables, vLLM joins it, Lightning keeps it. (It crashed with "Mesh should not
    be bigger than default world size 1" when vLLM made a one-rank group of its own.)

    Under FSDP2 rank 0 alone loads the weights (``trainer.sharding.load: auto``): rank 1's engine
    gets them by broadcast before the untrained validation, the BC policy is gathered onto rank 0
    and broadcast again into the engines and the RL shards, and the export is rank 0's gather;
    the engine's log-probs matching the trainer's (``_bc_run_ok``) shows every rank sampled with
    the trained weights."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("vllm")
    torchrun = Path(sys.executable).with_name("torchrun")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", str(sh.ROOT / "src" / "train.py"),
         *[o if o != "trainer=ddp" else f"trainer={trainer}" for o in BC_OVERRIDES], f"hydra.run.dir={run_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sh.subprocess_env(),
    )
    ((out, _),) = _bc_run_ok([proc], run_dir)
    assert ("rank 0 loads it" in out) == (trainer == "fsdp2_cpu")
    assert (run_dir / "policy_hf" / "model.safetensors").is_file() and (run_dir / "bc_policy_hf" / "model.safetensors").is_file()


def test_untrained_validation_under_an_emulated_srun(tmp_path, tiny_path):
    """Two tasks started as srun starts them: SLURM_PROCID / SLURM_LOCALID / SLURM_NTASKS set, no
    LOCAL_RANK. Lightning takes the ranks from SLURM; arl.distributed.placement gives vLLM the same
    (its external launcher reads RANK and LOCAL_RANK, which srun does not set)."""
    import subprocess
    import sys

    pytest.importorskip("vllm")
    run_dir, port = tmp_path / "run", _free_port()
    procs = []
    for task in (0, 1):
        env = {k: v for k, v in sh.subprocess_env().items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
        env.update(SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2", SLURM_PROCID=str(task), SLURM_LOCALID=str(task),
                   SLURM_NODEID="0", SLURM_NNODES="1", SLURM_JOB_NAME="arl", SLURM_JOB_ID="4242",
                   SLURM_NODELIST="localhost", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, str(sh.ROOT / "src" / "train.py"), *BC_OVERRIDES, f"hydra.run.dir={run_dir}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        ))
    _bc_run_ok(procs, run_dir)


def test_untrained_validation_is_refused_under_lightnings_spawner(tmp_path, tiny_path):
    """`python src/train.py` with 2 devices: rank 0 would build the engine before Lightning launches
    rank 1; refused at start-up with the alternative."""
    import subprocess
    import sys

    pytest.importorskip("vllm")
    proc = subprocess.run(
        [sys.executable, str(sh.ROOT / "src" / "train.py"), *BC_OVERRIDES, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True, text=True, env=sh.subprocess_env(), timeout=300,
    )
    assert proc.returncode == 2
    assert "bc.val_untrained=true with rollout=vllm on 2 processes" in proc.stderr
    assert "torchrun --nproc_per_node=2" in proc.stderr
