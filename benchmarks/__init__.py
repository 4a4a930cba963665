"""Benchmarks of the sweep engine (``python -m benchmarks.run``); not part of the test suite."""

import os
from pathlib import Path


def child_env(repo: Path | str, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child process: ``base`` (default this process's environment), ``repo``
    first on PYTHONPATH and the inherited PYTHONPATH after it (packages installed there, as on a
    machine with a --target site), then ``extra``. The tests' processes use it too."""
    base = dict(os.environ if base is None else base)
    path = os.pathsep.join(p for p in (str(repo), base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path, **extra}
