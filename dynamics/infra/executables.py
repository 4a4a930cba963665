"""Compiled programs kept on disk whole: a second run neither compiles nor traces them.

JAX's persistent cache (``dynamics.infra.cache``) saves the XLA compile, but to find an entry JAX
traces the Python function and lowers it to compute the key: about 0.2 s per program here,
most of what a second run spends in its compile phase. This cache keys a program without
tracing it, by what determines it:

- the function's name, its static arguments, and the tree, shapes, dtypes and shardings of
  its array arguments;
- every part (``dynamics.parts``) the static arguments name: its metadata and the source of its
  implementation (``Part.fingerprint``), so a replaced or patched part never gets another's
  program; a part whose source cannot be read is never kept;
- a fingerprint of everything else that could change the traced program: the source of every
  module of the ``dynamics`` and ``datamodels`` packages, the versions of Python, JAX, jaxlib,
  optax and numpy, JAX's configuration (x64, matmul precision, ...), ``XLA_FLAGS``, the
  devices and the host CPU's model and instruction-set flags.

It keeps each program's executable (``jax.experimental.serialize_executable``) in
``<JAX's cache folder>/executables`` and is on exactly when JAX's persistent cache is (the
command lines; ``dynamics.infra.cache.enable`` for library calls); otherwise ``call`` is the plain
``jax.jit`` call. The programs it keeps (the engine's and the data draw's) are compiled with
JAX's cache off, so they are kept once, here; JAX's cache keeps the others (demos, theory).

Safety, as for JAX's cache: a change of the code or the environment changes the key, so a
program is never loaded for code it was not compiled from; an entry carries the SHA-256 of
its payload, checked before it is unpickled; an entry that fails to load is removed and the
program compiled anew; files are written atomically (``dynamics.infra.files``); past ``MAX_BYTES``
the least recently used entries are removed. The entries are code, as JAX's are: whoever can
write to the cache folder can run code in your process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import platform
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.experimental.compilation_cache import compilation_cache as cc

from dynamics.infra import fingerprints
from dynamics.infra.files import atomic_write_bytes
from dynamics.infra.timings import PROGRAM_LOAD_EVENT

FOLDER = "executables"  # inside JAX's cache folder (JAX's own LRU only touches its *-cache files)
SUFFIX = ".xla"
MAX_BYTES = 2**30
_PACKAGES = ("dynamics", "datamodels")
_STALE_TMP_S = 3600  # a temporary file this old was left by a killed writer

_loaded: dict[str, Any] = {}  # key -> executable, for this process


def call(fn, name: str, static: dict[str, Any], arrays: dict[str, Any]):
    """``fn(**static, **arrays)`` for a ``jax.jit`` function ``fn`` whose ``static_argnames`` are
    the keys of ``static``, the executable coming from this process, the disk, or a compile.
    ``name`` (letters, digits, dots) names the program's file.

    Traced with full float32 matmuls (``exact_matmuls``): on a GPU JAX's default would multiply
    float32 in TF32 (about 3 decimal digits); on the CPU it changes nothing."""
    with exact_matmuls():
        return _call(fn, name, static, arrays)


def is_kept(name: str, static: dict[str, Any], arrays: dict[str, Any]) -> bool:
    """Whether ``call`` with these arguments finds its executable in this process or on disk, so
    runs it without tracing it (a kept program was traced, its checks passed, when it was made)."""
    folder = _folder()
    with exact_matmuls():  # as ``call`` keys it: the precision is part of the fingerprint
        key = None if folder is None else program_key(name, static, arrays)
    return key is not None and (key in _loaded or (folder / f"{key}{SUFFIX}").is_file())


def exact_matmuls():
    """``jax.default_matmul_precision("highest")``: every program mhsim traces multiplies float32
    in full float32 on every backend (JAX's GPU default is TF32), so a GPU's numbers agree with
    the CPU's to float32 rounding. A user calling the model's functions directly on a GPU gets
    the same by entering this context."""
    return jax.default_matmul_precision("highest")


def _call(fn, name: str, static: dict[str, Any], arrays: dict[str, Any]):
    folder = _folder()
    if folder is None:
        return fn(**static, **arrays)
    key = program_key(name, static, arrays)
    if key is None:  # built from a part whose source cannot be read: never kept
        return fn(**static, **arrays)
    compiled = _loaded.get(key)
    if compiled is None:
        path = folder / f"{key}{SUFFIX}"
        compiled = _load(path)
        if compiled is None:
            lowered = fn.lower(**static, **arrays)
            with _without_jax_cache():
                compiled = lowered.compile()
            _store(path, compiled)
        _loaded[key] = compiled
    return compiled(**arrays)


@contextlib.contextmanager
def _without_jax_cache():
    """JAX's persistent cache off for one compile: this cache keeps the fresh executable. (One
    that JAX loaded from its own cache cannot be serialised again: it loads, then fails when
    run, "Function wrapped_iota not found", jaxlib 0.10.2 on the CPU.)"""
    cc.reset_cache()  # JAX decides once per process whether to use its cache: decide again
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", True)
        cc.reset_cache()


def program_key(name: str, static: dict[str, Any], arrays: dict[str, Any]) -> str | None:
    """A program's key, ``name-<hex digest>`` (its file name): the digest of ``name``, ``static``,
    the arguments' layout, the fingerprint and the parts the static arguments name (their
    metadata and source: ``Part.fingerprint``). None if one of those parts has no readable source."""
    used = fingerprints.describe(static)  # the parts it names (``dynamics.parts.rules`` registers them)
    if used is None:
        return None
    leaves, tree = jax.tree_util.tree_flatten(arrays)
    parts = [name, str(tree), fingerprint(), used]
    parts += [f"{k}={_describe(v)}" for k, v in sorted(static.items())]
    parts += [_layout(x) for x in leaves]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
    return f"{name}-{digest}"


def fingerprint() -> str:
    """What else a traced program depends on: code, versions, JAX's configuration, devices."""
    import optax  # lazy: optax: only when a program is kept or loaded

    devices = jax.devices()
    config = sorted((k, repr(v)) for k, v in jax.config.values.items())
    parts = [
        _source_digest(),
        sys.version,
        jax.__version__,
        jaxlib.__version__,
        optax.__version__,
        np.__version__,
        repr(config),
        # context managers (jax.default_matmul_precision, enable_x64) are not in config.values
        repr(jax.config.jax_default_matmul_precision),
        repr(jax.config.jax_enable_x64),
        os.environ.get("XLA_FLAGS", ""),
        repr([(d.platform, d.device_kind, d.id) for d in devices]),
        devices[0].client.platform_version,
        str(jax.process_count()),
        _cpu(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@functools.cache
def _source_digest() -> str:
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[2]
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _cpu() -> str:
    """The host CPU's model and instruction-set flags: XLA:CPU compiles for the CPU it runs on,
    so a cache folder shared by two machines (a network home) must not hand one's programs to
    the other."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's
    return f"{fields.get('model name', '')} {fields.get('flags', fields.get('Features', ''))}"


def _layout(x) -> str:
    sharding = _describe(getattr(x, "sharding", None))
    return f"{type(x).__name__} {getattr(x, 'shape', ())} {getattr(x, 'dtype', '')} {sharding}"


def _describe(value) -> str:
    """``repr``, with the device ids of a mesh (a Mesh's repr names only its axes and sizes)."""
    mesh = value if hasattr(value, "device_ids") else getattr(value, "mesh", None)
    ids = getattr(mesh, "device_ids", None)
    return repr(value) if ids is None else f"{value!r} on devices {ids.tolist()}"


def _folder() -> Path | None:
    if not jax.config.jax_enable_compilation_cache:
        return None
    base = jax.config.jax_compilation_cache_dir
    return Path(base) / FOLDER if base else None


def _load(path: Path):
    """The executable in ``path``, or None (absent, damaged or not loadable: then removed)."""
    start = time.time()
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    # lazy: only when a program is kept or loaded
    from jax.experimental.serialize_executable import deserialize_and_load

    try:
        digest, payload = blob[:32], blob[32:]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError(f"{path}: checksum mismatch")
        if b"lapack_" in payload:  # it calls LAPACK (the data models' QR): bind it first
            bind_lapack()
        serialized, in_tree, out_tree, ids = pickle.loads(payload)
        devices = {d.id: d for d in jax.devices()}
        compiled = deserialize_and_load(
            serialized, in_tree, out_tree, execution_devices=[devices[i] for i in ids]
        )
    except Exception:  # any damage or incompatibility: compile instead (a cache never fails a run)
        path.unlink(missing_ok=True)
        return None
    try:
        os.utime(path)  # most recently used
    except OSError:
        pass
    jax.monitoring.record_event_time_span(PROGRAM_LOAD_EVENT, start, time.time())
    return compiled


def bind_lapack() -> None:
    """Bind jaxlib's CPU LAPACK functions. jaxlib binds them when it lowers a LAPACK call (a QR, an
    SVD); a program loaded here was never lowered in this process, and its LAPACK calls would jump
    to unbound functions: a segfault (a second run on single-location data, jaxlib 0.10.2)."""
    try:
        import jaxlib.lapack as lapack  # lazy: not in every jaxlib (the except below lowers a QR instead)

        lapack.prepare_lapack_call("geqrf_ffi", np.dtype(np.float32))  # binds every LAPACK function
    except Exception:  # another jaxlib: lower a QR, which binds them the same way
        jax.jit(jnp.linalg.qr).lower(jax.ShapeDtypeStruct((2, 2), jnp.float32))


def _store(path: Path, compiled) -> None:
    """Keep ``compiled`` in ``path``; a program that cannot be kept (full disk, read-only folder,
    an executable JAX cannot serialise) is only not kept."""
    from jax.experimental.serialize_executable import serialize  # lazy: only when a program is kept or loaded

    try:
        payload = pickle.dumps((*serialize(compiled), _device_ids(compiled)))
        atomic_write_bytes(path, hashlib.sha256(payload).digest() + payload)
        _evict(path.parent)
    except (OSError, pickle.PicklingError, TypeError, ValueError, RuntimeError):
        pass


def _device_ids(compiled) -> list[int]:
    """The devices ``compiled`` runs on, in its order: a mesh's, or its one device. A program
    must be loaded onto the same devices (loaded onto all, a one-device program expects every
    argument split in as many shards)."""
    shardings = jax.tree_util.tree_leaves(compiled.input_shardings)
    if not shardings:
        raise ValueError("a program without array arguments is not kept")
    mesh = getattr(shardings[0], "mesh", None)
    if mesh is not None:
        return [d.id for d in mesh.devices.flat]
    devices = shardings[0].device_set
    if len(devices) != 1:
        raise ValueError(f"a program on {len(devices)} devices without a mesh is not kept")
    return [next(iter(devices)).id]


def _evict(folder: Path, max_bytes: int = MAX_BYTES) -> None:
    """Remove the least recently used entries past ``max_bytes``, and stale temporary files."""
    now = time.time()
    entries = []
    for path in folder.iterdir():
        try:
            stat = path.stat()
        except OSError:
            continue
        if path.name.endswith(".tmp") and now - stat.st_mtime > _STALE_TMP_S:
            path.unlink(missing_ok=True)
        elif path.suffix == SUFFIX:
            entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
