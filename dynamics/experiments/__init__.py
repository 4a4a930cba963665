"""Experiments with their own objective: the two low-rank-bottleneck experiments (``bottleneck``)."""
