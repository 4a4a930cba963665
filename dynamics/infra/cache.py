"""The persistent compilation cache of the command lines: a second run compiles nothing.

``python -m dynamics.run`` and ``python -m figures`` keep JAX's compiled programs on disk,
in ``$MHSIM_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/mhsim/jax`` (default
``~/.cache/mhsim/jax``); ``MHSIM_CACHE_DIR=`` (empty) or ``=off`` or the flag ``--no-cache``
turn it off. Library calls (``run_sweep`` from Python) use it only after ``enable()``.

It is JAX's own cache (``jax_compilation_cache_dir``), so:

- Safe across versions: an entry's key hashes the program, the jaxlib version, the backend
  and its version, the XLA flags, the compile options and the devices, so another JAX (or
  another device split) never loads it; it compiles anew and adds its own entry.
- Safe across concurrent processes: with ``filelock`` installed (a dependency), JAX's LRU
  cache reads and writes every entry under a file lock (and evicts the least recently used
  entries past ``MAX_BYTES``); a process that cannot read an entry compiles instead.
- Every program is cached, however fast it compiled (JAX's default skips those under 1 s,
  and most of this project's compile in less), so that a second run compiles nothing.

The cache is trusted code: as JAX warns, whoever can write to it can run code in your
process, so keep it in your own cache directory.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ENV = "MHSIM_CACHE_DIR"
MAX_BYTES = 2 * 2**30  # LRU eviction past this (an engine program is 0.1-1 MB on disk)


def default_dir() -> Path | None:
    """Where the cache lives unless told otherwise: None when ``MHSIM_CACHE_DIR`` turns it off."""
    value = os.environ.get(ENV)
    if value is not None:
        value = value.strip()
        return None if value in ("", "off") else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "mhsim" / "jax"


def enable(path: str | Path | None) -> Path | None:
    """Keep compiled programs in ``path`` from now on, or none when ``path`` is None; returns it.

    Takes effect for the programs compiled afterwards, also in a process that has compiled
    before (JAX decides once per process whether to use its cache: this makes it decide again).
    """
    import jax  # lazy: JAX: the command line sets the cache before it loads JAX
    from jax.experimental.compilation_cache import compilation_cache as cc  # lazy: JAX, as above

    cc.reset_cache()
    jax.config.update("jax_enable_compilation_cache", path is not None)
    if path is None:
        return None
    try:
        # lazy: JAX locks the entries with it when eviction is on
        import filelock  # noqa: F401  (JAX locks the entries with it when eviction is on)

        max_bytes = MAX_BYTES
    except ImportError:
        max_bytes = -1  # JAX evicts only with filelock: unbounded, and writes without a lock
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_compilation_cache_max_size", max_bytes)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size floor
    return Path(path)


def add_flag(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The ``--no-cache`` flag (applied by ``apply``)."""
    p.add_argument(
        "--no-cache",
        action="store_true",
        help=f"compile every program anew and keep none on disk (default: reuse them from ${ENV}, "
        f"else $XDG_CACHE_HOME/mhsim/jax, else ~/.cache/mhsim/jax; {ENV}=off turns the cache off)",
    )


def apply(args: argparse.Namespace) -> Path | None:
    """The cache the command line asks for: on in ``default_dir()`` unless ``--no-cache``."""
    return enable(None if getattr(args, "no_cache", False) else default_dir())
