"""Forward passes that score tokens: log-probs and entropies aligned with ``input_ids``.

Position ``t`` of the outputs scores ``input_ids[:, t]`` given the tokens before it; position 0
has no context and is 0. Only positions under ``response_mask`` are ever used.
"""

from __future__ import annotations

import functools
import inspect

import torch


def token_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] without materialising the full log-softmax twice.

    Args:
        logits: (B, T, V) float.
        labels: (B, T) long.
    Returns:
        (B, T) float32.
    """
    logits = logits.float()
    return logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per position: (B, T, V) -> (B, T)."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def greedy_hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Whether the most likely token is the label: (B, T, V), (B, T) -> (B, T) bool.

    A tie counts as a hit only when the label is the first of the tied tokens (``argmax``'s pick),
    so a hit is exactly what greedy decoding would have written.
    """
    return logits.argmax(dim=-1) == labels


def _accepts_logits_to_keep(model) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (transformers causal LMs since 4.50;
    a PEFT wrapper passes it on to the model it wraps)."""
    inner = getattr(model, "get_base_model", lambda: model)()
    return _forward_takes_logits_to_keep(type(inner))


@functools.lru_cache(maxsize=None)
def _forward_takes_logits_to_keep(cls: type) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


def response_window(response_mask: torch.Tensor) -> tuple[int, int]:
    """The prediction positions ``[lo, hi)`` that score every masked token of a (B, L) batch.

    Token ``t`` is predicted at position ``t - 1``, so the window is ``[first masked column - 1,
    last masked column)``; ``(0, 0)`` when nothing is masked.
    """
    cols = torch.nonzero(response_mask[:, 1:].sum(0) > 0).flatten()
    if cols.numel() == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


def _next_token_logits(model, batch: dict[str, torch.Tensor], window: tuple[int, int] | None = None) -> torch.Tensor:
    """(B, L-1, V): position ``t`` predicts ``input_ids[:, t + 1]``; with ``window = (lo, hi)``
    only positions ``lo..hi-1`` (B, hi-lo, V), computed by the LM head alone: the prompt
    positions of a turn sample need no vocabulary projection."""
    kwargs = {}
    if window is not None:
        kwargs["logits_to_keep"] = torch.arange(window[0], window[1], device=batch["input_ids"].device)
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
        **kwargs,
    )
    return out.logits if window is not None else out.logits[:, :-1]


def forward_greedy_hits(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and greedy hits of ``batch['input_ids']`` under ``model`` (teacher forcing).

    Returns:
        log_probs (B, L) float and hits (B, L) bool (see ``greedy_hits``), 0 / False at position 0.
    """
    logits = _next_token_logits(model, batch)
    labels = batch["input_ids"][:, 1:]
    logp = token_log_probs(logits, labels)
    hits = greedy_hits(logits, labels)
    log_probs = torch.cat([logp.new_zeros(logp.shape[0], 1), logp], dim=1)
    return log_probs, torch.cat([hits.new_zeros(hits.shape[0], 1), hits], dim=1)


def forward_log_probs(
    model, batch: dict[str, torch.Tensor], temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Score ``batch['input_ids']`` under ``model``.

    Args:
        batch: ``input_ids``, ``attention_mask``, ``position_ids`` of shape (B, L); with a
            ``response_mask`` only the window of columns from the first to the last response
            token is scored (the LM head and softmax skip the prompt before it, which no loss
            reads); columns outside the window are 0.
        temperature: logits are divided by it (the rollout's sampling temperature).
    Returns:
        log_probs (B, L) and, if asked, entropy (B, L), both 0 at position 0.
    """
    width = batch["input_ids"].shape[1]
    window = None
    if "response_mask" in batch and _accepts_logits_to_keep(model):
        window = response_window(batch["response_mask"])
        if window[1] - window[0] >= width - 1:
            window = None  # the whole row: the plain call
    logits = _next_token_logits(model, batch, window)
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    lo, hi = window if window is not None else (0, width - 1)
    logp = token_log_probs(logits, batch["input_ids"][:, lo + 1 : hi + 1])
    log_probs = _place(logp, lo, width)
    if not with_entropy:
        return log_probs, None
    return log_probs, _place(entropy_from_logits(logits), lo, width)


def _place(values: torch.Tensor, lo: int, width: int) -> torch.Tensor:
    """(B, n) values of prediction positions ``lo..lo+n-1`` as (B, width) per scored token
    (token ``lo + 1 + j``), zero elsewhere."""
    b, n = values.shape
    left = values.new_zeros(b, lo + 1)
    right = values.new_zeros(b, width - lo - 1 - n)
    return torch.cat([left, values, right], dim=1)
