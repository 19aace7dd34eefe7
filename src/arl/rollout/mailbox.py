"""Policy weights handed from the learner to a rollout process that keeps playing (asynchronous RL).

The learner publishes its weights after every update into a :class:`WeightMailbox`: two slots, each one flat
buffer of shared memory holding the whole state dict (a view per tensor, so two file descriptors however
many tensors the policy has), each with its version and a sequence number. A publish writes the slot the
reader was not last pointed at (its sequence number odd while it writes), then points the reader at it: the
learner never takes a lock and never waits (a rollout process killed in the middle of a load cannot block
it). Before each engine call the rollout process looks at the newest slot and, when it holds a newer
version than its engine has, loads it (:meth:`WeightMailbox.refresh`) and checks that the slot's sequence
number did not move meanwhile; when it did (the learner published twice during one load and came round to
that slot), it loads again. So the episodes in flight go on with the newer weights from their next turn,
and no torn state is ever kept.

:class:`VersionedEngine` wraps the rollout process's engine: it refreshes before every ``generate``
and stamps each :class:`~arl.rollout.engine.Generation` with the version that sampled it, which the
agent loop records on the turn (``Turn.policy_version``). A turn never spans a refresh (the
lockstep schedule calls the engine once per turn), so a turn's version is every one of its tokens'.

The rollout process builds its policy from a skeleton (:func:`skeleton`: the module with its tensors on the
meta device, a few kilobytes pickled) and the mailbox's first slot (:func:`materialize`), not from a second
pickled copy of the weights.

With ``max_staleness=0`` the learner also hands over its random-number states with each version
(:meth:`WeightMailbox.publish` ``rng=``), and the rollout process continues from them
(:meth:`WeightMailbox.rng_for`): the two processes then consume one random stream in the order the
synchronous loop does, which makes staleness 0 the synchronous run token for token.
"""

from __future__ import annotations

import copy
import math
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from arl.rollout.engine import Generation, SamplingParams


def _get(messages, stop: Callable[[], bool]) -> Any:
    """The next item of the process queue ``messages``, or None once ``stop()`` says to give up."""
    while not stop():
        try:
            return messages.get(timeout=0.05)
        except queue.Empty:
            continue
    return None


ALIGN = 64  # bytes: every tensor's view starts on such a boundary of its slot


