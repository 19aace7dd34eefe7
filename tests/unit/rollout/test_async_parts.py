"""Pure parts of asynchronous RL's learner side: which queued batches a resumed run may still train, the
rollout process's own random stream at k > 0, and named semaphores unlinked once both processes hold them."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from arl.distributed.ranks import capture_rng, restore_rng
from arl.run.async_rollout import admitted_queue, fork_stream, unlink_semaphores


@pytest.mark.parametrize("oldest, first, k, kept", [
    ([3, 3, 4], 4, 2, 3),  # ages 1, 2, 2: all admitted
    ([3, 3, 4], 4, 1, 1),  # resumed with k=1: batch 1 would train a turn 2 old, so it and the rest play again
    ([3, 3, 4], 4, 0, 0),
    ([None, 2], 4, 2, 1),  # a batch without turns is always admitted
    ([], 4, 0, 0),
])
def test_a_resumed_queue_keeps_the_batches_the_bound_admits(oldest, first, k, kept):
    assert admitted_queue(oldest, first, k) == kept


def test_the_rollout_process_forks_a_stream_the_learner_does_not_repeat():
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    states = capture_rng()
    learner = (torch.rand(4), random.random(), np.random.rand())
    restore_rng(states)
    fork_stream(states)
    rollout = (torch.rand(4), random.random(), np.random.rand())
    restore_rng(states)
    fork_stream(states)
    again = (torch.rand(4), random.random(), np.random.rand())
    assert not torch.equal(learner[0], rollout[0]) and learner[1:] != rollout[1:]  # not the learner's numbers
    assert torch.equal(rollout[0], again[0]) and rollout[1:] == again[1:]  # fixed by the learner's states


def _hold(queue, event):
    queue.put("started")
    event.wait(timeout=60)
    queue.put("held")


def test_named_semaphores_are_unlinked_once_the_child_holds_them():
    """The queue and event keep working across processes after their names are gone from /dev/shm."""
    ctx = torch.multiprocessing.get_context("spawn")
    queue, event = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_hold, args=(queue, event), daemon=True)
    child.start()
    try:
        assert queue.get(timeout=60) == "started"  # its arguments are unpickled: it holds the semaphores
        names = unlink_semaphores(queue, event)
        assert len(names) >= 4  # the queue's read lock, write lock and count; the event's flag and condition
        assert not any(os.path.exists("/dev/shm/sem." + name.lstrip("/")) for name in names)
        event.set()
        assert queue.get(timeout=60) == "held"  # the child still signals through both
        child.join(timeout=30)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
