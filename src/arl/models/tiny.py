"""The embedded default model: a tokenizer trained here and a small Qwen3 built from config.

Nothing is downloaded. The tokenizer is a byte-level BPE trained with ``tokenizers`` on text the
environments render (prompts and expert answers), so every string stays encodable; the format
tags (``<think>``, ``</think>``, ``<action>``, ``</action>``) are single added tokens as in Qwen3,
and the grid symbols of Sokoban are split one per token so that a small model can read a board
cell by cell. The model is a ``Qwen3ForCausalLM`` with random weights drawn from a fixed seed.

Both are saved as one HF folder under a cache directory whose name is a hash of everything that
determines them (model config, tokenizer config, corpus), so a changed config builds a new folder
and an unchanged one is reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from arl.models.folders import build_once, save_folder_atomically
from arl.models.templates import TINY_TEMPLATE

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
FORMAT_TOKENS = ["<think>", "</think>", "<action>", "</action>"]
# Characters that are always their own token (board cells, separators).
ISOLATED_CHARS = "#_OX√PS@$.*+|[](){}:,;=0123456789"

# ChatML, as Qwen models use it, with Hermes-style tools (arl.models.templates). ``add_generation_prompt`` opens
# the assistant turn.
CHAT_TEMPLATE = TINY_TEMPLATE
TOKENIZER_VERSION = 1  # bump when the tokenizer recipe changes


@dataclass
class TinyConfig:
    """What determines the embedded model; the cache key hashes all of it."""

    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    init_seed: int = 0
    corpus_envs: list[str] = field(default_factory=lambda: ["sokoban"])
    corpus_seeds: int = 400


def default_cache_dir() -> Path:
    """``$ARL_CACHE`` or ``~/.cache/arl``."""
    return Path(os.environ.get("ARL_CACHE", Path.home() / ".cache" / "arl"))


def _cache_key(cfg: TinyConfig, corpus_digest: str) -> str:
    blob = json.dumps({"cfg": asdict(cfg), "corpus": corpus_digest, "tok": TOKENIZER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def train_tokenizer(corpus: Iterable[str], vocab_size: int):
    """Train a byte-level BPE on ``corpus``; returns a ``PreTrainedTokenizerFast`` with ChatML.

    Deterministic for a given corpus (BPE merges are chosen by count with stable tie-breaking).
    """
    # heavy: models.config and arl.plan import this module at start-up, before any model (no torch/transformers there)
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    isolated = "[" + "".join("\\" + c if c in "[]\\^-" else c for c in ISOLATED_CHARS) + "]"
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(isolated), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=[],
    )
    fast.add_tokens(FORMAT_TOKENS)  # plain added tokens: kept by decode(skip_special_tokens=True)
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_model(cfg: TinyConfig, vocab_size: int, eos_id: int, pad_id: int):
    """A randomly initialised ``Qwen3ForCausalLM`` drawn from ``cfg.init_seed``."""
    # heavy: models.config and arl.plan import this module at start-up, before any model (no torch/transformers there)
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_word_embeddings,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    saved_state = torch.random.get_rng_state()
    torch.manual_seed(cfg.init_seed)
    try:
        model = Qwen3ForCausalLM(config)
    finally:
        torch.random.set_rng_state(saved_state)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    return model


def ensure_tiny(cfg: TinyConfig | None = None, cache_dir: str | Path | None = None,
                corpus: Sequence[str] | None = None) -> Path:
    """Return the HF folder of the embedded model, building it on first use.

    ``corpus``: the texts the tokenizer is trained on (the envs' prompts and answers; their digest
    is part of the cache key): :func:`arl.run.builders.tiny_model` plays them and calls this.
    The folder holds ``config.json``, ``model.safetensors`` and the tokenizer files; it is
    written to a temporary folder first and renamed, so a crash never leaves half a model.
    """
    if corpus is None:
        raise ValueError("ensure_tiny needs the tokenizer corpus: use arl.run.builders.tiny_model(cfg)")
    cfg = cfg or TinyConfig()
    corpus = list(corpus)
    digest = hashlib.sha256("\n\x00".join(corpus).encode()).hexdigest()
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    out = root / f"tiny-{_cache_key(cfg, digest)}"

    def build() -> Path:
        log.info("building the embedded tiny model in %s", out)
        tokenizer = train_tokenizer(corpus, cfg.vocab_size)
        model = build_model(cfg, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
        return save_folder_atomically(out, model, tokenizer, "arl_tiny.json", asdict(cfg), prefix=".building-")

    return build_once(out, lambda f: (f / "config.json").exists() and (f / "model.safetensors").exists(), build)
