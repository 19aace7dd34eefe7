"""Scoring through the LM head chunk by chunk equals the plain full-vocabulary computation.

The reference below projects every position at once (``model(...).logits``) and scores it with the
same pure functions; the chunked path (``arl.modules.forward``) must give the same log-probs,
entropies, greedy hits and gradients, for every chunk size, with a temperature, a response mask,
a tied head and LoRA on the head, and must never hold more than one chunk of logits.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.modules.forward import (
    chunked_scores,
    entropy_from_logits,
    forward_greedy_hits,
    forward_log_probs,
    greedy_hits,
    token_log_probs,
)
from arl.plan.live_bytes import LiveTensorBytes


def _batch(vocab: int, b: int = 3, length: int = 20, seed: int = 0, prompt: int = 6) -> dict[str, torch.Tensor]:
    """Left-padded rows: row i has i padding tokens, a prompt, then response tokens (mask 1)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (b, length), generator=g)
    attention = torch.ones(b, length, dtype=torch.long)
    response = torch.zeros(b, length)
    for i in range(b):
        attention[i, :i] = 0
        ids[i, :i] = 0
        response[i, i + prompt :] = 1.0
    response[0, -2:] = 0.0  # a row whose answer ended early (right padding under the mask's end)
    position = (attention.cumsum(1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": attention, "position_ids": position, "response_mask": response}


def _reference(model, batch, temperature=1.0):
    """(log-probs, entropy, hits), each (B, L), from the full (B, L-1, V) logits, masked as the
    chunked path masks: position 0 and positions outside ``response_mask`` are 0."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], use_cache=False)
    logits = out.logits[:, :-1].float() / temperature
    labels = batch["input_ids"][:, 1:]
    mask = batch["response_mask"][:, 1:] if "response_mask" in batch else torch.ones_like(labels, dtype=torch.float)
    pad = torch.zeros(labels.shape[0], 1)
    logp = torch.cat([pad, token_log_probs(logits, labels) * mask], 1)
    ent = torch.cat([pad, entropy_from_logits(logits) * mask], 1)
    hits = torch.cat([pad.bool(), greedy_hits(logits, labels) & (mask > 0)], 1)
    return logp, ent, hits


@pytest.fixture()
def model(tiny):
    m = copy.deepcopy(tiny[0])
    m.train()
    return m


@pytest.mark.parametrize("chunk", [1, 5, 16, 10_000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_and_entropy_equal_the_full_computation(model, chunk, temperature):
    batch = _batch(model.config.vocab_size)
    with torch.no_grad():
        want_logp, want_ent, _ = _reference(model, batch, temperature)
        logp, ent = forward_log_probs(model, batch, temperature, with_entropy=True, chunk_tokens=chunk)
    torch.testing.assert_close(logp, want_logp, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(ent, want_ent, rtol=1e-6, atol=1e-5)
    assert (logp <= 0).all()


def test_without_a_response_mask_every_token_after_the_first_is_scored(model):
    batch = _batch(model.config.vocab_size)
    del batch["response_mask"]
    with torch.no_grad():
        want, _, _ = _reference(model, batch)
        logp, none = forward_log_probs(model, batch, chunk_tokens=7)
    assert none is None
    torch.testing.assert_close(logp, want, rtol=1e-6, atol=1e-5)
    assert (logp[:, 1:] < 0).all() and (logp[:, 0] == 0).all()


def test_greedy_hits_equal_the_full_computation(model):
    batch = _batch(model.config.vocab_size, b=4, seed=3)
    with torch.no_grad():
        want_logp, _, want_hits = _reference(model, batch)
        logp, hits = forward_greedy_hits(model, batch, chunk_tokens=4)
    assert hits.dtype == torch.bool and torch.equal(hits, want_hits)
    torch.testing.assert_close(logp, want_logp, rtol=1e-6, atol=1e-5)


def _loss(logp, ent, batch):
    m = batch["response_mask"]
    return -(logp * m).sum() / m.sum() - 0.01 * (ent * m).sum() / m.sum()


@pytest.mark.parametrize("chunk", [3, 10_000])
def test_gradients_equal_the_full_computations(model, chunk):
    """The backward recomputes each chunk: every parameter's gradient (the tied embedding/head
    included) equals the plain computation's."""
    batch = _batch(model.config.vocab_size, seed=5)
    twin = copy.deepcopy(model)
    logp, ent = forward_log_probs(model, batch, 0.8, with_entropy=True, chunk_tokens=chunk)
    _loss(logp, ent, batch).backward()
    want_logp, want_ent, _ = _reference(twin, batch, 0.8)
    _loss(want_logp, want_ent, batch).backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_nothing_to_score_still_connects_the_graph(model):
    """A micro-batch with no response token (a padding micro-batch) scores nothing and backward
    still runs (every rank takes part in the same backward under DDP/FSDP)."""
    batch = _batch(model.config.vocab_size)
    batch["response_mask"].zero_()
    logp, ent = forward_log_probs(model, batch, with_entropy=True, chunk_tokens=4)
    assert (logp == 0).all() and (ent == 0).all()
    (logp.sum() + ent.sum()).backward()


def test_the_head_is_left_as_it_was(model):
    """The pre-hook is removed after scoring, also when the forward fails."""
    batch = _batch(model.config.vocab_size)
    head = model.get_output_embeddings()
    with torch.no_grad():
        forward_log_probs(model, batch)
        with pytest.raises(Exception):  # noqa: B017 - any failure of the forward: the hook must go
            forward_log_probs(model, {**batch, "attention_mask": batch["attention_mask"][:, :3]})
    assert not head._forward_pre_hooks
    with torch.no_grad():
        assert model(input_ids=batch["input_ids"][:, :4]).logits.shape[1] == 4


def test_lora_on_the_head_is_scored(tiny):
    """LoRA adapters on the LM head itself: the chunks call the adapted head, and its adapters get
    the gradients the plain computation gives them."""
    peft = pytest.importorskip("peft")
    base = copy.deepcopy(tiny[0])
    base.config.tie_word_embeddings = False
    base.lm_head.weight = torch.nn.Parameter(base.lm_head.weight.detach().clone())
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["lm_head", "q_proj"], init_lora_weights=False)
    model = peft.get_peft_model(base, cfg)
    twin = copy.deepcopy(model)
    batch = _batch(base.config.vocab_size, seed=9)
    logp, ent = forward_log_probs(model, batch, with_entropy=True, chunk_tokens=5)
    _loss(logp, ent, batch).backward()
    want_logp, want_ent, _ = _reference(twin, batch)
    torch.testing.assert_close(logp.detach(), want_logp.detach(), rtol=1e-6, atol=1e-5)
    _loss(want_logp, want_ent, batch).backward()
    trained = [(n, p, q) for (n, p), q in zip(model.named_parameters(), twin.parameters()) if p.requires_grad]
    assert any("lm_head" in n for n, _, _ in trained)
    for name, p, q in trained:
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_a_chunk_of_logits_is_the_most_held_at_once():
    """On a head with a large vocabulary, the peak of live tensor bytes while scoring and
    back-propagating M positions is a few copies of one chunk's logits, not of all M positions'."""
    torch.manual_seed(0)
    m, h, vocab, chunk = 512, 16, 4096, 64
    head = torch.nn.Linear(h, vocab, bias=False)
    hidden = torch.randn(m, h, requires_grad=True)
    labels = torch.randint(0, vocab, (m,))
    peaks = {}
    for name, size in (("chunked", chunk), ("whole", m)):
        with LiveTensorBytes() as counter:
            out = chunked_scores(head, hidden, labels, 1.0, "logp+entropy", size)
            (out[0].sum() + out[1].sum()).backward()
        peaks[name] = counter.peak_bytes
        head.zero_grad(set_to_none=True)
        hidden.grad = None
    block = chunk * vocab * 4  # one fp32 (chunk, V) block
    assert peaks["chunked"] <= 8 * block  # a few copies of one chunk (plus the head's gradient)
    assert peaks["whole"] >= 4 * m * vocab * 4  # the unchunked scoring holds several (M, V) copies
    assert peaks["chunked"] * 4 < peaks["whole"]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(2, 50), st.integers(0, 2**31 - 1),
       st.sampled_from([0.5, 1.0, 1.3]))
def test_chunked_scores_equal_one_chunk_and_never_exceed_zero(m, chunk, vocab, seed, temperature):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(8, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, 8, generator=g) * 5)
    hidden = torch.randn(m, 8, generator=g) * 3
    labels = torch.randint(0, vocab, (m,), generator=g)
    with torch.no_grad():
        whole = chunked_scores(head, hidden, labels, temperature, "logp+entropy", m)
        parts = chunked_scores(head, hidden, labels, temperature, "logp+entropy", chunk)
        hits = chunked_scores(head, hidden, labels, temperature, "logp+hits", chunk)
    torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-4)  # logits up to ~300: fp32 noise
    assert (parts[0] <= 0).all() and (parts[1] >= -1e-5).all()
    assert torch.equal(hits[1].bool(), (head(hidden).argmax(-1) == labels))


def test_bad_arguments_are_refused():
    head = torch.nn.Linear(4, 5)
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_scores(head, torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), 1.0, "logp", 0)
    with pytest.raises(ValueError, match="what="):
        chunked_scores(head, torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), 1.0, "probs", 1)
