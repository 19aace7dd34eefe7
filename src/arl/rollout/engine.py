"""The engine protocol shared by the transformers and vLLM back ends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response.

    ``temperature == 0`` means greedy decoding. ``top_k == 0`` and ``top_p == 1`` disable those
    filters. Generation stops after an EOS token, after any of ``stop`` appears in the decoded
    text (the stop string is kept), or after ``max_new_tokens``.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ("</action>",)

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


class RolloutEngine(Protocol):
    """Turns prompts (token ids) into responses."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        ...

    def sync(self, policy) -> None:
        """Load the trainer's current weights (a no-op when the engine shares the model)."""
        ...
