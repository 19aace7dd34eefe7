"""Asynchronous RL (``rl.max_staleness``): rollouts in their own process, beside the learner.

The synchronous loop alternates: the engine idles while the learner updates, the learner idles
while the episodes play. With ``rl.max_staleness=k`` the episodes play in a *rollout process* that
never stops, and the learner trains on the batches it hands over:

- **the rollout process** (:func:`rollout_process`) builds its own engine, agent loop and
  DataModule from the run's settings around the policy (its structure pickled, its weights read from the
  mailbox: no second copy of them travels), and rolls out iteration after
  iteration exactly as the synchronous DataModule does (DAPO's re-rollout rounds included). Before
  every engine call it takes the newest weights the learner published
  (:class:`~arl.rollout.mailbox.VersionedEngine`), so an episode's later turns may come from newer
  weights; every turn records the version that sampled it (``Turn.policy_version``);
- **admission** keeps the staleness bounded: iteration ``i`` starts only once version ``i - k`` is
  published (version ``v``: the weights after ``v`` updates). Weights only get newer during a
  rollout, so every token the learner trains on in update ``i`` comes from a version ``>= i - k``:
  no sample is more than ``k`` updates older than the learner. :meth:`AsyncRollouts.next_batch`
  checks it on the recorded versions and stops the run if it ever fails;
- **the learner** takes the batches in order (:class:`AsyncRollouts`, the DataModule's batch source)
  and publishes its weights after every update (:class:`~arl.callbacks.WeightPush`).

``max_staleness=0`` is the synchronous loop in two processes: rollout ``i`` waits for the weights
after update ``i - 1``, and the two processes hand the random states over with the batches and the
weights, so they consume one random stream in the synchronous order: the same episodes token for
token and the same weights to float rounding (a max difference of about 1e-7 after four updates on
the CPU; the tests bound it at 1e-6: not bit for bit), also after a kill and resume, and with
validations in between (a validation moves no random stream). Runs with ``k > 0``
depend on timing (which turn the newer weights arrive at), as every asynchronous trainer's do; their
rollout process starts from the learner's random states and then keeps its own stream.

**Resume.** A checkpoint is written after an update; it holds the batches the rollout process had
finished and the learner had not trained yet, with their versions (:meth:`AsyncRollouts.state_dict`,
in the DataModule's state). A resumed run trains those first, exactly as they were played, and its
new rollout process starts after them, from the random states the last of them left. At ``k = 0``
a batch is queued at a checkpoint only when a validation came between (the rollout process played the
next batch meanwhile); either way the run continues exactly (a test kills it right after a validation).
At ``k > 0`` the batch that was being played when the kill came is played again from the same random
states, starting on the checkpoint's weights and taking whatever newer weights the resumed learner
publishes meanwhile: which turn newer weights reach depended on timing before and does again.

Validation stays in the learner process, on its own engine (the transformers engine shares the
policy module, so it costs no copy). What is not offered yet, each stopped at start-up
(:mod:`arl.run.checks`): the per-episode schedule (a refresh would fall inside a turn) and several
ranks. Both engines work: the rollout process loads the published weights with the engine's
``load_weights`` (the transformers engine copies them into its module, vLLM reloads them); at staleness 0
the vLLM run equals the synchronous vLLM run too (``make test-vllm``).
"""

from __future__ import annotations

import ctypes
import io
import os
import queue
import signal
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from arl.datamodules.batches import RolloutBatch
from arl.distributed.ranks import capture_rng, restore_rng
from arl.distributed.threads import configure_threads
from arl.rollout.mailbox import VersionedEngine, WeightMailbox, materialize, skeleton
from arl.run.builders import build_agent_loop, build_engine, build_rollout_datamodule
from arl.run.settings import RunSettings

POLL_SECONDS = 1.0  # how often a learner waiting for a batch looks whether the rollout process is alive


@dataclass
class RolloutSpec:
    """What the rollout process is built from (pickled into it): the run's settings, the policy's skeleton
    (its weights come from the mailbox) and its tokenizer, the padding id. The iteration it starts at and its random states come
    with the first weights (:meth:`AsyncRollouts.publish`)."""

    run: RunSettings
    model: Any  # the policy's skeleton (arl.rollout.mailbox.skeleton): its structure, no weights
    extra: dict  # its non-persistent buffers
    tokenizer: Any
    pad_id: int


