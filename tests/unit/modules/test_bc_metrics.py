"""Greedy hits and the BC validation metrics: exact values on hand-made cases, and properties."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.modules.forward import forward_greedy_hits, forward_log_probs, greedy_hits
from arl.modules.sft_module import validation_metrics


def test_greedy_hits_by_hand():
    logits = torch.tensor([[[0.0, 2.0, 1.0], [3.0, 3.0, 0.0], [0.0, 0.0, 5.0]]])
    labels = torch.tensor([[1, 1, 0]])
    # row 0: argmax 1 = label; row 1: a tie between 0 and 1, greedy picks 0, not the label; row 2: 2 != 0
    assert greedy_hits(logits, labels).tolist() == [[True, False, False]]


def test_validation_metrics_by_hand():
    # two samples; the second is all prompt (no response token) and must not count as a match
    log_probs = torch.tensor([[0.0, -0.5, -1.0, -2.0, 0.0], [0.0, -3.0, -3.0, 0.0, 0.0]])
    hits = torch.tensor([[False, True, True, False, True], [False, False, False, False, False]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    metrics, weights = validation_metrics(log_probs, hits, mask)
    assert metrics["bc/val_loss"].item() == 0.75  # (0.5 + 1.0) / 2 response tokens
    assert metrics["bc/val_token_accuracy"].item() == 1.0  # the miss at position 3 is prompt
    assert metrics["bc/val_exact_match"].item() == 1.0  # one scored sample, all hits
    assert weights == {"bc/val_loss": 2, "bc/val_token_accuracy": 2, "bc/val_exact_match": 1}
    hits[0, 2] = False
    metrics, _ = validation_metrics(log_probs, hits, mask)
    assert metrics["bc/val_token_accuracy"].item() == 0.5 and metrics["bc/val_exact_match"].item() == 0.0


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.integers(2, 7), st.integers(0, 2**31 - 1))
def test_exact_match_is_the_share_of_samples_with_every_response_token_a_hit(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    hits = torch.rand(batch, length, generator=g) < 0.7
    mask = (torch.rand(batch, length, generator=g) < 0.6).float()
    mask[0, -1] = 1.0  # at least one scored sample
    metrics, weights = validation_metrics(-torch.rand(batch, length, generator=g), hits, mask)
    per_sample = [bool(hits[i][mask[i].bool()].all()) for i in range(batch) if mask[i].any()]
    assert weights["bc/val_exact_match"] == len(per_sample)
    assert abs(metrics["bc/val_exact_match"].item() - sum(per_sample) / len(per_sample)) < 1e-6
    assert 0.0 <= metrics["bc/val_token_accuracy"].item() <= 1.0 and metrics["bc/val_loss"].item() >= 0.0
    if metrics["bc/val_token_accuracy"].item() == 1.0:
        assert metrics["bc/val_exact_match"].item() == 1.0


def test_a_hit_is_what_greedy_decoding_writes(tiny):
    """On the real tiny model: the greedy continuation scores all hits, and its log-probs match."""
    model, tok = tiny
    prompt = tok("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    batch = {"input_ids": out, "attention_mask": torch.ones_like(out),
             "position_ids": torch.arange(out.shape[1]).unsqueeze(0)}
    with torch.no_grad():
        log_probs, hits = forward_greedy_hits(model, batch)
        reference, _ = forward_log_probs(model, batch)
    assert hits[0, prompt.shape[1]:].all() and not hits[0, 0]
    torch.testing.assert_close(log_probs, reference)
    other = out.clone()
    other[0, -1] = (other[0, -1] + 1) % model.config.vocab_size  # not the greedy token any more
    with torch.no_grad():
        _, hits2 = forward_greedy_hits(model, {**batch, "input_ids": other})
    assert not hits2[0, -1] and hits2[0, prompt.shape[1]:-1].all()
