"""Models: the embedded tiny Qwen3 and loading of any HF folder or hub id."""