def _die_with_the_learner() -> Callable[[], bool]:
    """Make this process end when the learner does (Linux: the kernel kills it, ``PR_SET_PDEATHSIG``;
    elsewhere the returned check, polled between engine calls, sees that its parent changed): a learner
    killed mid-run (SIGKILL, out of memory) must not leave a rollout process holding its output pipes."""
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the learner died before the call above took effect
        os._exit(1)
    return lambda: os.getppid() != parent


def rollout_process(spec: RolloutSpec, mailbox: WeightMailbox, batches, stop_event) -> None:
    """The rollout process's main: iterations ``start_iteration`` .. ``rl.iterations - 1``, each admitted
    once the learner's version is recent enough, put on ``batches`` as ``("batch", bytes of (RolloutBatch,
    rng_after, timing))``; ``("done",)`` at the end, ``("error", traceback)`` on a failure."""
    orphaned = _die_with_the_learner()

    def stop() -> bool:
        return stop_event.is_set() or orphaned()

    loop = None
    try:
        run = spec.run
        configure_threads(run.config.get("threads", "auto"))  # registered: the cores are shared with the learner
        torch.set_grad_enabled(False)
        k = int(run.rl.max_staleness)
        chained = k == 0
        model = materialize(spec.model, spec.extra, mailbox)
        engine = VersionedEngine(build_engine(run.rollout, model, spec.tokenizer), mailbox)
        loop = build_agent_loop(run.env, run.rollout, engine, spec.tokenizer)
        dm = build_rollout_datamodule(run, loop, spec.pad_id)
        first = mailbox.first_message(stop)  # the iteration to start at and the random states to start from
        if first is None:
            return
        dm.iteration, states = first
        restore_rng(states)
        while dm.iteration < run.rl.iterations and not stop():
            it = dm.iteration
            waited = mailbox.wait_for(max(0, it - k), stop)  # admission
            if chained and it != first[0]:  # continue the learner's random stream, as the synchronous loop would
                states = mailbox.rng_for(it, stop)
                if states is None:
                    break
                restore_rng(states)
            if stop():
                break
            t0 = time.perf_counter()
            batch = dm.next_train_batch()
            busy = time.perf_counter() - t0
            payload = (batch, capture_rng(), {"wait_s": waited, "busy_s": busy, "chained": chained})
            batches.put(("batch", _to_bytes(payload)))
        batches.put(("done",))
    except BaseException:  # noqa: BLE001 - sent to the learner, which raises it with this traceback
        batches.put(("error", traceback.format_exc()))
    finally:
        if loop is not None:
            loop.close()


