"""``iter_full_tensors``: the streamed weight sync's source (plain module here; the FSDP2 case runs
in the two-process lanes and bench/weight_sync.py)."""

from __future__ import annotations

import torch

from arl.utils.fsdp import iter_full_tensors


def test_every_state_dict_name_once_and_tied_tensors_from_one_gather(tiny):
    model, _ = tiny
    assert model.config.tie_word_embeddings  # the embedded default ties its LM head
    stream = list(iter_full_tensors(model))
    names = [n for n, _ in stream]
    assert sorted(names) == sorted(model.state_dict()) and len(names) == len(set(names))
    got = dict(stream)
    head, embed = got["lm_head.weight"], got["model.embed_tokens.weight"]
    assert head.data_ptr() == embed.data_ptr()  # one tensor under both names, not a second gather
    # the alias comes right after its source, so a consumer can let it go before the next gather
    assert names.index("lm_head.weight") == names.index("model.embed_tokens.weight") + 1
    state = model.state_dict()
    assert all(torch.equal(t, state[n]) for n, t in stream)


def test_untied_model_streams_its_state_dict_in_order():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.LayerNorm(3))
    assert [n for n, _ in iter_full_tensors(net)] == list(net.state_dict())
