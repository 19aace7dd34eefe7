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
import logging
import os
import queue
import random
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import util
from multiprocessing.synchronize import SemLock
from typing import Any

import numpy as np
import torch

from arl.datamodules.batches import RolloutBatch
from arl.distributed.ranks import capture_rng, restore_rng
from arl.distributed.threads import configure_threads
from arl.rollout.mailbox import RolloutStopped, VersionedEngine, WeightMailbox, materialize, skeleton
from arl.run.builders import build_agent_loop, build_engine, build_rollout_datamodule
from arl.run.settings import RunSettings

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often a learner waiting for a batch looks whether the rollout process is alive
WAITING_LOG_SECONDS = 60.0  # a learner waiting this long for a batch says so, and again every as long


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
        mailbox.beat()  # started: every process argument is unpickled (the learner may unlink their names)
        model = materialize(spec.model, spec.extra, mailbox)
        engine = VersionedEngine(build_engine(run.rollout, model, spec.tokenizer), mailbox, stop)
        loop = build_agent_loop(run.env, run.rollout, engine, spec.tokenizer)
        dm = build_rollout_datamodule(run, loop, spec.pad_id)
        first = mailbox.first_message(stop)  # the iteration to start at, the random states to start from
        if first is not None and _play(run, dm, mailbox, batches, first, stop):
            batches.put(("done",))
    except RolloutStopped:  # the learner stopped it mid-iteration: nothing to report
        pass
    except BaseException:  # noqa: BLE001 - sent to the learner, which raises it with this traceback
        batches.put(("error", traceback.format_exc()))
    finally:
        if loop is not None:
            loop.close()


def _play(run: RunSettings, dm, mailbox: WeightMailbox, batches, first: tuple, stop: Callable[[], bool]) -> bool:
    """Play the iterations from ``first`` (the learner's start message) to the run's last, each admitted by the
    bound, onto ``batches``; True when all were played, False when ``stop()`` came first."""
    k = int(run.rl.max_staleness)
    chained = k == 0
    dm.iteration, states, own_stream = first
    from_learner = states is None  # k = 0 after a queue: the states come with the version that admits the start
    if not from_learner:
        restore_rng(states)
        if own_stream:
            fork_stream(states)
    while dm.iteration < run.rl.iterations:
        it = dm.iteration
        waited = mailbox.wait_for(max(0, it - k), stop)  # admission
        if chained and (it != first[0] or from_learner):  # continue the learner's stream, as the synchronous loop would
            states = mailbox.rng_for(it, stop)
            if states is None:
                return False
            restore_rng(states)
        if stop():
            return False
        t0 = time.perf_counter()
        batch = dm.next_train_batch()
        busy = time.perf_counter() - t0
        payload = (batch, capture_rng(), {"wait_s": waited, "busy_s": busy, "chained": chained})
        batches.put(("batch", _to_bytes(payload)))
    return True


def admitted_queue(oldest: list[int | None], first_iteration: int, max_staleness: int) -> int:
    """How many of a queue's batches (in order; ``oldest[j]``: the oldest policy version in batch ``j``, None for a
    batch without turns) the bound admits when batch ``j`` trains at iteration ``first_iteration + j``: the
    queue up to the first batch that would train a turn more than ``max_staleness`` updates old."""
    for j, version in enumerate(oldest):
        if version is not None and first_iteration + j - version > max_staleness:
            return j
    return len(oldest)


