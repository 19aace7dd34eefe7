"""Forward passes that score tokens: log-probs and entropies aligned with ``input_ids``.

Position ``t`` of the outputs scores ``input_ids[:, t]`` given the tokens before it; position 0
has no context and is 0. With a ``response_mask`` in the batch only the tokens under it are scored
and every other position is 0; without one every token after the first is.

The vocabulary is never projected for every token at once. The model runs up to its LM head; a
forward pre-hook on the head takes the final hidden states of the scored positions, (M, h), and
projects them ``chunk_tokens`` rows at a time: each chunk's (n, V) logits live only while that
chunk is scored, and under autograd each chunk is a non-reentrant checkpoint whose backward
recomputes its logits. The peak is therefore a few copies of one (chunk_tokens, V) block instead
of six fp32 copies of (N, V) (``arl.plan.memory.logits_bytes``). The head is called as the
model calls it (a LoRA head, a tied embedding, autocast and FSDP2's gathered root parameters all
apply), inside the model's own forward. The head itself then projects an empty input, and a
forward hook makes the scores its output, so they leave the model as its ``logits``: wrappers that
act on a model's outputs see them (FSDP2 gathers the root's parameters again in the backward when
the gradient reaches its outputs, before the chunks recompute their logits).
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

import torch
from torch.utils.checkpoint import checkpoint

# rows of hidden states projected onto the vocabulary at once: with Qwen3's 151,936 tokens a fp32
# (1024, V) block is 0.58 GiB (model.logit_chunk_tokens sets it per run)
CHUNK_TOKENS = 1024


def token_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] without materialising the full log-softmax twice.

    Args:
        logits: (..., V) float.
        labels: (...) long.
    Returns:
        (...) float32, never above 0 (logsumexp is at least the largest logit).
    """
    logits = logits.float()
    return logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per position: (..., V) -> (...)."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def greedy_hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Whether the most likely token is the label: (..., V), (...) -> (...) bool.

    A tie counts as a hit only when the label is the first of the tied tokens (``argmax``'s pick),
    so a hit is exactly what greedy decoding would have written.
    """
    return logits.argmax(dim=-1) == labels


def _accepts_logits_to_keep(model) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (transformers causal LMs since 4.50;
    a PEFT wrapper passes it on to the model it wraps)."""
    inner = getattr(model, "get_base_model", lambda: model)()
    return _forward_takes_logits_to_keep(type(inner))


@functools.cache
def _forward_takes_logits_to_keep(cls: type) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------ one chunk of positions
def _chunk_scores(head, hidden: torch.Tensor, labels: torch.Tensor, temperature: float, what: str) -> torch.Tensor:
    """Score ``n`` positions from their final hidden states.

    Args:
        head: the LM head module, called through ``forward`` (the pre-hook that hands the hidden
            states over sits on its ``__call__``).
        hidden: (n, h); labels: (n,) long.
        what: ``logp``: (n,) log-probs; ``logp+entropy``: (2, n), log-probs and entropies;
            ``logp+hits``: (2, n), log-probs and greedy hits as 0. / 1.
    """
    logits = head.forward(hidden)
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = token_log_probs(logits, labels)
    if what == "logp":
        return logp
    second = entropy_from_logits(logits) if what == "logp+entropy" else greedy_hits(logits, labels).to(logp.dtype)
    return torch.stack([logp, second])


SCORES = ("logp", "logp+entropy", "logp+hits")


def chunked_scores(
    head, hidden: torch.Tensor, labels: torch.Tensor, temperature: float, what: str, chunk_tokens: int
) -> torch.Tensor:
    """:func:`_chunk_scores` over (M, h) hidden states, ``chunk_tokens`` rows at a time.

    Under autograd each chunk is a non-reentrant checkpoint: its forward keeps only the chunk's
    hidden states (a view of ``hidden``) and its results, and its backward recomputes the chunk's
    logits, so at most one chunk's logits and their gradients are alive at once.

    Returns:
        (M,) for ``logp``, else (2, M) (see :func:`_chunk_scores`).
    """
    if what not in SCORES:
        raise ValueError(f"what={what!r}; valid: {', '.join(SCORES)}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    if hidden.shape[0] <= chunk_tokens:  # one chunk (or none): nothing to save by checkpointing it
        return _chunk_scores(head, hidden, labels, temperature, what)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    parts = []
    for start in range(0, hidden.shape[0], chunk_tokens):
        args = (head, hidden[start : start + chunk_tokens], labels[start : start + chunk_tokens], temperature, what)
        parts.append(checkpoint(_chunk_scores, *args, use_reentrant=False) if grad else _chunk_scores(*args))
    return torch.cat(parts, dim=-1)


# ------------------------------------------------------------------ the model's forward
# config keys of architectures that transform the head's output before it is a logit: the scoring
# projects the hidden states itself and would miss the transformation
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


@contextmanager
def _scoring_head(model, score):
    """Within the block, the model's LM head hands its input (B, n, h) to ``score``, projects an
    empty input instead, and outputs what ``score`` returned (the model's ``logits``)."""
    head = model.get_output_embeddings()
    if head is None:
        raise TypeError(f"{type(model).__name__} has no output embeddings (get_output_embeddings() is None): "
                        "scoring needs a causal LM whose head projects hidden states onto the vocabulary")
    config = getattr(model, "config", None)
    for key in _LOGIT_TRANSFORMS:
        if getattr(config, key, None) not in (None, 1, 1.0):
            raise NotImplementedError(f"{type(model).__name__} sets {key}={getattr(config, key)}: its logits are "
                                      "not the head's output, which arl.modules.forward scores")

    scores: list[torch.Tensor] = []

    def pre_hook(module, args, kwargs):
        hidden = args[0] if args else kwargs.pop("input")
        scores.append(score(head, hidden))
        return (hidden[:, :0],), kwargs

    def post_hook(module, args, output):
        return scores[-1]

    handles = [head.register_forward_pre_hook(pre_hook, with_kwargs=True), head.register_forward_hook(post_hook)]
    try:
        yield scores
    finally:
        for handle in handles:
            handle.remove()


def _scored_positions(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, L-1) bool: prediction position ``t`` scores token ``t + 1`` (under ``response_mask`` if
    the batch has one, else every token after the first)."""
    ids = batch["input_ids"]
    if "response_mask" in batch:
        return batch["response_mask"][:, 1:] > 0
    return torch.ones(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool, device=ids.device)


def score_tokens(
    model, batch: dict[str, torch.Tensor], what: str = "logp", temperature: float = 1.0,
    chunk_tokens: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """Run ``model`` on ``batch`` and score its tokens chunk by chunk (see the module docstring).

    Args:
        batch: ``input_ids``, ``attention_mask``, ``position_ids`` (B, L) and optionally
            ``response_mask`` (B, L): the tokens to score.
        what: see :func:`_chunk_scores`; temperature: the logits are divided by it.
    Returns:
        (B, L) float32 for ``logp``, else (2, B, L); 0 at position 0 and wherever not scored.
    """
    ids = batch["input_ids"]
    b, width = ids.shape
    scored = _scored_positions(batch)  # (B, L-1)
    columns = torch.nonzero(scored.any(0)).flatten()
    lo, hi = (int(columns[0]), int(columns[-1]) + 1) if columns.numel() else (0, 0)
    keep = _accepts_logits_to_keep(model)
    kwargs = {"logits_to_keep": torch.arange(lo, hi, device=ids.device)} if keep else {}
    labels = ids[:, 1:][scored]  # (M,) in row-major order, as boolean indexing of hidden below

    def score(head, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: (B, hi - lo, h) with logits_to_keep, else (B, L, h): every position
        where = scored[:, lo:hi] if keep else torch.cat([scored, scored.new_zeros(b, 1)], dim=1)
        return chunked_scores(head, hidden[where], labels, temperature, what, chunk_tokens)

    with _scoring_head(model, score) as calls:
        out = model(input_ids=ids, attention_mask=batch["attention_mask"], position_ids=batch["position_ids"],
                    use_cache=False, **kwargs)
    if len(calls) != 1:
        raise RuntimeError(f"{type(model).__name__}'s forward called its LM head {len(calls)} times; scoring expects once")
    values = out.logits.reshape(1 if what == "logp" else 2, labels.shape[0])  # (1 or 2, M)
    zeros = values.new_zeros(b, width - 1)
    placed = torch.stack([torch.cat([values.new_zeros(b, 1), zeros.masked_scatter(scored, row)], dim=1) for row in values])
    return placed[0] if what == "logp" else placed


def forward_greedy_hits(
    model, batch: dict[str, torch.Tensor], chunk_tokens: int = CHUNK_TOKENS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and greedy hits of ``batch['input_ids']`` under ``model`` (teacher forcing).

    Returns:
        log_probs (B, L) float and hits (B, L) bool (see ``greedy_hits``), 0 / False at position 0
        and at positions not scored (see :func:`score_tokens`).
    """
    log_probs, hits = score_tokens(model, batch, "logp+hits", chunk_tokens=chunk_tokens)
    return log_probs, hits > 0.5


def forward_log_probs(
    model, batch: dict[str, torch.Tensor], temperature: float = 1.0, with_entropy: bool = False,
    chunk_tokens: int = CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Score ``batch['input_ids']`` under ``model``.

    Args:
        batch: ``input_ids``, ``attention_mask``, ``position_ids`` of shape (B, L); with a
            ``response_mask`` only the tokens under it are scored, the others are 0.
        temperature: logits are divided by it (the rollout's sampling temperature).
        chunk_tokens: positions projected onto the vocabulary at once (``model.logit_chunk_tokens``).
    Returns:
        log_probs (B, L) and, if asked, entropy (B, L), both 0 at position 0.
    """
    if not with_entropy:
        return score_tokens(model, batch, "logp", temperature, chunk_tokens), None
    log_probs, entropy = score_tokens(model, batch, "logp+entropy", temperature, chunk_tokens)
    return log_probs, entropy
