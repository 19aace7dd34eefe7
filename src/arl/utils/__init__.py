"""True utilities used across rooms: config errors and containers, the config schema helpers,
metric reductions over ranks, the console, timing, where a run's validation episodes lie."""
