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
    "rollout.groups_per_step=2", "rollout.group_size=2", "rollout.val_episodes=4", "rollout.max_new_tokens=8",
    "env.max_turns=2", "algo.filter.name=none", "rl.mini_batches=1", "rl.ppo_epochs=2",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_path):
    pytest.importorskip("vllm")
    out = {}
    for trainer in ("cpu", "ddp", "fsdp2_cpu"):
        run_dir, _ = sh.train_run([f"trainer={trainer}", *OVERRIDES], tmp_path_factory.mktemp(trainer))
        out[trainer] = sh.tb_scalars(run_dir / "tensorboard" / "rl")
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


@pytest.mark.parametrize("trainer", ["cpu", "ddp", "fsdp2_cpu"])
def test_engine_log_probs_after_each_sync_are_the_trainers(runs, trainer):
    """Iteration 1 samples with the weights the engine was built with; iteration 2 with the ones the
    weight sync loaded after the first update (streamed tensor by tensor under FSDP2)."""
    gap = runs[trainer]["is/rollout_max_abs_diff"]
    print(f"{trainer}: max |engine - trainer| log-prob per iteration {gap}")
    assert [s for s, _ in gap] == [1, 2]
    assert all(v <= 1e-5 for _, v in gap)
