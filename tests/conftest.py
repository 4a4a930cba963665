import atexit
import os
import shutil
import tempfile

# Every program the tests compile (the library's engine and data programs, the tests' own) is
# compiled at XLA:CPU's backend optimisation level 0 (LLVM's optimisations off), inherited by the
# processes the tests start: the compiles, most of the tests' time, take about half as long. The
# numbers may differ from those of the default level, the one users run, in the last bits, so
# every bit-for-bit comparison in the suite compares programs of one level, and the tests that pin
# numbers to arrays stored from the default level compare to float32 rounding here.
# tests/test_users_level.py runs those, and the bit-identity properties, again at the default
# level; MHSIM_TEST_XLA=default runs the whole suite there. Set before JAX starts its backend.
_LEVEL = "--xla_backend_optimization_level"
if os.environ.get("MHSIM_TEST_XLA", "") != "default" and _LEVEL not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_LEVEL}=0".strip()

import jax  # noqa: E402  (after XLA_FLAGS)
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# CI (HYPOTHESIS_PROFILE=ci in .ci/run) draws the same examples on every run, so what lands does
# not depend on luck; a developer's run draws new ones each time and explores further.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The command lines keep compiled programs in a persistent cache (dynamics.infra.cache), by default
# in the user's home: the tests' command lines, in this process and in subprocesses, use a
# fresh folder of their own instead, removed at exit. pytest-xdist's workers inherit the folder
# of the process that started them, so a program one worker compiled is loaded by the others.
_CACHE = os.environ.get("MHSIM_TEST_CACHE_DIR", "")
if not os.path.isdir(_CACHE):  # the first pytest process (xdist's controller, or -n 0) makes it
    _CACHE = tempfile.mkdtemp(prefix="mhsim-test-jax-cache-")
    os.environ["MHSIM_TEST_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["MHSIM_CACHE_DIR"] = _CACHE

# Catch silent broadcasting bugs: a shape mismatch must be an error, never a broadcast.
jax.config.update("jax_numpy_rank_promotion", "raise")
# Full float32 matmuls on every backend: mhsim's own programs ask for them
# (dynamics.infra.executables.exact_matmuls); the tests' references and the model functions they
# call directly must too, or on a GPU they would multiply in TF32 (on the CPU this changes nothing).
jax.config.update("jax_default_matmul_precision", "highest")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.slow_cases(*ids)``: the cases of a parametrised test not named stay out of the
    quick run (marked ``slow``). When whole files were collected, a name that matches no case is an
    error, so renaming a case never silently moves the whole test out of the quick run."""
    seen: dict[tuple, tuple[set[str], tuple[str, ...]]] = {}
    for item in items:
        marker = item.get_closest_marker("slow_cases")
        if marker is None:
            continue
        case = item.callspec.id if hasattr(item, "callspec") else ""
        seen.setdefault((item.path, item.originalname), (set(), marker.args))[0].add(case)
        if case not in marker.args:
            item.add_marker(pytest.mark.slow)
    if any("::" in arg for arg in config.args):  # some cases picked by name: the others are not here
        return
    for (path, name), (cases, keep) in seen.items():
        unknown = set(keep) - cases
        if unknown:
            raise pytest.UsageError(f"{path.name}::{name}: slow_cases names no case {sorted(unknown)}")


@pytest.fixture
def x64():
    """Run a test in float64 (for comparisons against float64 references)."""
    with jax.enable_x64(True):
        yield


# Start JAX's backend now, with the devices the environment gives (one CPU device unless
# XLA_FLAGS says otherwise): the command lines' default CPU split (devices.split_cpu) is then
# a no-op in this process, whatever test calls a command line first.
jax.devices()
