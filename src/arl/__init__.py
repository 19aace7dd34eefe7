"""ARL: stable agentic reinforcement learning for LLM agents (Lightning + Hydra)."""

__version__ = "0.1.0"
