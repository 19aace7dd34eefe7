"""The embedded model: deterministic build, cache reuse, tokenizer round trip, HF loading."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from arl.models.tiny import FORMAT_TOKENS, TinyConfig
from arl.run.builders import tiny_model


def test_tokenizer_round_trip_and_format_tokens(tiny):
    _, tok = tiny
    text = "<think>plan: up left</think><action>up</action>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == text
    for tag in FORMAT_TOKENS:  # each tag is one token
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1
    grid = "######\n#_PX_#\n#_O__#\n######"
    assert tok.decode(tok(grid, add_special_tokens=False)["input_ids"]) == grid
    # board cells are one token each, so a model can read the grid cell by cell
    assert len(tok("#_PX_#", add_special_tokens=False)["input_ids"]) == 6
    # arbitrary unicode stays encodable (byte-level BPE)
    odd = "naïve 東京 🙂 \x00"
    assert tok.decode(tok(odd, add_special_tokens=False)["input_ids"]) == odd


def test_chat_template(tiny):
    _, tok = tiny
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_model_is_a_few_million_qwen3(tiny):
    model, tok = tiny
    assert type(model).__name__ == "Qwen3ForCausalLM"
    n = sum(p.numel() for p in model.parameters())
    assert 1e6 < n < 2e7
    assert model.config.vocab_size == len(tok)


def test_cache_reused_and_build_deterministic(tmp_path, tiny_path):
    cfg = TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, head_dim=16, corpus_seeds=20)
    a = tiny_model(cfg, tmp_path / "a")
    b = tiny_model(cfg, tmp_path / "b")
    assert a.name == b.name  # same config -> same cache key
    mtime = (a / "model.safetensors").stat().st_mtime
    assert tiny_model(cfg, tmp_path / "a") == a and (a / "model.safetensors").stat().st_mtime == mtime
    ma = AutoModelForCausalLM.from_pretrained(a)
    mb = AutoModelForCausalLM.from_pretrained(b)
    for (ka, va), (kb, vb) in zip(ma.state_dict().items(), mb.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    ta, tb = AutoTokenizer.from_pretrained(a), AutoTokenizer.from_pretrained(b)
    assert ta.get_vocab() == tb.get_vocab()
    other = tiny_model(TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, head_dim=16, corpus_seeds=20, init_seed=1), tmp_path / "a")
    assert other != a
