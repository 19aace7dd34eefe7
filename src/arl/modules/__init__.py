"""LightningModules: behaviour cloning and agentic RL. They wire parts; they do not contain them."""
