"""Continuous batching over a transformers causal LM: requests join the batch as rows finish.

:class:`RefillDecoder` is the transformers engine's :class:`~arl.rollout.engine.StreamingEngine`
half (``rollout.schedule: episode``). It keeps one batch of running rows over one KV cache and, at
every :meth:`RefillDecoder.poll`,

1. decodes one token of every running row (one forward of shape ``(B, 1)``) and drops the rows
   that finished (a stop token, a stop string, ``max_new_tokens``) from the batch and the cache;
2. admits waiting requests into the rows that were free when the poll began: their prompts are
   prefilled together (left-padded, a cache of their own), their first token sampled, and their
   cache joined to the running one;
3. returns the requests that finished in either.

A poll gives one token to each of at most ``max_batch_size`` rows, as a step of vLLM's engine does.

The cache layout is the one ``generate`` uses with left padding: ``keys``/``values`` of shape
``(B, H_kv, W, D)`` per layer, an attention mask ``(B, W)`` that is 0 on the padding, and explicit
``position_ids`` (each row counts only its own tokens). Joining rows of another width pads the
narrower side on the left; dropping rows trims the columns no remaining row uses.

Sampling is per request: each row draws from its own ``torch.Generator`` seeded with the request's
seed, so a row's tokens do not depend on the rows beside it (up to the float noise of a batched
forward, which can flip a near-tie) nor on when it was admitted. The filters and log-probs follow
the transformers engine: temperature, then top-k, then top-p (transformers' warpers), and
``log_probs[i] = log_softmax(logits / T)[token]`` before filtering (raw logits when greedy).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from arl.rollout.engine import Generation, SamplingParams


@dataclass
class _Request:
    key: Any
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    next_position: int = 0  # position of the row's next input token (its tokens in the cache)


def filtered_probs(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Sampling probabilities of tempered logits after top-k then top-p, as transformers' warpers.

    Args:
        scaled: ``(B, V)`` logits already divided by the temperature.
        top_k: keep the ``top_k`` largest (ties with the k-th kept); 0 keeps all.
        top_p: keep the smallest set of largest tokens whose mass reaches ``top_p`` (at least
            one); 1 keeps all.

    Returns:
        ``(B, V)`` probabilities, 0 on the removed tokens.
    """
    logits = scaled
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - top_p)
        remove_sorted[..., -1:] = False  # the most likely token always stays
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits.softmax(dim=-1)


def split_stops(tokenizer, stop: Sequence[str]) -> tuple[list[int], list[str]]:
    """(ids of the stop strings that are one token, the other stop strings): the first end a row
    like EOS, the others are looked for in the decoded text."""
    single, multi = [], []
    for s in stop:
        ids = tokenizer(s, add_special_tokens=False)["input_ids"]
        (single.append(ids[0]) if len(ids) == 1 else multi.append(s))
    return single, multi


def cache_argument() -> str:
    """The name under which the installed transformers' models take a KV cache: ``cache`` from
    transformers 5.2x on, ``past_key_values`` before (kept as a deprecated alias for a while)."""
    # heavy: transformers (~0.8 s) stays off train.py's start-up path (checks -> settings -> hf_engine)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    names = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in names else "past_key_values"


def _left_pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """``t`` (``(B, H, W, D)`` or ``(B, W)``) padded with zeros on the left of its W axis to ``width``."""
    missing = width - (t.shape[-2] if t.dim() == 4 else t.shape[-1])
    if missing <= 0:
        return t
    return F.pad(t, (0, 0, missing, 0)) if t.dim() == 4 else F.pad(t, (missing, 0))