def _to_bytes(payload: Any) -> bytes:
    """A message as plain bytes: tensors copied, not shared by file descriptor (the rollout process may
    be gone, or have freed them, by the time the learner reads it)."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def _from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)  # our own process's message


class AsyncRollouts:
    """The learner's side: starts the rollout process, publishes the weights, hands the batches over.

    A checkpoint holds the batches the rollout process had finished and the learner had not trained
    (:meth:`state_dict`): a resumed run trains them first, exactly as they were played (their versions
    included), and its rollout process starts after them from the random states the last one left.

    Args:
        run: the run's settings (``rl.max_staleness`` set).
        model: the policy (copied for the rollout process; the mailbox is shaped after it).
        tokenizer: the policy's tokenizer.
        pad_id: the padding id of the collated batches.
    """

    def __init__(self, run: RunSettings, model, tokenizer, pad_id: int):
        self.max_staleness = int(run.rl.max_staleness)
        self.chained = self.max_staleness == 0
        ctx = torch.multiprocessing.get_context("spawn")
        self.mailbox = WeightMailbox.of(model, ctx)
        self.batches = ctx.Queue()
        self.stop = ctx.Event()
        structure, extra = skeleton(model)  # no second copy of the weights: the mailbox holds them
        spec = RolloutSpec(run, structure, extra, tokenizer, pad_id)
        # not daemonic: it starts env worker processes of its own (rollout.n_workers), which a daemonic process may
        # not; it ends with the learner all the same (PR_SET_PDEATHSIG, and close() at exit)
        self.process = ctx.Process(target=rollout_process, args=(spec, self.mailbox, self.batches, self.stop),
                                   name="arl-rollout", daemon=False)
        self.process.start()
        self._finalizer = weakref.finalize(self, _stop_process, self.process, self.stop)
        self.published = -1
        self._last_taken: float | None = None
        self.received: deque[bytes] = deque()  # batches taken off the pipe, not yet trained (in order)

    def publish(self, model, version: int) -> None:
        """Hand the learner's weights after ``version`` updates to the rollout process. The first time also
        where it starts: the iteration after the batches already received (a resumed run's queue), from the
        random states the last of them left, else from the learner's. At staleness 0, the learner's random
        states with every version."""
        if self.published < 0:
            start = int(version) + len(self.received)
            states = _from_bytes(self.received[-1])[1] if self.received else capture_rng()
            self.mailbox.start_at(start, states)
        rng = capture_rng() if self.chained and self.published >= 0 else None
        self.mailbox.publish(model, version, rng)
        self.published = int(version)

    def state_dict(self) -> dict[str, Any]:
        """The batches played and not yet trained, in order (what the pipe holds is taken off it first)."""
        while True:
            try:
                message = self.batches.get_nowait()
            except queue.Empty:
                break
            if message[0] != "batch":
                self.batches.put(message)  # a failure or the end: for the next batch request to meet
                break
            self.received.append(message[1])
        return {"queued": list(self.received)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A resumed run's queue: trained first, before anything the new rollout process plays."""
        self.received = deque(state.get("queued", []))

    def next_batch(self, iteration: int) -> RolloutBatch:
        """The batch of ``iteration`` (the learner has made ``iteration`` updates): waits for it, checks
        the staleness bound on its recorded versions, adds the asynchronous metrics. At staleness 0
        the learner continues the rollout process's random stream."""
        t0 = time.perf_counter()
        data = self.received.popleft() if self.received else self._receive()[1]
        wait = time.perf_counter() - t0
        batch, rng_after, timing = _from_bytes(data)
        if batch.iteration != iteration:
            raise RuntimeError(f"the rollout process sent iteration {batch.iteration}, the learner is at {iteration}")
        if timing.get("chained"):
            restore_rng(rng_after)
        versions = batch.turns["policy_version"]
        staleness = (iteration - versions).to(torch.float64) if versions.numel() else torch.zeros(0)
        if versions.numel() and float(staleness.max()) > self.max_staleness:
            raise RuntimeError(
                f"iteration {iteration} holds a turn of policy version {int(versions.min())}: "
                f"{int(staleness.max())} updates old, over rl.max_staleness={self.max_staleness}"
            )
        m = batch.metrics
        now = time.perf_counter()
        m.max("async/queue_wait_s", wait)
        if self._last_taken is not None:  # the share of the learner's time since the last batch spent waiting
            m.max("async/learner_idle_share", wait / max(now - self._last_taken, 1e-9))
        m.max("async/engine_idle_share", timing["wait_s"] / max(timing["wait_s"] + timing["busy_s"], 1e-9))
        if versions.numel():
            m.mean("async/staleness_mean", float(staleness.mean()), versions.numel())
            m.max("async/staleness_max", float(staleness.max()))
            rows = batch.tokens["turn_row"]
            response = rows >= 0  # each response token's age: the learner's version minus its turn's
            if bool(response.any()):
                age = staleness.index_select(0, rows[response])
                m.mean("async/version_age_token_mean", float(age.mean()), int(response.sum()))
        self._last_taken = now
        return batch

    def _receive(self) -> tuple:
        while True:
            try:
                message = self.batches.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(f"the rollout process died (exit code {self.process.exitcode})") from None
                continue
            if message[0] == "batch":
                return message
            if message[0] == "error":
                raise RuntimeError(f"the rollout process failed:\n{message[1]}")
            raise RuntimeError("the rollout process finished before the learner asked for its last batch")

    def close(self) -> None:
        """Stop the rollout process (it finishes its engine call and exits; killed after a grace)."""
        self.stop.set()
        deadline = time.time() + 30.0
        while self.process.is_alive() and time.time() < deadline:
            try:  # drain, so that a process blocked on a full pipe can exit
                self.batches.get(timeout=0.1)
            except queue.Empty:
                pass
        self._finalizer()


def _stop_process(process, stop) -> None:
    """Stop the rollout process now (also at interpreter exit, when no one called ``close``: a non-daemonic
    child would otherwise be waited for); killed if it does not end at once."""
    stop.set()
    process.join(timeout=2.0)
    if process.is_alive():
        process.kill()
        process.join(timeout=5.0)
