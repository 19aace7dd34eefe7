"""The engine protocol shared by the transformers and vLLM back ends."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response.

    ``temperature == 0`` means greedy decoding. ``top_k == 0`` and ``top_p == 1`` disable those
    filters. Generation stops after an EOS token, after any of ``stop`` appears in the decoded
    text (the stop string is kept), or after ``max_new_tokens``; not before ``min_new_tokens``
    (stop tokens are not sampled until then; for fixed answer lengths in benches, with ``stop=()``:
    engines differ on stop strings completed earlier).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ("</action>",)
    min_new_tokens: int = 0

    def describe(self) -> str:
        """``greedy`` or ``T 0.6, top-p 0.95, top-k 20`` (for tables and logs)."""
        if self.temperature <= 0:
            return "greedy"
        return f"T {self.temperature:g}, top-p {self.top_p:g}, top-k {self.top_k or 'off'}"


@dataclass
class Generation:
    """One sampled response: token ids exactly as sampled and their log-probs.

    ``log_probs[i]`` is log p(token_ids[i]) under the sampling distribution's logits divided by
    the temperature (raw logits when greedy), before top-k/top-p filtering, which is what the
    trainer recomputes.
    """

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (EOS or stop string) or "length"
    version: int | None = None  # the policy version that sampled it (asynchronous rollouts; None: the trainer's own)


class RolloutEngine(Protocol):
    """Turns prompts (token ids) into responses."""

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        """One response per prompt. ``seeds`` (one per prompt, optional): an engine that can seed
        each request (vLLM) samples prompt ``i`` from ``seeds[i]`` alone, so the result does not
        depend on which other prompts share the batch, the process or the rank; an engine that
        samples a batch from one stream (transformers) ignores them."""
        ...

    def sync(self, policy) -> None:
        """Load the trainer's current weights (a no-op when the engine shares the model)."""
        ...


class StreamingEngine(RolloutEngine, Protocol):
    """An engine that takes requests one at a time and returns each as soon as it is finished
    (continuous batching): what the per-episode agent loop drives (``rollout.schedule: episode``).

    Every request is sampled from its own ``seed`` alone, so its tokens do not depend on which
    other requests share the engine's steps, nor on when it was submitted.
    """

    max_batch_size: int  # requests decoded together at most (others wait their turn)

    def submit(self, key: Any, prompt: Sequence[int], params: SamplingParams, seed: int) -> None:
        """Queue one request; ``key`` (hashable, unique among the requests in flight) names it in
        :meth:`poll`'s answer."""
        ...

    def poll(self) -> list[tuple[Any, Generation]]:
        """Advance the engine by one step (one token of each running request, waiting ones admitted
        where rows are free) and return the requests that finished in it, as ``(key, generation)``."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet returned by :meth:`poll`."""
        ...

    def abort(self) -> None:
        """Drop every request in flight (after an error, so none reaches a later rollout)."""
        ...


def request_seed(task_seed: int, member: int, turn: int) -> int:
    """The sampling seed of one request: turn ``turn`` of group member ``member`` of the task
    seeded ``task_seed`` (31 bits, from a hash, so neighbouring inputs give unrelated seeds).

    It names the request, not its place in a batch: the same episode draws the same tokens
    whichever rank, batch or resumed run generates it (with an engine that seeds requests).
    """
    digest = hashlib.blake2b(f"{int(task_seed)}:{int(member)}:{int(turn)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2**31 - 1)


class LazyEngine:
    """An engine built at its first use, or when :meth:`start` is called.

    The vLLM engine must be built after the trainer's process group exists (under DDP/FSDP each
    rank builds its own engine inside that group, see :mod:`arl.rollout.vllm_engine`), and the
    group exists only once Lightning has launched the ranks. The pipeline therefore hands the
    agent loop this stand-in; the weight-sync callback calls :meth:`start` from its ``setup`` hook,
    which every rank runs at the same point, right after the process group is up. Building is a
    collective there (vLLM makes its own groups), which is why it must not happen at a point
    where ranks differ (e.g. the first ``generate`` of a rank that had no episode).

    Args:
        factory: ``factory()`` builds the engine (on the device
            :func:`arl.distributed.placement.resolve_placement` gives this process).
    """

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self.engine: Any = None
        self.model = None  # holds no trainer module (the HF engine's ``model`` would)

    def start(self) -> Any:
        """Build the engine now (no-op when built); returns it."""
        if self.engine is None:
            self.engine = self._factory()
            self._factory = None  # it holds the module it was built from, which training may shard and replace
        return self.engine

    def generate(self, prompts, params, seeds=None):  # see RolloutEngine
        return self.start().generate(prompts, params, seeds=seeds)

    def sync(self, policy) -> None:  # see RolloutEngine
        self.start().sync(policy)

    @property
    def max_batch_size(self) -> int:  # see StreamingEngine
        return self.start().max_batch_size

    def submit(self, key, prompt, params, seed) -> None:  # see StreamingEngine
        self.start().submit(key, prompt, params, seed)

    def poll(self):  # see StreamingEngine
        return self.start().poll()

    @property
    def in_flight(self) -> int:  # see StreamingEngine
        return 0 if self.engine is None else self.engine.in_flight

    def abort(self) -> None:  # see StreamingEngine
        if self.engine is not None:
            self.engine.abort()

    def load_weights(self, named_tensors) -> None:
        """Stream ``(name, tensor)`` pairs into the engine (built first if need be)."""
        self.start().load_weights(named_tensors)

    def sleep(self) -> None:
        if self.engine is not None and callable(getattr(self.engine, "sleep", None)):
            self.engine.sleep()

    def wake_up(self) -> None:
        if self.engine is not None and callable(getattr(self.engine, "wake_up", None)):
            self.engine.wake_up()

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None and callable(getattr(engine, "close", None)):
            engine.close()
