"""The occupancy-aware autotuner: space, static pruning, strategies, measurement with verification, cache."""