class WeightMailbox:
    """The policy's weights in two slots of shared memory, their versions, and the random states handed with
    them (module docstring).

    Made by the learner (:meth:`of`) before the rollout process starts, and handed to it as a process
    argument (the two flat buffers travel as shared memory, not as copies). Slot 0 starts with the weights
    ``of`` was given, as version -1.
    """

    def __init__(self, layout: list[tuple[str, torch.dtype, tuple[int, ...], int]], nbytes: int, ctx):
        self.layout = layout  # (name, dtype, shape, byte offset) of each tensor in a slot
        self.slots = [torch.zeros(max(1, nbytes), dtype=torch.uint8).share_memory_() for _ in range(2)]
        self.seq = ctx.Array("q", [0, 0], lock=False)  # per slot: odd while the learner writes it
        self.slot_version = ctx.Array("q", [-1, -1], lock=False)
        self.latest = ctx.Value("q", 0, lock=False)  # the slot the reader should take
        self.rng_states = ctx.Queue()  # (version, states) when the learner chains its random stream
        self.start = ctx.Queue()  # (iteration, states, own stream): where the rollout process starts, sent once
        self.heartbeat = ctx.Value("d", 0.0, lock=False)  # wall time of the rollout process's last sign of progress
        self._local = -2  # the version the reading side last loaded (per process; -2: none yet)
        self._views: dict[int, dict[str, torch.Tensor]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_views"} | {"_views": {}}

    @classmethod
    def of(cls, model, ctx) -> WeightMailbox:
        """A mailbox shaped like ``model``'s state dict (floating and integer buffers alike), on the CPU, its
        first slot holding the model's weights now (version -1)."""
        layout, offset = [], 0
        state = model.state_dict()
        for name, t in state.items():
            layout.append((name, t.dtype, tuple(t.shape), offset))
            offset += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
        box = cls(layout, offset, ctx)
        box._write(0, state)
        return box

    def views(self, slot: int) -> dict[str, torch.Tensor]:
        """``{name: tensor}`` of ``slot``: views into its flat buffer (made once per process)."""
        if slot not in self._views:
            flat = self.slots[slot]
            out = {}
            for name, dtype, shape, offset in self.layout:
                n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
                out[name] = flat[offset:offset + n].view(dtype).view(shape)
            self._views[slot] = out
        return self._views[slot]

    @property
    def version(self) -> int:
        """The newest published version (-1: only the weights the mailbox was made with)."""
        return int(self.slot_version[self.latest.value])

    @torch.no_grad()
    def _write(self, slot: int, state: dict[str, torch.Tensor]) -> None:
        targets = self.views(slot)
        for name, target in targets.items():
            target.copy_(state[name].detach())

    # ---------------------------------------------------------------- the learner's side
    @torch.no_grad()
    def publish(self, model, version: int, rng: dict[str, Any] | None = None) -> None:
        """Copy ``model``'s weights in as ``version`` (with the learner's random states ``rng`` when the streams
        are chained), into the slot the reader is not pointed at; never waits for the reader."""
        slot = 1 - self.latest.value
        self.seq[slot] += 1  # odd: being written
        self._write(slot, model.state_dict())
        self.slot_version[slot] = int(version)
        self.seq[slot] += 1  # even: whole
        self.latest.value = slot
        if rng is not None:
            self.rng_states.put((int(version), rng))

    def start_at(self, iteration: int, rng: dict[str, Any], own_stream: bool = False) -> None:
        """Tell the rollout process where to start: the first iteration it plays, its random states, and whether
        it forks a stream of its own from them (the learner goes on drawing from the same states)."""
        self.start.put((int(iteration), rng, bool(own_stream)))

    def beat(self) -> None:
        """The rollout process is making progress (an engine call started or ended, or it waits for weights)."""
        self.heartbeat.value = time.time()

    @property
    def silent_s(self) -> float | None:
        """Seconds since the rollout process's last sign of progress; None before its first."""
        last = float(self.heartbeat.value)
        return None if last <= 0 else max(0.0, time.time() - last)

    # ---------------------------------------------------------------- the rollout process's side
    def first_message(self, stop: Callable[[], bool]) -> tuple[int, dict[str, Any], bool] | None:
        """(the iteration to start at, the random states to start from, whether to fork a stream of its own),
        once the learner sent them; None when ``stop()`` says to give up first."""
        return _get(self.start, stop)

    @torch.no_grad()
    def load_into(self, load: Callable[[Any], None], poll_s: float = 0.001) -> int:
        """Give ``load`` (an engine's ``load_weights``, or a module's loader) the newest slot's tensors when they
        hold a newer version than this process last took, again until the slot did not change under the
        load; returns the version now loaded."""
        while True:
            slot = self.latest.value
            before = self.seq[slot]
            version = int(self.slot_version[slot])
            if version == self._local:
                return version
            if before % 2:  # the learner is writing it (it published twice in a row): look again
                time.sleep(poll_s)
                continue
            load(self.views(slot).items())
            if self.seq[slot] == before:
                self._local = version
                return version

    def refresh(self, engine) -> int:
        """Load the mailbox into ``engine`` (its ``load_weights``: the transformers engine copies into its
        module, vLLM reloads) when it holds a newer version than this process last took; returns the
        version the engine now has."""
        return self.load_into(engine.load_weights)

    def wait_for(self, version: int, stop: Callable[[], bool], poll_s: float = 0.005) -> float:
        """Block until a version >= ``version`` is published (or ``stop()`` says to give up); returns
        the seconds waited."""
        t0 = time.perf_counter()
        while self.version < version and not stop():
            self.beat()  # waiting for the learner is not a hang
            time.sleep(poll_s)
        return time.perf_counter() - t0

    def rng_for(self, version: int, stop: Callable[[], bool]) -> dict[str, Any] | None:
        """The learner's random states published with ``version`` (older ones are dropped); None when
        ``stop()`` says to give up first."""
        while (message := _get(self.rng_states, stop)) is not None:
            got, states = message
            if got == version:
                return states
            if got > version:
                raise RuntimeError(f"random states of version {got} came while waiting for version {version}")
        return None


def skeleton(model) -> tuple[Any, dict[str, torch.Tensor]]:
    """(``model`` with every parameter and persistent buffer on the meta device, its non-persistent buffers):
    what the rollout process builds its policy from, no weights copied (tied weights stay tied)."""
    persistent = set(model.state_dict().keys())
    memo: dict[int, Any] = {}
    extra: dict[str, torch.Tensor] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        memo.setdefault(id(p), torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad))
    for name, b in model.named_buffers(remove_duplicate=False):
        memo.setdefault(id(b), torch.empty_like(b, device="meta"))
        if name not in persistent:  # rotary frequencies and the like: not in the state dict, so carried here
            extra[name] = b.detach().to("cpu", copy=True)
    return copy.deepcopy(model, memo), extra


@torch.no_grad()
def materialize(model, extra: dict[str, torch.Tensor], mailbox: WeightMailbox):
    """The rollout process's policy from a :func:`skeleton` and the mailbox's newest slot, on the CPU."""
    model = model.to_empty(device="cpu")
    for name, value in extra.items():
        owner, _, attr = name.rpartition(".")
        (model.get_submodule(owner) if owner else model)._buffers[attr] = value
    if callable(getattr(model, "tie_weights", None)):
        model.tie_weights()
    mailbox.load_into(lambda items: model.load_state_dict(dict(items), strict=True))
    return model.eval()


class RolloutStopped(Exception):
    """The learner asked the rollout process to stop: raised at its next engine call, so an iteration in
    progress ends there (its env workers closed on the way out) instead of playing to its end."""


class VersionedEngine:
    """A rollout engine that takes the newest published weights before every call and stamps each
    generation with the version that sampled it (module docstring); it beats the mailbox's heartbeat around
    every call, and raises :class:`RolloutStopped` instead of calling once ``stop()`` says so. Only the
    one-call-per-turn protocol (``generate``) is offered: a streaming schedule would let a refresh fall
    inside a turn."""

    def __init__(self, engine, mailbox: WeightMailbox, stop: Callable[[], bool] = lambda: False):
        self.engine = engine
        self.mailbox = mailbox
        self.stop = stop

    @property
    def max_batch_size(self) -> int:
        return self.engine.max_batch_size

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        if self.stop():
            raise RolloutStopped
        self.mailbox.beat()
        version = self.mailbox.refresh(self.engine)
        generations = self.engine.generate(prompts, params, seeds)
        self.mailbox.beat()
        for g in generations:
            g.version = version
        return generations

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()
