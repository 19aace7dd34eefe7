"""Forward passes that score tokens: log-probs and entropies aligned with ``input_ids``.

Position ``t`` of the outputs scores ``input_ids[:, t]`` given the tokens before it; position 0
has no context and is 0. Only positions under ``response_mask`` are ever used.
"""

from __future__ import annotations

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


def _next_token_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, L-1, V): position ``t`` predicts ``input_ids[:, t + 1]``."""
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    return out.logits[:, :-1]


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
        batch: ``input_ids``, ``attention_mask``, ``position_ids`` of shape (B, L).
        temperature: logits are divided by it (the rollout's sampling temperature).
    Returns:
        log_probs (B, L) and, if asked, entropy (B, L), both 0 at position 0.
    """
    logits = _next_token_logits(model, batch)
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = token_log_probs(logits, batch["input_ids"][:, 1:])
    zero = logp.new_zeros(logp.shape[0], 1)
    log_probs = torch.cat([zero, logp], dim=1)
    if not with_entropy:
        return log_probs, None
    return log_probs, torch.cat([zero, entropy_from_logits(logits)], dim=1)
