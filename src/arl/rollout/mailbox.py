"""Policy weights handed from the learner to a rollout process that keeps playing (asynchronous RL).

The learner publishes its weights after every update into a :class:`WeightMailbox`: one copy of the
policy's state dict in shared memory, a version counter (the number of updates behind those
weights) and a lock. The rollout process never waits for the learner to write: before each engine
call it looks at the version and, when a newer one is there, loads the mailbox into its engine
(:meth:`WeightMailbox.refresh`), so the episodes in flight go on with the newer weights from their
next turn. The learner never waits for a generation either: it only waits for a copy to finish.

:class:`VersionedEngine` wraps the rollout process's engine: it refreshes before every ``generate``
and stamps each :class:`~arl.rollout.engine.Generation` with the version that sampled it, which the
agent loop records on the turn (``Turn.policy_version``). A turn never spans a refresh (the
lockstep schedule calls the engine once per turn), so a turn's version is every one of its tokens'.

With ``max_staleness=0`` the learner also hands over its random-number states with each version
(:meth:`WeightMailbox.publish` ``rng=``), and the rollout process continues from them
(:meth:`WeightMailbox.rng_for`): the two processes then consume one random stream in the order the
synchronous loop does, which makes staleness 0 the synchronous run token for token.
"""

from __future__ import annotations

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


class WeightMailbox:
    """The policy's weights in shared memory, their version, and the random states handed with them.

    Made by the learner (:meth:`of`) before the rollout process starts, and handed to it as a process
    argument (the tensors travel as shared memory, not as copies).
    """

    def __init__(self, tensors: dict[str, torch.Tensor], ctx):
        self.tensors = tensors
        self.version = ctx.Value("q", -1, lock=False)  # -1: nothing published yet
        self.lock = ctx.Lock()
        self.rng_states = ctx.Queue()  # (version, states) when the learner chains its random stream
        self.start = ctx.Queue()  # (iteration, states): where the rollout process starts, sent once
        self._local = -1  # the version the reading side last copied (per process)

    @classmethod
    def of(cls, model, ctx) -> WeightMailbox:
        """A mailbox shaped like ``model``'s state dict (floating and integer buffers alike), on the CPU."""
        tensors = {name: t.detach().to("cpu", copy=True).share_memory_() for name, t in model.state_dict().items()}
        return cls(tensors, ctx)

    # ---------------------------------------------------------------- the learner's side
    @torch.no_grad()
    def publish(self, model, version: int, rng: dict[str, Any] | None = None) -> None:
        """Copy ``model``'s weights in as ``version`` (with the learner's random states ``rng`` when
        the streams are chained)."""
        state = model.state_dict()
        with self.lock:
            for name, target in self.tensors.items():
                target.copy_(state[name].detach())
            self.version.value = int(version)
        if rng is not None:
            self.rng_states.put((int(version), rng))

    def start_at(self, iteration: int, rng: dict[str, Any]) -> None:
        """Tell the rollout process where to start: the first iteration it plays and its random states."""
        self.start.put((int(iteration), rng))

    # ---------------------------------------------------------------- the rollout process's side
    def first_message(self, stop: Callable[[], bool]) -> tuple[int, dict[str, Any]] | None:
        """(the iteration to start at, the random states to start from), once the learner sent them; None
        when ``stop()`` says to give up first."""
        return _get(self.start, stop)

    @torch.no_grad()
    def refresh(self, engine) -> int:
        """Load the mailbox into ``engine`` (its ``load_weights``: the transformers engine copies into its
        module, vLLM reloads) when it holds a newer version than this process last took; returns the
        version the engine now has."""
        if self.version.value != self._local:
            with self.lock:
                engine.load_weights(self.tensors.items())
                self._local = int(self.version.value)
        return self._local

    def wait_for(self, version: int, stop: Callable[[], bool], poll_s: float = 0.005) -> float:
        """Block until a version >= ``version`` is published (or ``stop()`` says to give up); returns
        the seconds waited."""
        t0 = time.perf_counter()
        while self.version.value < version and not stop():
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


class VersionedEngine:
    """A rollout engine that takes the newest published weights before every call and stamps each
    generation with the version that sampled it (module docstring). Only the one-call-per-turn
    protocol (``generate``) is offered: a streaming schedule would let a refresh fall inside a turn."""

    def __init__(self, engine, mailbox: WeightMailbox):
        self.engine = engine
        self.mailbox = mailbox

    @property
    def max_batch_size(self) -> int:
        return self.engine.max_batch_size

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        version = self.mailbox.refresh(self.engine)
        generations = self.engine.generate(prompts, params, seeds)
        for g in generations:
            g.version = version
        return generations

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()
