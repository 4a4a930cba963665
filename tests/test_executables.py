"""The cache of whole compiled programs (dynamics.infra.executables): a second run neither traces nor
compiles, and nothing it keeps can change a number or fail a run."""

from __future__ import annotations

import os
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dynamics.config.sections import DataConfig
from dynamics.core import data as core_data
from dynamics.infra import cache, executables
from dynamics.infra.timings import Timings


@partial(jax.jit, static_argnames="power")
def _poly(x, power):
    return {"y": jnp.sum(x**power), "z": x * 2.0}


@pytest.fixture
def folder(tmp_path):
    """The persistent caches on in ``tmp_path`` for one test (off again afterwards, as the rest
    of the session runs); this process's loaded programs forgotten before and after."""
    executables._loaded.clear()
    cache.enable(tmp_path)
    try:
        yield tmp_path / executables.FOLDER
    finally:
        cache.enable(None)
        jax.config.update("jax_compilation_cache_dir", None)
        executables._loaded.clear()


def _call(power=3, x=None):
    x = jnp.arange(5.0) if x is None else x
    return executables.call(_poly, "test.poly", {"power": power}, {"x": x})


def test_off_without_the_persistent_cache():
    # Off explicitly: a command line run in this process (another test's main()) turns it on.
    cache.enable(None)
    jax.config.update("jax_compilation_cache_dir", None)
    before = dict(executables._loaded)
    out = _call()
    assert float(out["y"]) == float(np.sum(np.arange(5.0) ** 3))
    assert executables._folder() is None and executables._loaded == before  # plain jax.jit


def test_kept_loaded_and_the_same(folder):
    first = _call()
    [entry] = folder.glob("*.xla")
    executables._loaded.clear()  # as a new process: from the disk
    timings = Timings().start()
    timings.listen()
    second = _call()
    timings.stop()
    assert timings.programs == timings.cache_hits == 1  # loaded, not traced nor compiled
    for k in first:
        np.testing.assert_array_equal(first[k], second[k])
    assert entry.exists()


def test_key_follows_static_arguments_shapes_and_dtypes(folder):
    _call(power=3)
    _call(power=2)
    _call(x=jnp.arange(6.0))
    _call(x=jnp.arange(5, dtype=jnp.int32))
    assert len(list(folder.glob("*.xla"))) == 4
    assert float(_call(power=2)["y"]) == 30.0


def test_key_follows_the_code(monkeypatch):
    args = ("test.poly", {"power": 3}, {"x": jnp.arange(5.0)})
    before = executables.program_key(*args)
    monkeypatch.setattr(executables, "_source_digest", lambda: "edited")
    assert executables.program_key(*args) != before


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_damaged_entry_is_removed_and_compiled_again(folder, damage):
    expected = _call()
    [entry] = folder.glob("*.xla")
    blob = bytearray(entry.read_bytes())
    if damage == "flip":
        blob[len(blob) // 2] ^= 0xFF
    elif damage == "truncate":
        blob = blob[: len(blob) // 3]
    else:
        blob = bytearray(b"not a program")
    entry.write_bytes(bytes(blob))
    executables._loaded.clear()
    again = _call()
    np.testing.assert_array_equal(expected["z"], again["z"])
    assert entry.read_bytes() != bytes(blob)  # kept anew


def test_unwritable_folder_only_keeps_nothing(folder):
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("a file where the folder should be")
    assert float(_call()["y"]) == 100.0


def test_eviction_removes_least_recently_used_and_stale_temporaries(folder):
    for power in (1, 2, 3):
        _call(power=power)
    entries = sorted(folder.glob("*.xla"), key=lambda p: p.stat().st_mtime)
    old = time.time() - 2 * executables._STALE_TMP_S
    for age, path in enumerate(entries):
        os.utime(path, (old + age, old + age))  # power 1 least recently used
    stale = folder / ".x.xla.abc.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (old, old))
    fresh = folder / ".y.xla.abc.tmp"
    fresh.write_bytes(b"being written")
    size = entries[0].stat().st_size
    executables._evict(folder, max_bytes=sum(p.stat().st_size for p in entries) - size)
    assert not entries[0].exists() and entries[1].exists() and entries[2].exists()
    assert not stale.exists() and fresh.exists()


def test_is_kept_says_whether_call_would_trace(folder):
    assert not executables.is_kept("test.poly", {"power": 3}, {"x": jnp.arange(5.0)})
    _call()
    assert executables.is_kept("test.poly", {"power": 3}, {"x": jnp.arange(5.0)})
    executables._loaded.clear()  # as a new process: on disk
    assert executables.is_kept("test.poly", {"power": 3}, {"x": jnp.arange(5.0)})
    assert not executables.is_kept("test.poly", {"power": 2}, {"x": jnp.arange(5.0)})


def test_a_kept_data_draw_is_not_traced_again(folder, monkeypatch):
    """make_data checks one trial's shapes by tracing it before a compile; a kept program is not
    traced, so neither is its check (it passed when the program was made)."""
    cfg, key = DataConfig(model="dm1", n_train=8, n_test=8), np.array([0, 7], np.uint32)
    first, _ = core_data.make_data(cfg, key, 2)
    executables._loaded.clear()
    traced = []
    monkeypatch.setattr(core_data, "draw_trial", lambda *a, **k: traced.append(a) or 1 / 0)
    again, _ = core_data.make_data(cfg, key, 2)
    assert traced == []
    np.testing.assert_array_equal(np.asarray(again.X_test), np.asarray(first.X_test))
    executables._loaded.clear()
    other = DataConfig(model="dm1", n_train=8, n_test=9)  # not kept: traced (the patched draw fails)
    with pytest.raises(ZeroDivisionError):
        core_data.make_data(other, key, 2)
