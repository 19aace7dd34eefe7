"""Rollouts with transformers ``generate``: the CPU default, and GPUs without vLLM.

Prompts are left-padded into batches of at most ``max_batch_size``; the KV cache is on, ``static``
by default (one buffer of prompt width + ``max_new_tokens`` per call, written in place: on a CPU a
decoding step of 64 rows of 520 tokens takes 25 ms against 35 ms with the ``dynamic`` cache, which
concatenates a grown copy at every step; ``bench/generate.py``). The engine
holds the very policy module the trainer updates, so :meth:`HFEngine.sync` has nothing to copy.
With a ``device`` the engine moves that module there before it generates: Lightning hands a
module back on the CPU after each ``fit``, and validation or DAgger after behaviour cloning would
otherwise generate on the CPU of a GPU machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from arl.distributed.placement import resolve_placement
from arl.rollout.engine import Generation, SamplingParams
from arl.rollout.hf_stream import RefillDecoder, split_stops


def resolve_device(device: str | torch.device | None) -> torch.device | None:
    """``rollout.device`` as a device: ``auto`` is this process's GPU when there is one (the one
    :func:`arl.distributed.placement.resolve_placement` gives it: torchrun, srun or Lightning's spawner),
    else None.

    None (or ``auto`` without a GPU) generates wherever the model is.
    """
    if device is None:
        return None
    if str(device) == "auto":
        if not torch.cuda.is_available():
            return None
        return torch.device(resolve_placement().device)
    return torch.device(device)


HF_CACHES = ("dynamic", "static")  # transformers' cache_implementation values offered (rollout.hf_cache)
DEFAULT_HF_CACHE = "static"  # where a config leaves rollout.hf_cache out (configs/rollout/hf.yaml sets it)


class HFEngine:
    """A :class:`~arl.rollout.engine.RolloutEngine` over a transformers causal LM.

    ``cache`` is the KV-cache layout of ``generate`` (:data:`HF_CACHES`); both give the same tokens
    up to float rounding (logits within 1e-5 of each other on the tiny model)."""

    def __init__(self, model, tokenizer, max_batch_size: int = 64, device: str | torch.device | None = None,
                 cache: str = DEFAULT_HF_CACHE):
        if cache not in HF_CACHES:
            raise ValueError(f"cache={cache!r} is not valid; valid: {', '.join(HF_CACHES)}")
        self.model = model
        self.cache = cache
        self.device = resolve_device(device)
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
            eos.append(tokenizer.eos_token_id)
        self.eos_ids = eos
        self._stream: RefillDecoder | None = None  # continuous batching, made at the first submit

    # ------------------------------------------------------------------ streaming (rollout.schedule=episode)
    @property
    def stream(self) -> RefillDecoder:
        """The engine's continuous-batching decoder (:mod:`arl.rollout.hf_stream`): requests seeded
        one by one, rows refilled as they finish."""
        if self._stream is None:
            self._stream = RefillDecoder(self.model, self.tokenizer, self.eos_ids, self.max_batch_size, self.device)
        return self._stream

    def submit(self, key, prompt: Sequence[int], params: SamplingParams, seed: int) -> None:  # see StreamingEngine
        self.stream.submit(key, prompt, params, seed)

    def poll(self) -> list[tuple[object, Generation]]:  # see StreamingEngine
        return self.stream.poll()

    @property
    def in_flight(self) -> int:  # see StreamingEngine
        return 0 if self._stream is None else self._stream.in_flight

    def abort(self) -> None:  # see StreamingEngine
        if self._stream is not None:
            self._stream.reset()

    def sync(self, policy) -> None:  # shares the trainer's module
        if policy is not self.model:
            self.model.load_state_dict(policy.state_dict())

    @torch.no_grad()
    def load_weights(self, named_tensors) -> None:
        """Copy ``(name, tensor)`` pairs into the engine's own model in place, one at a time (a
        streamed sync: the caller may gather each tensor just before and free it just after).
        Every entry of the model's state dict must come (tied weights count once)."""
        target = self.model.state_dict()
        seen: set[int] = set()
        for name, tensor in named_tensors:
            if name not in target:
                raise KeyError(f"load_weights: the engine's model has no {name!r}")
            target[name].copy_(tensor)
            seen.add(target[name].data_ptr())
            del tensor  # let a streamed, gathered tensor go before the next one is gathered
        missing = [n for n, t in target.items() if t.data_ptr() not in seen]
        if missing:
            raise KeyError(f"load_weights: no value came for {missing[:5]}")

    def _stop_token_ids(self, stop: Sequence[str]) -> tuple[list[int], list[str]]:
        """Stop strings that are one token become EOS ids; the rest stay strings."""
        return split_stops(self.tokenizer, stop)

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Sample each batch from the process's torch RNG stream (checkpoints keep it, so a resumed
        run continues it exactly); per-request ``seeds`` are not used by this engine.

        ``params`` may be one per prompt when they differ only in their token counts: the batch is
        decoded to the largest ``max_new_tokens`` (and ``min_new_tokens``) and each row is cut at
        its own ``max_new_tokens``."""
        each = None
        if not isinstance(params, SamplingParams):
            each = list(params)
            if len(each) != len(prompts):
                raise ValueError(f"generate: {len(each)} sampling parameters for {len(prompts)} prompts")
            if not each:
                return []
            shared = {dataclasses.replace(p, max_new_tokens=1, min_new_tokens=0) for p in each}
            if len(shared) > 1:
                raise ValueError("generate: per-prompt sampling parameters may differ only in max_new_tokens and min_new_tokens")
            params = dataclasses.replace(each[0], max_new_tokens=max(p.max_new_tokens for p in each),
                                         min_new_tokens=max(p.min_new_tokens for p in each))
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            out.extend(self._generate_batch(prompts[start : start + self.max_batch_size], params))
        if each is not None:
            out = [g if len(g.token_ids) <= p.max_new_tokens else
                   Generation(g.token_ids[: p.max_new_tokens], g.log_probs[: p.max_new_tokens], "length")
                   for g, p in zip(out, each)]
        return out

    def _generate_batch(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        device = next(self.model.parameters()).device
        if self.device is not None and device != self.device:
            self.model.to(self.device)
            device = self.device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention_mask[i, width - len(p) :] = 1
        stop_ids, stop_strings = self._stop_token_ids(params.stop)
        greedy = params.temperature <= 0
        kwargs = {
            "max_new_tokens": params.max_new_tokens,
            "min_new_tokens": params.min_new_tokens or None,
            "do_sample": not greedy,
            "eos_token_id": self.eos_ids + stop_ids,
            "pad_token_id": self.pad_id,
            "output_logits": True,
            "return_dict_in_generate": True,
            "cache_implementation": self.cache,
            "disable_compile": True,  # a static cache would otherwise compile the forward on a GPU, per batch shape
        }
        if greedy:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        if stop_strings:
            kwargs.update(stop_strings=stop_strings, tokenizer=self.tokenizer)
        was_training = self.model.training
        self.model.eval()
        try:
            result = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **kwargs
            )
        finally:
            self.model.train(was_training)
        chosen = result.sequences[:, width:]
        scale = 1.0 if greedy else params.temperature
        # log p of each chosen token, one (B, V) step of raw logits at a time on the model's device:
        # never a (B, steps, V) tensor (1.6 GB for 64 x 128 steps of a 49k vocabulary)
        logp = torch.stack(
            [torch.log_softmax(step.float() / scale, dim=-1).gather(-1, chosen[:, t : t + 1]).squeeze(-1)
             for t, step in enumerate(result.logits)],
            dim=1,
        ).cpu()
        new_tokens = chosen.cpu()
        stops = set(self.eos_ids + stop_ids)
        return [self._cut(new_tokens[i].tolist(), logp[i].tolist(), stops, stop_strings, params) for i in range(len(prompts))]

    def _cut(self, ids: list[int], logps: list[float], stops: set[int], stop_strings: list[str], params) -> Generation:
        """Truncate at the first stop, exactly where ``generate`` stopped this row."""
        for n, tok in enumerate(ids, start=1):
            if tok in stops:
                return Generation(ids[:n], logps[:n], "stop")
            if stop_strings:
                text = self.tokenizer.decode(ids[:n], skip_special_tokens=False)
                if any(s in text for s in stop_strings):
                    return Generation(ids[:n], logps[:n], "stop")
        return Generation(ids, logps, "length")
