"""DataModules: online rollout batches for RL, expert turns for behaviour cloning."""
