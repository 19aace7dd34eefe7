"""LoRA adapters merged into a weight stream (:mod:`arl.distributed.lora_stream`), the way vLLM gets a
LoRA policy's weights: against peft's own merge on the tiny model, in any stream order, and the
model's outputs."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.distributed.lora_stream import lora_scalings, merge_lora_stream
from arl_testing import lora_config, model_config

peft = pytest.importorskip("peft")

LORA = lora_config(enabled=True, r=4, alpha=12, dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])


@pytest.fixture(scope="module")
def adapted(tiny_path):
    """A peft model of the tiny model with trained-looking (non-zero) adapters."""
    from arl.models.loading import load_from_config

    model, _, _ = load_from_config(model_config("hf", path=str(tiny_path), gradient_checkpointing=False, lora=LORA))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def test_scalings_are_alpha_over_r_for_every_adapted_layer(adapted):
    scalings = lora_scalings(adapted)
    layers = adapted.get_base_model().config.num_hidden_layers
    assert len(scalings) == 3 * layers  # q_proj, v_proj, down_proj of every block
    assert set(scalings.values()) == {12 / 4}
    assert all(k.startswith("base_model.model.model.layers.") for k in scalings)
    assert lora_scalings(torch.nn.Linear(2, 2)) == {}


def test_the_merged_stream_is_peft_merge(adapted):
    """Every base weight of the stream equals W + scale B A as peft computes it (its
    merged_state_dict, the HF export); the factors are gone; the rest passes through unchanged."""
    from arl.models.lora import merged_state_dict

    want = merged_state_dict(adapted)
    got = dict(merge_lora_stream(adapted.state_dict().items(), lora_scalings(adapted)))
    assert not any("lora_" in k for k in got)
    renamed = {k.replace("base_model.model.", "", 1).replace(".base_layer.", "."): v for k, v in got.items()}
    assert set(want) <= set(renamed)
    for key, value in want.items():
        torch.testing.assert_close(renamed[key], value, rtol=0, atol=1e-6, msg=key)
    assert any(not torch.equal(renamed[k], adapted.get_base_model().state_dict()[k.replace("q_proj.", "q_proj.base_layer.")])
               for k in want if "q_proj" in k)  # the adapters did change something


def test_the_merged_weights_compute_what_the_adapted_model_computes(adapted, tiny_path):
    from arl.models.loading import load_policy

    plain, _ = load_policy(tiny_path)
    merged = {k.replace("base_model.model.", "", 1).replace(".base_layer.", "."): v
              for k, v in merge_lora_stream(adapted.state_dict().items(), lora_scalings(adapted))}
    plain.load_state_dict(merged, strict=False)
    ids = torch.randint(0, plain.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, adapted(input_ids=ids).logits, rtol=0, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_the_stream_order_does_not_matter(adapted, seed):
    """The parts of a layer may come in any order (A before W ...): the same merged tensors come out."""
    pairs = list(adapted.state_dict().items())
    scalings = lora_scalings(adapted)
    want = dict(merge_lora_stream(pairs, scalings))
    random.Random(seed).shuffle(pairs)
    got = dict(merge_lora_stream(pairs, scalings))
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_a_layer_missing_a_part_is_an_error(adapted):
    pairs = [(k, v) for k, v in adapted.state_dict().items() if not k.endswith("layers.0.self_attn.q_proj.lora_B.default.weight")]
    with pytest.raises(ValueError, match=r"layers\.0\.self_attn\.q_proj ended with only \['A', 'W'\]"):
        list(merge_lora_stream(pairs, lora_scalings(adapted)))


def test_by_hand_and_without_scalings():
    w, a, b = torch.zeros(2, 3), torch.tensor([[1.0, 0.0, -1.0]]), torch.tensor([[2.0], [1.0]])
    pairs = [("m.lora_B.x.weight", b), ("m.base_layer.weight", w), ("m.base_layer.bias", torch.ones(2)),
             ("m.lora_A.x.weight", a)]
    out = list(merge_lora_stream(pairs, {"m": 0.5}))
    # the bias passes through at once; W comes when A arrives: 0.5 * [[2], [1]] @ [[1, 0, -1]]
    assert [k for k, _ in out] == ["m.base_layer.bias", "m.base_layer.weight"]
    assert torch.equal(out[1][1], torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.0, -0.5]]))
    assert list(merge_lora_stream(pairs, {})) == pairs  # no LoRA layer: unchanged
