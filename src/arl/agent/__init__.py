"""The agent: strict output parsing, prompt rendering, the multi-turn loop, training samples."""
