"""The transformers engine's streamed weight load (``HFEngine.load_weights``), used by the FSDP2
weight sync: every tensor copied in place, tied weights once, a wrong or missing name an error."""

from __future__ import annotations

import copy

import pytest
import torch

from arl.rollout.hf_engine import HFEngine


def test_load_weights_copies_a_stream_in_place(tiny):
    model, tok = tiny
    engine = HFEngine(copy.deepcopy(model), tok)
    before = {k: v.data_ptr() for k, v in engine.model.state_dict().items()}
    new = {k: v + 0.5 for k, v in model.state_dict().items()}
    # a stream that gives the tied LM head once (under the embedding's name), as iter_full_tensors does
    seen, stream = set(), []
    for k, v in model.state_dict().items():
        if v.data_ptr() not in seen:
            seen.add(v.data_ptr())
            stream.append((k, new[k]))
    engine.load_weights(iter(stream))
    after = engine.model.state_dict()
    assert all(torch.equal(after[k], new[k]) for k in new)
    assert {k: v.data_ptr() for k, v in after.items()} == before  # in place: the engine's own storage


def test_load_weights_names_a_stranger_and_what_is_missing(tiny):
    model, tok = tiny
    engine = HFEngine(copy.deepcopy(model), tok)
    items = list(model.state_dict().items())
    with pytest.raises(KeyError, match="has no 'nope.weight'"):
        engine.load_weights([("nope.weight", torch.zeros(1))])
    dropped = next(k for k, _ in items if "norm" in k)
    with pytest.raises(KeyError, match=f"no value came for.*{dropped}"):
        engine.load_weights([(k, v) for k, v in items if k != dropped])
