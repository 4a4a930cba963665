"""Benchmarks of the sweep engine (``python -m benchmarks.run``); not part of the test suite."""
