"""``dynamics.infra.startup``: JAX's look for a ROCm plugin sees every distribution that may be one,
and nothing is left patched after the block."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from types import SimpleNamespace

from helpers import child_env

from dynamics.infra.startup import maybe_rocm, narrowed_plugin_scan


def fake(name: str | None, metadata_name: str) -> SimpleNamespace:
    """A distribution as the scan sees it: its folder's normalised name (None: not told) and metadata."""
    dist = SimpleNamespace(metadata={"Name": metadata_name})
    if name is not None:
        dist._normalized_name = name
    return dist


def test_the_scan_keeps_a_rocm_plugin_and_drops_the_rest(monkeypatch):
    plugin = fake("jax_rocm7_plugin", "jax-rocm7-plugin")
    untold = fake(None, "something")
    installed = [fake("numpy", "numpy"), plugin, fake("jaxlib", "jaxlib"), untold]
    monkeypatch.setattr(importlib.metadata, "distributions", lambda **kw: iter(installed))
    monkeypatch.delitem(sys.modules, "jax")  # as before JAX's import (restored after the test)
    with narrowed_plugin_scan():
        seen = list(importlib.metadata.distributions())
    assert seen == [plugin, untold]
    assert list(importlib.metadata.distributions()) == installed  # restored


def test_the_scan_is_untouched_once_jax_is_imported():
    before = importlib.metadata.distributions
    with narrowed_plugin_scan():
        assert importlib.metadata.distributions is before
    assert importlib.metadata.distributions is before


def test_every_installed_rocm_plugin_passes_the_filter():
    """jax's own test on the real environment's metadata: whatever it would keep, the filter keeps."""
    names = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name", "") or ""
        names.append(name)
        if name.startswith("jax-rocm") and name.endswith("-plugin"):
            assert maybe_rocm(dist), name
    assert any(n == "jax" for n in names)  # the scan read this environment
    assert not maybe_rocm(fake("jax_cuda12_plugin", "jax-cuda12-plugin"))


def test_import_jax_starts_no_backend_inside_the_narrowed_block():
    """JAX's backends look for plugins by entry point when they start, through ``distributions()``:
    that must not happen while it is narrowed. In a fresh process: import_jax imports JAX, starts
    no backend, and leaves ``distributions`` as it was."""
    code = (
        "import importlib.metadata, sys\n"
        "before = importlib.metadata.distributions\n"
        "from dynamics.infra.startup import import_jax\n"
        "import_jax()\n"
        "from jax._src import xla_bridge\n"
        "assert 'jax' in sys.modules and not xla_bridge._backends, xla_bridge._backends\n"
        "assert importlib.metadata.distributions is before\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
