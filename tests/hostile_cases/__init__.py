"""Helpers of tests/test_hostile.py: an independent float64 numpy reference of the model and its
training (reference.py) and the rule that decides each hostile case (outcome.py)."""