class RefillDecoder:
    """Continuous batching of one transformers model (see the module docstring).

    Args:
        model: the causal LM (the engine's module; its ``eval`` mode is set around each forward).
        tokenizer: decodes rows for multi-token stop strings.
        eos_ids: token ids that end a row.
        max_batch_size: rows decoded together; further requests wait.
        device: where the model runs (None: where its parameters are).
    """

    def __init__(self, model, tokenizer, eos_ids: Sequence[int], max_batch_size: int, device: torch.device | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_ids)
        self.max_batch_size = int(max_batch_size)
        self.device = device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (self.eos_ids or [0])[0]
        self.waiting: deque[_Request] = deque()
        self.rows: list[_Request] = []
        self.cache = None  # DynamicCache of the running rows
        self.mask: torch.Tensor | None = None  # (B, W) 1 on each row's tokens in the cache
        self.pending: list[int] = []  # per row: the sampled token not yet in the cache
        self._cache_arg = cache_argument()
        self._stops: dict[tuple[str, ...], tuple[frozenset[int], tuple[str, ...]]] = {}

    # ------------------------------------------------------------------ the StreamingEngine API
    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.rows)

    def submit(self, key: Any, prompt: Sequence[int], params: SamplingParams, seed: int) -> None:
        if not prompt:
            raise ValueError("submit: empty prompt")
        stop_ids, stop_strings = self._stop_sets(params.stop)
        generator = torch.Generator(device="cpu")
        generator.manual_seed(int(seed))
        self.waiting.append(_Request(key, [int(t) for t in prompt], params, generator, stop_ids, stop_strings))

    @torch.no_grad()
    def poll(self) -> list[tuple[Any, Generation]]:
        done: list[tuple[Any, Generation]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            free = self.max_batch_size - len(self.rows)  # rows freed by this poll's decode serve the next one
            if self.rows:
                done += self._decode()
            if free > 0 and self.waiting:
                admitted = [self.waiting.popleft() for _ in range(min(free, len(self.waiting)))]
                done += self._prefill(admitted)
        finally:
            self.model.train(was_training)
        return done

    def reset(self) -> None:
        """Drop every request (after an error: the cache may no longer match the rows)."""
        self.waiting.clear()
        self.rows, self.pending, self.cache, self.mask = [], [], None, None

    # ------------------------------------------------------------------ steps
    def _model_device(self) -> torch.device:
        device = next(self.model.parameters()).device
        if self.device is not None and device != self.device:
            self.model.to(self.device)
            device = self.device
        return device

    def _prefill(self, admitted: list[_Request]) -> list[tuple[Any, Generation]]:
        """Run the prompts of ``admitted`` (a cache of their own), sample each one's first token,
        join the rows still running to the batch; returns those already finished."""
        from transformers import DynamicCache  # heavy: transformers, see cache_argument

        device = self._model_device()
        width = max(len(r.prompt) for r in admitted)
        input_ids = torch.full((len(admitted), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for i, r in enumerate(admitted):
            input_ids[i, width - len(r.prompt):] = torch.tensor(r.prompt, dtype=torch.long)
            mask[i, width - len(r.prompt):] = 1
            r.next_position = len(r.prompt)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self.model(
            input_ids=input_ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
            use_cache=True, logits_to_keep=1, **{self._cache_arg: cache},
        )
        tokens = self._sample(out.logits[:, -1, :], admitted)
        keep = [i for i, r in enumerate(admitted) if not self._finished(r)]
        finished = [(r.key, self._generation(r)) for i, r in enumerate(admitted) if i not in set(keep)]
        if keep:
            index = torch.tensor(keep, device=device)
            cache = self._select(cache, index)  # the model filled it in place
            self._join(cache, mask[keep].to(device), [admitted[i] for i in keep], [tokens[i] for i in keep])
        return finished

    def _decode(self) -> list[tuple[Any, Generation]]:
        """One token of every running row; finished rows leave the batch."""
        device = self._model_device()
        batch = len(self.rows)
        self.mask = torch.cat([self.mask, torch.ones(batch, 1, dtype=self.mask.dtype, device=device)], dim=1)
        positions = torch.tensor([[r.next_position] for r in self.rows], dtype=torch.long, device=device)
        out = self.model(
            input_ids=torch.tensor(self.pending, dtype=torch.long, device=device).view(batch, 1),
            attention_mask=self.mask, position_ids=positions, use_cache=True, **{self._cache_arg: self.cache},
        )
        for r in self.rows:
            r.next_position += 1
        self.pending = self._sample(out.logits[:, -1, :], self.rows)
        keep = [i for i, r in enumerate(self.rows) if not self._finished(r)]
        finished = [(r.key, self._generation(r)) for i, r in enumerate(self.rows) if i not in set(keep)]
        if len(keep) < batch:
            self._drop(keep)
        return finished

    # ------------------------------------------------------------------ sampling and stopping
    def _sample(self, logits: torch.Tensor, rows: list[_Request]) -> list[int]:
        """Each row's next token from ``logits`` ``(B, V)``, drawn with its own generator; appends
        the token and its log-prob to the row. Rows with the same parameters are done together."""
        logits = logits.float().cpu()
        chosen = [0] * len(rows)
        groups: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(rows):
            groups.setdefault(r.params, []).append(i)
        for params, idx in groups.items():
            greedy = params.temperature <= 0
            scaled = logits[idx] if greedy else logits[idx] / params.temperature
            log_probs = torch.log_softmax(scaled, dim=-1)  # the contract: before any filter or block
            blocked = [j for j, i in enumerate(idx) if len(rows[i].tokens) < params.min_new_tokens and rows[i].stop_ids]
            if blocked:  # no stop token before min_new_tokens
                scaled = scaled.clone()
                for j in blocked:
                    scaled[j, list(rows[idx[j]].stop_ids)] = float("-inf")
            if greedy:
                picks = scaled.argmax(dim=-1).tolist()
            else:
                probs = filtered_probs(scaled, params.top_k, params.top_p)
                picks = [int(torch.multinomial(probs[j], 1, generator=rows[i].generator)) for j, i in enumerate(idx)]
            for j, i in enumerate(idx):
                tok = int(picks[j])
                chosen[i] = tok
                rows[i].tokens.append(tok)
                rows[i].log_probs.append(float(log_probs[j, tok]))
        return chosen

    def _stopped(self, r: _Request) -> bool:
        """Whether the row's last token ends it by a stop (a stop token or a completed stop string)."""
        if len(r.tokens) < r.params.min_new_tokens:
            return False
        if r.tokens[-1] in r.stop_ids:
            return True
        if r.stop_strings:  # a stop string the last token completed
            window = 4 * max(len(s) for s in r.stop_strings) + 4
            tail = self.tokenizer.decode(r.tokens[-window:], skip_special_tokens=False)
            before = self.tokenizer.decode(r.tokens[-window:-1], skip_special_tokens=False)
            return any(s in tail and s not in before for s in r.stop_strings)
        return False

    def _finished(self, r: _Request) -> bool:
        return len(r.tokens) >= r.params.max_new_tokens or self._stopped(r)

    def _generation(self, r: _Request) -> Generation:
        return Generation(list(r.tokens), list(r.log_probs), "stop" if self._stopped(r) else "length")

    def _stop_sets(self, stop: Sequence[str]) -> tuple[frozenset[int], tuple[str, ...]]:
        """Stop strings that are one token become stop ids (with EOS); the rest stay strings."""
        key = tuple(stop)
        if key not in self._stops:
            single, multi = split_stops(self.tokenizer, stop)
            self._stops[key] = (frozenset(self.eos_ids + single), tuple(multi))
        return self._stops[key]

    # ------------------------------------------------------------------ the cache
    @staticmethod
    def _layers(cache) -> list:
        try:
            # heavy: transformers, see cache_argument; absent before its per-layer caches
            from transformers.cache_utils import DynamicLayer
        except ImportError as err:  # transformers before per-layer caches
            raise NotImplementedError(
                "rollout.schedule=episode on the transformers engine needs transformers with per-layer KV caches "
                "(cache_utils.DynamicLayer, 4.56 or newer); use rollout.schedule=lockstep"
            ) from err
        layers = list(cache.layers)
        for layer in layers:
            if type(layer) is not DynamicLayer:
                raise NotImplementedError(
                    f"rollout.schedule=episode on the transformers engine joins rows of plain KV caches; this "
                    f"model's cache has a {type(layer).__name__} layer (use rollout.schedule=lockstep)"
                )
        return layers

    def _select(self, cache, index: torch.Tensor):
        for layer in self._layers(cache):
            layer.keys, layer.values = layer.keys[index], layer.values[index]
        return cache

    def _join(self, cache, mask: torch.Tensor, rows: list[_Request], pending: list[int]) -> None:
        """Add ``rows`` (their cache and mask) to the running batch."""
        if self.cache is None or not self.rows:
            self.cache, self.mask, self.rows, self.pending = cache, mask, list(rows), list(pending)
            return
        width = max(self.mask.shape[1], mask.shape[1])
        for old, new in zip(self._layers(self.cache), self._layers(cache)):
            old.keys = torch.cat([_left_pad(old.keys, width), _left_pad(new.keys, width)], dim=0)
            old.values = torch.cat([_left_pad(old.values, width), _left_pad(new.values, width)], dim=0)
        self.mask = torch.cat([_left_pad(self.mask, width), _left_pad(mask, width)], dim=0)
        self.rows += rows
        self.pending += pending

    def _drop(self, keep: list[int]) -> None:
        """Keep only the rows ``keep``; trim the columns no kept row uses."""
        self.rows = [self.rows[i] for i in keep]
        self.pending = [self.pending[i] for i in keep]
        if not keep:
            self.cache, self.mask = None, None
            return
        index = torch.tensor(keep, device=self.mask.device)
        self.mask = self.mask[index]
        used = self.mask.any(dim=0)
        first = int(used.float().argmax())  # the first column some row uses
        for layer in self._layers(self.cache):
            layer.keys, layer.values = layer.keys[index, :, first:], layer.values[index, :, first:]
        self.mask = self.mask[:, first:]
