"""JAX's import, without the metadata it reads and then ignores.

jax 0.10's ``jax._src.numpy.array_constructors`` looks for a ROCm plugin when it is imported: it
parses the metadata file of every installed distribution (``importlib.metadata.distributions()``,
145 in this project's environment) and keeps only one named ``jax-rocm…-plugin``. Under
``narrowed_plugin_scan()`` that loop sees only the distributions whose name, read from their
folder's name without opening a file, starts with ``jax_rocm`` (names normalised: ``-`` and ``.``
as ``_``, lower case), and every distribution whose name cannot be told that way: a ROCm plugin is
found as before, the other files are not parsed (0.04–0.06 s of CPU per process, measured with
``benchmarks/README.md``'s ratio runs). It changes nothing once JAX is imported. Only ``import jax``
runs under it (``import_jax``): JAX starts no backend on import, so its look for plugins by entry
point, at a backend's start, sees every distribution.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import Distribution

ROCM_PREFIX = "jax_rocm"  # jax's own test: Name starts with "jax-rocm" and ends with "-plugin"


def maybe_rocm(dist: Distribution) -> bool:
    """Whether ``dist`` may be a ROCm plugin of JAX: its normalised name from its folder starts with
    ``jax_rocm``, or its name cannot be told without reading its metadata."""
    name = getattr(dist, "_normalized_name", None)
    return not isinstance(name, str) or name.startswith(ROCM_PREFIX)


def import_jax() -> None:
    """Import JAX with its look for a ROCm plugin narrowed (``narrowed_plugin_scan``), and nothing
    else: the block holds no backend's start, whose look for plugins by entry point
    (``importlib.metadata.entry_points``, which reads ``distributions()`` too) must see them all."""
    with narrowed_plugin_scan():
        # lazy: JAX itself, inside the narrowed scan (the import is the point: later imports find it)
        import jax  # noqa: F401


@contextlib.contextmanager
def narrowed_plugin_scan() -> Iterator[None]:
    """Import JAX inside this block, and nothing more (``import_jax``): its look for a ROCm plugin
    skips the distributions that cannot be one (``maybe_rocm``). Without effect when JAX is
    already imported."""
    if "jax" in sys.modules:
        yield
        return
    # importing importlib.metadata (and the email package it reads metadata with) costs ~0.05 s,
    # which `--help` and the other commands that never start JAX do not pay
    import importlib.metadata  # lazy: a start-up cost (~0.05 s)

    everything = importlib.metadata.distributions

    def distributions(**kwargs) -> Iterator[Distribution]:
        return (dist for dist in everything(**kwargs) if maybe_rocm(dist))

    importlib.metadata.distributions = distributions
    try:
        yield
    finally:
        importlib.metadata.distributions = everything
