"""Benchmarks of the sweep engine (``python -m benchmarks.run``); not part of the test suite."""

import os
from pathlib import Path


def child_env(repo: Path | str, **extra: str) -> dict[str, str]:
    """The environment of a benchmark's child process: ``repo`` first on PYTHONPATH, then the
    caller's own PYTHONPATH (packages installed there, as on a machine with a --target site)."""
    path = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}
