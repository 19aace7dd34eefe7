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
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    logits = out.logits[:, :-1]
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = token_log_probs(logits, batch["input_ids"][:, 1:])
    zero = logp.new_zeros(logp.shape[0], 1)
    log_probs = torch.cat([zero, logp], dim=1)
    if not with_entropy:
        return log_probs, None
    return log_probs, torch.cat([zero, entropy_from_logits(logits)], dim=1)