def fork_stream(states: dict[str, Any]) -> None:
    """Seed python's, numpy's and torch's global RNGs from a number drawn off ``states``' torch generator: a
    stream of the rollout process's own, fixed by the learner's states, which the learner (going on from those
    same states) does not repeat. Without it both processes would draw the same numbers (``k > 0``)."""
    generator = torch.Generator()
    generator.set_state(states["torch"])
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


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
        self.run = run
        self.max_staleness = int(run.rl.max_staleness)
        self.chained = self.max_staleness == 0
        self.watchdog_s = float(run.rl.rollout_watchdog_s)
        self.tokenizer, self.pad_id = tokenizer, pad_id
        self.received: deque[bytes] = deque()  # batches taken off the pipe, not yet trained (in order)
        self._last_taken: float | None = None
        self._start(model)

    def _start(self, model) -> None:
        """A new rollout process with a mailbox shaped after ``model`` (holding its weights) and fresh channels."""
        ctx = torch.multiprocessing.get_context("spawn")
        self.mailbox = WeightMailbox.of(model, ctx)
        self.batches = ctx.Queue()
        self.stop = ctx.Event()
        structure, extra = skeleton(model)  # no second copy of the weights: the mailbox holds them
        spec = RolloutSpec(self.run, structure, extra, self.tokenizer, self.pad_id)
        # not daemonic: it starts env worker processes of its own (rollout.n_workers), which a daemonic process may
        # not; it ends with the learner all the same (PR_SET_PDEATHSIG, and close() at exit)
        self.process = ctx.Process(target=rollout_process, args=(spec, self.mailbox, self.batches, self.stop),
                                   name="arl-rollout", daemon=False)
        self.process.start()
        # the pipe is read by a thread of its own: a message cut off mid-write (a process frozen or killed while
        # sending) blocks that thread, never the learner, which keeps checking the process and the watchdog
        self.inbox: queue.Queue = queue.Queue()
        self._closing = threading.Event()
        self._held: tuple | None = None  # a failure or the end, taken off by state_dict, for the next request
        threading.Thread(target=_forward, args=(self.batches, self.inbox, self._closing), name="arl-rollout-reader",
                         daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop_process, self.process, self.stop, self._closing)
        self._names_released = False
        self.published = -1

    def restart(self, model) -> None:
        """Stop the rollout process, drop every batch it played, and start a new one on ``model``'s weights (a
        collapse rollback: what the collapsed policy played is not trained); the next :meth:`publish` says
        where it starts."""
        dropped = len(self.received)
        self.close()
        self.received.clear()
        self._start(model)
        log.info("rollout process restarted on the rolled-back weights; %d played batches dropped", dropped)

    def _release_names(self) -> None:
        """Once the rollout process has started (its arguments unpickled), unlink the named semaphores of the
        channels both processes hold: they keep working, and a kill of the whole process group (which also takes
        down the resource tracker that would remove them) leaves none behind in /dev/shm."""
        if self._names_released or self.mailbox.silent_s is None:
            return
        unlink_semaphores(self.batches, self.stop, self.mailbox.rng_states, self.mailbox.start)
        self._names_released = True

    def publish(self, model, version: int) -> None:
        """Hand the learner's weights after ``version`` updates to the rollout process. The first time also
        where it starts: the iteration after the batches already received (a resumed run's queue, less any
        batch the bound no longer admits), from the random states the last of them left, else from the
        learner's (at ``k > 0`` forked into a stream of the rollout process's own). At staleness 0, the
        learner's random states with every version."""
        if self.published < 0:
            self._trim_queue(int(version))
            start = int(version) + len(self.received)
            if self.chained and self.received:  # the start's random states: those the learner publishes with the
                states = None  # version that admits it, after training the queue (one stream, the synchronous order)
            else:
                states = _from_bytes(self.received[-1])[1] if self.received else capture_rng()
            self.mailbox.start_at(start, states, own_stream=not self.chained and not self.received)
        rng = capture_rng() if self.chained and self.published >= 0 else None
        self.mailbox.publish(model, version, rng)
        self.published = int(version)
        self._release_names()

    def _trim_queue(self, version: int) -> None:
        """Drop the queued batches (a resumed run's) from the first one the bound no longer admits: a run resumed
        with a smaller ``rl.max_staleness`` plays those again rather than stop."""
        oldest = []
        for data in self.received:
            versions = _from_bytes(data)[0].turns["policy_version"]
            oldest.append(int(versions.min()) if versions.numel() else None)
        keep = admitted_queue(oldest, version, self.max_staleness)
        if keep < len(self.received):
            log.warning("%d queued batches from iteration %d on are older than rl.max_staleness=%d allows: played again",
                        len(self.received) - keep, version + keep, self.max_staleness)
            self.received = deque(list(self.received)[:keep])

    def state_dict(self) -> dict[str, Any]:
        """The batches played and not yet trained, in order (what the pipe holds is taken off it first)."""
        while self._held is None:
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                break
            if message[0] != "batch":
                self._held = message  # a failure or the end: for the next batch request to meet
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
        t0 = time.perf_counter()
        said = 0
        while True:
            try:
                message = self._held if self._held is not None else self.inbox.get(timeout=POLL_SECONDS)
                self._held = None
            except queue.Empty:
                self._release_names()
                if not self.process.is_alive():
                    self._held = self._last_words()
                    if self._held is not None:  # its traceback or its end, still on the way: met below
                        continue
                    raise RuntimeError(f"the rollout process died (exit code {self.process.exitcode})") from None
                silent = self.mailbox.silent_s
                if self.watchdog_s > 0 and silent is not None and silent > self.watchdog_s:
                    self.process.kill()  # hung: no grace to wait out
                    raise RuntimeError(
                        f"the rollout process (pid {self.process.pid}) has shown no progress for {silent:.0f} s "
                        f"(no engine call began or ended): stopped by rl.rollout_watchdog_s={self.watchdog_s:g}"
                    ) from None
                waited = time.perf_counter() - t0
                if waited >= (said + 1) * WAITING_LOG_SECONDS:
                    said += 1
                    last = "not started yet" if silent is None else f"its last engine call {silent:.0f} s ago"
                    log.info("waiting %.0f s for the rollout process's next batch (pid %d, %s)",
                             waited, self.process.pid, last)
                continue
            if message[0] == "batch":
                return message
            if message[0] == "error":
                raise RuntimeError(f"the rollout process failed:\n{message[1]}")
            raise RuntimeError("the rollout process finished before the learner asked for its last batch")

    def _last_words(self) -> tuple | None:
        """A message of an ended rollout process still on its way through the pipe, or None."""
        try:
            return self.inbox.get(timeout=2 * POLL_SECONDS)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop the rollout process (it finishes its engine call and exits; killed after a grace)."""
        self.stop.set()
        self.process.join(timeout=30.0)  # the reader thread drains the pipe meanwhile: a full pipe blocks no exit
        self._finalizer()


def unlink_semaphores(*channels) -> list[str]:
    """Unlink the names of the POSIX semaphores inside multiprocessing ``channels`` (queues, events) and take
    them off the resource tracker's list; the processes that opened them keep using them. Returns the names."""
    found: dict[int, SemLock] = {}

    def walk(obj, depth: int) -> None:
        if isinstance(obj, SemLock):
            found[id(obj)] = obj
        elif depth and type(obj).__module__.startswith("multiprocessing") and hasattr(obj, "__dict__"):
            for value in vars(obj).values():
                walk(value, depth - 1)

    for channel in channels:
        walk(channel, 3)
    names = {getattr(lock._semlock, "name", None) for lock in found.values()} - {None}
    # each one's own finalizer (SemLock._cleanup: unlink, tell the tracker) runs now rather than at collection
    for finalizer in list(util._finalizer_registry.values()):
        if getattr(finalizer, "_callback", None) is SemLock._cleanup and finalizer._args and finalizer._args[0] in names:
            finalizer()
    return sorted(names)


def _forward(batches, inbox: queue.Queue, closing: threading.Event) -> None:
    """The learner's reader thread: the rollout process's messages from the pipe to ``inbox``, until the end, a
    failure, or ``closing``; a message cut off (the process died while sending it) becomes a failure."""
    while not closing.is_set():
        try:
            message = batches.get(timeout=POLL_SECONDS)
        except queue.Empty:
            continue
        except (EOFError, OSError) as err:
            cut = f"a message from the rollout process was cut off ({type(err).__name__}): it died while sending"
            inbox.put(("error", cut))
            return
        inbox.put(message)
        if message[0] != "batch":
            return


def _stop_process(process, stop, closing: threading.Event) -> None:
    """Stop the rollout process now (also at interpreter exit, when no one called ``close``: a non-daemonic
    child would otherwise be waited for); killed if it does not end at once. Its reader thread ends too."""
    stop.set()
    process.join(timeout=2.0)
    if process.is_alive():
        process.kill()
        process.join(timeout=5.0)
    closing.set()
