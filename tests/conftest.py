import jax
import pytest

# Catch silent broadcasting bugs: a shape mismatch must be an error, never a broadcast.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def x64():
    """Run a test in float64 (for comparisons against float64 references)."""
    with jax.enable_x64(True):
        yield


# Start JAX's backend now, with the devices the environment gives (one CPU device unless
# XLA_FLAGS says otherwise): the command lines' default CPU split (devices.split_cpu) is then
# a no-op in this process, whatever test calls a command line first.
jax.devices()
