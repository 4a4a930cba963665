"""Where a sweep runs: the CPU split, device selection, and placing batches on a device mesh.

The engine compiles programs for a one-axis mesh (``engine.BATCH_AXIS``); this module builds
that mesh from the chosen devices, splits the CPU into one JAX device per core, and moves
batches, data and results between the host and the devices.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dynamics.core.data import Data
from dynamics.core.engine import BATCH_AXIS, float_dtype
from dynamics.core.program import Batch


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def split_cpu(n: int | None = None) -> int | None:
    """Give JAX ``n`` CPU devices (default: one per core, at least 2), so that a sweep's packs
    run on every core at once: the batch axis is sharded over them like over GPUs.

    XLA gives the whole CPU one device, and a pack's small kernels use one core. At least 2
    because any number ≥ 2 of devices gives bit-identical numbers (one device differs in
    the last float32 bits), so the default gives the same numbers on every machine. Must run
    before JAX's first computation. Returns the count set, or None where it left JAX alone:
    JAX has started already, or (with ``n`` None) the user chose a count with ``XLA_FLAGS=
    --xla_force_host_platform_device_count=N`` or ``JAX_NUM_CPU_DEVICES``.
    """
    if n is None:
        chosen = "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
        if chosen or os.environ.get("JAX_NUM_CPU_DEVICES"):
            return None
        n = max(2, cpu_cores())
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:  # the backend is up: its devices stay as they are
        return None
    return n


DEVICE_KINDS = ("auto", "cpu", "gpu")


def select_devices(kind: str = "auto") -> list[jax.Device]:
    """The devices a sweep shards over: all of JAX's default backend, or all CPU / GPU devices."""
    if kind == "auto":
        return jax.devices()
    if kind == "cpu":
        return jax.devices("cpu")
    if kind == "gpu":
        try:
            return jax.devices("gpu")
        except RuntimeError:
            raise ValueError(
                "device='gpu' but JAX sees no GPU (a CPU-only jaxlib, or no visible GPU): install "
                "jax[cuda12] on a GPU machine, or use --device cpu or auto"
            ) from None
    raise ValueError(f"device={kind!r} is not one of {', '.join(map(repr, DEVICE_KINDS))}")


class BatchPlacer:
    """Places batches and data on a one-axis device mesh and brings results back.

    The batch axis is sharded over all ``devices`` (its length a multiple of their number);
    the data is replicated. Works across hosts after
    ``jax.distributed.initialize()``: each process passes the same host arrays and keeps
    only its devices' slices, and results are all-gathered back to every process.
    """

    def __init__(self, devices: list[jax.Device] | None = None):
        self.devices = list(devices) if devices is not None else jax.devices()
        if not self.devices:
            raise ValueError("devices is empty: give at least one JAX device")
        self.mesh = Mesh(np.array(self.devices), (BATCH_AXIS,))
        self.sharded = NamedSharding(self.mesh, PartitionSpec(BATCH_AXIS))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.platform = self.devices[0].platform

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def memory_limit(self) -> int | None:
        """The bytes one device may allocate (an accelerator's ``bytes_limit``), None where JAX does
        not say (the CPU: the host's memory, ``sweeps.memory``, is the limit there)."""
        try:
            stats = self.devices[0].memory_stats()
        except (RuntimeError, NotImplementedError):
            return None
        limit = (stats or {}).get("bytes_limit")
        return int(limit) if limit else None

    def _put(self, host: np.ndarray, sharding: NamedSharding) -> jax.Array:
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    def batch(self, batch: Batch) -> Batch:
        return jax.tree_util.tree_map(lambda x: self._put(np.asarray(x), self.sharded), batch)

    def data(self, data: Data) -> Data:
        """Replicate the data on every device, floats in the working precision (float64 under x64;
        the data models draw in float32, so x64 simulates the same draws in float64)."""

        def host(x):
            x = np.asarray(x)
            return x.astype(float_dtype()) if np.issubdtype(x.dtype, np.floating) else x

        return jax.tree_util.tree_map(lambda x: self._put(host(x), self.replicated), data)

    def fetch(self, tree):
        """Device arrays -> numpy on this process (all-gathered when several processes share them)."""
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils  # lazy: only with several processes

            tree = multihost_utils.process_allgather(tree, tiled=True)
        return jax.tree_util.tree_map(np.asarray, tree)


def device_name(devices=None) -> str:
    """'cpu:cpu x1', 'gpu:NVIDIA H100 80GB HBM3 x1', ...: the devices a sweep ran on (default: JAX's)."""
    devices = list(devices) if devices is not None else jax.devices()
    dev = devices[0]
    return f"{dev.platform}:{getattr(dev, 'device_kind', dev.platform)} x{len(devices)}"
