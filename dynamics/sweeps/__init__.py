"""Running experiments: sweep planning and ``run_sweep`` / ``run_grid``, device placement, results
files, and the checkpoints behind ``--resume``."""
