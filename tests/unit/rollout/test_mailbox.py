"""The weight mailbox between the learner and the rollout process (asynchronous RL).

- what a reader loads is exactly what was published, version included;
- a publish that comes round to the slot being read makes the reader load again (no torn state kept);
- the learner never waits for the reader: a reader SIGKILLed inside a load leaves publishing as fast as before;
- two shared-memory descriptors whatever the number of tensors: a 300-tensor model under ``ulimit -n 256``;
- the rollout process's policy built from a skeleton and the mailbox computes what the learner's does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from arl.rollout.mailbox import WeightMailbox, materialize, skeleton

CTX = torch.multiprocessing.get_context("spawn")


def _model(n_layers: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(n_layers)])


def _shifted(model: torch.nn.Module, by: float) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(by)
    return model


def test_a_reader_loads_exactly_what_was_published():
    learner = _model()
    box = WeightMailbox.of(learner, CTX)
    reader = _shifted(_model(), 5.0)
    assert box.load_into(lambda items: reader.load_state_dict(dict(items))) == -1  # the weights it was made with
    assert all(torch.equal(a, b) for a, b in zip(learner.state_dict().values(), reader.state_dict().values()))
    _shifted(learner, 0.25)
    box.publish(learner, 3)
    assert box.version == 3
    assert box.load_into(lambda items: reader.load_state_dict(dict(items))) == 3
    assert all(torch.equal(a, b) for a, b in zip(learner.state_dict().values(), reader.state_dict().values()))


def test_a_slot_rewritten_during_a_load_is_loaded_again():
    """The learner publishes twice while the reader copies slot 1: the second publish rewrites that very slot,
    its sequence number moves, and the reader loads again, ending on the newest version whole."""
    learner = _model()
    box = WeightMailbox.of(learner, CTX)
    box.publish(_shifted(learner, 1.0), 1)  # into slot 1, the reader's next
    reader = _model()
    calls = []

    def load(items):
        calls.append(box.version)
        reader.load_state_dict(dict(items))
        if len(calls) == 1:  # mid-load: two publishes, the second into the slot being read
            box.publish(_shifted(learner, 1.0), 2)
            box.publish(_shifted(learner, 1.0), 3)

    assert box.load_into(load) == 3
    assert calls == [1, 3]
    assert all(torch.equal(a, b) for a, b in zip(learner.state_dict().values(), reader.state_dict().values()))


def _load_forever(box: WeightMailbox, loading) -> None:
    """A rollout process's load that never ends (killed inside it)."""

    def load(items):
        for _, tensor in items:
            tensor.sum()
        loading.set()
        time.sleep(600)

    box.load_into(load)


def test_a_reader_killed_inside_a_load_does_not_block_the_learner():
    learner = _model()
    box = WeightMailbox.of(learner, CTX)
    box.publish(learner, 0)
    loading = CTX.Event()
    reader = CTX.Process(target=_load_forever, args=(box, loading), daemon=True)
    reader.start()
    try:
        assert loading.wait(timeout=120), "the reader never started its load"
        os.kill(reader.pid, signal.SIGKILL)
        reader.join(timeout=10)
        publishing = threading.Thread(target=lambda: [box.publish(_shifted(learner, 0.5), v) for v in range(1, 21)],
                                      daemon=True)
        publishing.start()
        publishing.join(timeout=120)  # a lock the dead reader held would keep it waiting for ever
        assert not publishing.is_alive() and box.version == 20
    finally:
        if reader.is_alive():
            reader.kill()


MANY_TENSORS = """
import resource, sys, torch
from arl.rollout.mailbox import WeightMailbox, materialize, skeleton
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
ctx = torch.multiprocessing.get_context("spawn")

def read(structure, extra, box, out):
    model = materialize(structure, extra, box)
    out.put(float(sum(p.double().sum() for p in model.parameters())))

if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(150)])  # 300 tensors
    assert len(model.state_dict()) == 300
    box = WeightMailbox.of(model, ctx)
    out = ctx.Queue()
    structure, extra = skeleton(model)
    reader = ctx.Process(target=read, args=(structure, extra, box, out))
    reader.start()
    got = out.get(timeout=120)
    reader.join(timeout=30)
    want = float(sum(p.double().sum() for p in model.parameters()))
    assert reader.exitcode == 0 and abs(got - want) < 1e-9, (reader.exitcode, got, want)
    print("ok")
"""


def test_a_300_tensor_policy_crosses_to_the_rollout_process_under_ulimit_256(tmp_path):
    script = tmp_path / "many_tensors.py"
    script.write_text(MANY_TENSORS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_the_skeleton_holds_no_weights_and_materializes_to_the_same_policy(tiny):
    model, tok = tiny
    structure, extra = skeleton(model)
    assert all(p.is_meta for p in structure.parameters())
    assert len(__import__("pickle").dumps(structure)) < 1_000_000  # a structure, not the weights
    box = WeightMailbox.of(model, CTX)
    rebuilt = materialize(structure, extra, box)
    ids = torch.tensor([tok.encode("go north then take the key")])
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(ids).logits, model(ids).logits, rtol=0, atol=0)
    tied = getattr(model.config, "tie_word_embeddings", False)
    assert (rebuilt.get_output_embeddings().weight is rebuilt.get_input_embeddings().weight) == bool(tied)


class _Counting:
    """An engine that counts its calls (the versioned wrapper's collaborator, not what is tested)."""

    max_batch_size = 4

    def __init__(self):
        self.calls = 0

    def load_weights(self, items):
        for _ in items:
            pass

    def generate(self, prompts, params, seeds=None):
        self.calls += 1
        return []


def test_a_stopped_rollout_process_ends_at_its_next_engine_call():
    """The learner's stop reaches an iteration in progress: the next engine call raises instead of playing on
    (the rollout process then closes its loop and env workers and exits), and beats the heartbeat while it runs."""
    from arl.rollout.mailbox import RolloutStopped, VersionedEngine

    box = WeightMailbox.of(_model(), CTX)
    stop = CTX.Event()
    engine = _Counting()
    versioned = VersionedEngine(engine, box, stop.is_set)
    assert box.silent_s is None
    versioned.generate([[1]], None)
    assert engine.calls == 1 and box.silent_s is not None and box.silent_s < 5
    stop.set()
    with pytest.raises(RolloutStopped):
        versioned.generate([[1]], None)
    assert engine.calls == 1
